package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/link"
)

// served is how the worker serves a model it lists: on which engine, and
// under which of the engine's own names.
type served struct {
	eng   engine.Engine
	local string
	// window is the model's context window in tokens, 0 when unknown.
	window int
	// sampling are the model's recommended sampling values.
	sampling map[string]float64
}

// servedFor is how the worker serves model: its engine (nil when the
// worker does not serve it), the engine's name for it and what it lists.
func (a *Agent) servedFor(model string) served {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byModel[model]
}

// refreshModels asks every engine for its models and tells the gateway
// when the list changed. An engine that fails to answer keeps what it
// had, held back if it refuses to connect. A model offered by two engines
// goes to the first.
func (a *Agent) refreshModels(ctx context.Context) {
	a.mu.Lock()
	last := a.engineModels
	a.mu.Unlock()
	current := make(map[engine.Engine][]api.Model, len(a.cfg.Engines))
	answered := true
	for _, e := range a.cfg.Engines {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ms, err := e.Models(ctx)
		cancel()
		switch {
		case err != nil:
			a.log.Warn("engine did not list its models", "engine", e.Kind(), "err", err)
			ms = last[e]
			answered = false
			// An engine that had models and now refuses to connect has
			// gone: its models are held back without waiting for a
			// request to fail on it.
			if engine.Refused(err) && len(ms) > 0 {
				a.watches[e].refused(probeSample{})
			}
		default:
			a.watches[e].listed()
		}
		current[e] = ms
	}
	models, byModel, missing, hidden := a.listing(current)
	a.mu.Lock()
	changed := !reflect.DeepEqual(models, a.models)
	a.models, a.byModel, a.engineModels = models, byModel, current
	a.listed = answered && len(models) > 0
	warn := missing != a.missingAliases
	a.missingAliases = missing
	warnHidden := hidden != a.hiddenByAlias
	a.hiddenByAlias = hidden
	sess := a.sess
	a.mu.Unlock()
	if warn && missing != "" {
		a.log.Warn("no engine has the local model of these aliases", "aliases", missing)
	}
	if warnHidden && hidden != "" {
		a.log.Warn("these aliases take the ids of models an engine has, which are offered only under any aliases of their own", "aliases", hidden)
	}
	if changed && sess != nil {
		if b, err := json.Marshal(models); err == nil {
			sess.SendControl(link.TypeModels, b)
		}
	}
	select {
	case a.keepWake <- struct{}{}:
	default:
	}
}

// listing is what the worker offers, from what each engine has: every
// model under its own name, or under the names --model-alias gives it. An
// alias takes its id whatever the engines list: a model whose own id an
// alias takes is offered only under aliases of its own, whichever the
// engine lists first. It also names the aliases whose local model no
// engine has, and those that take a model's id.
func (a *Agent) listing(current map[engine.Engine][]api.Model) (models []api.Model, byModel map[string]served, missing, hidden string) {
	public := map[string][]string{} // local name -> the ids it is offered as
	for id, local := range a.cfg.Aliases {
		public[local] = append(public[local], id)
	}
	byModel = map[string]served{}
	found := map[string]bool{}
	var taken []string
	for _, e := range a.cfg.Engines {
		for _, m := range current[e] {
			names := public[m.ID]
			found[m.ID] = found[m.ID] || len(names) > 0
			if len(names) == 0 {
				own := m.ID
				if id, ok := recogniseGuard(m.ID); ok {
					own = id
				}
				if local, ok := a.cfg.Aliases[own]; ok && local != m.ID {
					taken = append(taken, own+"="+local)
					continue
				}
				names = []string{own}
			}
			slices.Sort(names)
			for _, id := range names {
				if _, dup := byModel[id]; dup {
					a.log.Warn("model offered by two engines; the first serves it", "model", id, "engine", e.Kind())
					continue
				}
				entry := m
				if id != m.ID {
					entry.ID, entry.Local = id, m.ID
				}
				entry.AlwaysOn = slices.ContainsFunc(a.cfg.AlwaysOn, func(name string) bool { return sameModel(name, id) })
				entry = a.withMeta(asGuard(entry))
				byModel[id] = served{eng: e, local: m.ID, window: entry.ContextWindow, sampling: entry.SamplingDefaults}
				models = append(models, entry)
			}
		}
	}
	var absent []string
	for id, local := range a.cfg.Aliases {
		if !found[local] {
			absent = append(absent, id+"="+local)
		}
	}
	slices.Sort(absent)
	slices.Sort(taken)
	return models, byModel, strings.Join(absent, ", "), strings.Join(slices.Compact(taken), ", ")
}

// withMeta applies the operator's overrides for a model.
func (a *Agent) withMeta(m api.Model) api.Model {
	o, ok := a.cfg.ModelMeta[m.ID]
	if !ok {
		return m
	}
	if len(o.Capabilities) > 0 {
		m.Capabilities = o.Capabilities
	}
	if o.ContextWindow > 0 {
		m.ContextWindow = o.ContextWindow
	}
	if o.SamplingDefaults != nil {
		m.SamplingDefaults = o.SamplingDefaults
	}
	if o.DefaultThinking != nil {
		m.DefaultThinking = o.DefaultThinking
	}
	if o.Voices != nil {
		m.Voices = o.Voices
	}
	if o.DefaultVoice != "" {
		m.DefaultVoice = o.DefaultVoice
	}
	return m
}

// modelLoop refreshes the models every RefreshModels. A worker started
// before its engine listens would otherwise offer nothing until the next
// refresh: while an engine does not answer, or no model is listed, it
// asks again after 1 s, 2 s, 4 s and so on up to RefreshModels.
func (a *Agent) modelLoop(ctx context.Context) {
	soon := time.Second
	for {
		a.mu.Lock()
		listed := a.listed
		a.mu.Unlock()
		wait := a.cfg.RefreshModels
		if listed {
			soon = time.Second
		} else {
			wait = min(soon, wait)
			soon = min(2*soon, a.cfg.RefreshModels)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		a.refreshModels(ctx)
	}
}

// installProgressEvery is how often an install's progress is reported:
// the gateway shows it as a rental's download progress, so it moves every
// second, but not on every line an engine reports.
const installProgressEvery = time.Second

// pullModels installs the models asked for at start, reporting progress
// to the gateway as worker events. Progress at 100% need not be sent: the
// completed event that follows ends the install.
func (a *Agent) pullModels(ctx context.Context) {
	if len(a.cfg.Pull) == 0 {
		return
	}
	var inst engine.Installer
	for _, e := range a.cfg.Engines {
		if i, ok := e.(engine.Installer); ok {
			inst = i
			break
		}
	}
	if inst == nil {
		a.log.Warn("no engine can install models", "models", a.cfg.Pull)
		return
	}
	for _, model := range a.cfg.Pull {
		// Installs at start begin as the worker links: the start is waited
		// on the link for a while, so that the gateway hears of it, but no
		// longer, so that a gateway out of reach delays no install.
		sctx, cancel := context.WithTimeout(ctx, startReportWait)
		a.reportOnLink(sctx, api.WorkerEventReport{EventType: api.EventModelInstall, Detail: "installing " + model,
			Install: &api.ModelInstall{Model: model, State: api.InstallStarted}})
		cancel()
		last := time.Time{}
		progress := func(p api.PullProgress) {
			if time.Since(last) < installProgressEvery || p.Total == 0 {
				return
			}
			last = time.Now()
			a.report(api.WorkerEventReport{EventType: api.EventModelInstall, Detail: fmt.Sprintf("installing %s: %d%%", model, p.Completed*100/p.Total),
				Install: &api.ModelInstall{Model: model, State: api.InstallProgress, Total: p.Total, Completed: p.Completed}})
		}
		if err := a.pull(ctx, inst, model, progress); err != nil {
			detail := "install of " + model + " failed: " + err.Error()
			rctx := ctx
			if ctx.Err() != nil {
				// Stopped by the worker's own stop: said while the link
				// may still be up, so that the install does not read as
				// under way for good.
				detail = "install of " + model + " stopped: the worker is shutting down"
				var cancel context.CancelFunc
				rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), stopReportWait)
				defer cancel()
			}
			a.log.Error("model install failed", "model", model, "err", err)
			a.reportOnLink(rctx, api.WorkerEventReport{EventType: api.EventModelInstall, Detail: detail,
				Install: &api.ModelInstall{Model: model, State: api.InstallFailed}})
			if ctx.Err() != nil {
				return
			}
			continue
		}
		a.refreshModels(ctx)
		a.reportOnLink(ctx, api.WorkerEventReport{EventType: api.EventModelInstall, Detail: "installed " + model,
			Install: &api.ModelInstall{Model: model, State: api.InstallCompleted}})
	}
}

// pull installs model on inst. An engine started with the worker (a
// rental's Ollama, beside it under systemd) may not listen yet: one that
// refuses the connection is tried again for a while, rather than the
// install failed at once.
func (a *Agent) pull(ctx context.Context, inst engine.Installer, model string, progress func(api.PullProgress)) error {
	wait, since := pullRetryFirst, time.Now()
	for {
		err := inst.Pull(ctx, model, progress)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Since(since) >= pullReachWait {
			return err
		}
		a.log.Info("the engine does not answer yet; the install is tried again", "model", model, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, pullRetryMax)
	}
}

// How long an install waits for an engine that refuses connections, and
// the pauses between its tries.
const (
	pullReachWait  = 5 * time.Minute
	pullRetryFirst = 2 * time.Second
	pullRetryMax   = 30 * time.Second
)

// How long an install's start waits for the link, and its end for a link
// the worker's stop is taking down.
const (
	startReportWait = 30 * time.Second
	stopReportWait  = 2 * time.Second
)

// reportOnLink reports ev once the link is up, for the events the gateway
// must not miss: how an install ended is what makes a rental ready, and
// an install can end before the first connection (a model the engine has
// already) or while the link is down. Progress may be lost; this may not.
func (a *Agent) reportOnLink(ctx context.Context, ev api.WorkerEventReport) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for !a.report(ev) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// report sends ev to the gateway and says whether it went: events are
// not kept while the link is down.
func (a *Agent) report(ev api.WorkerEventReport) bool {
	b, err := json.Marshal(ev)
	if err != nil {
		return false
	}
	a.mu.Lock()
	s := a.sess
	a.mu.Unlock()
	return s != nil && s.SendControl(link.TypeEvent, b)
}

// LoadModelMeta reads a JSON file of per-model overrides:
// {"model-id": {"capabilities": [...], "context_window": N, ...}}.
func LoadModelMeta(path string) (map[string]api.Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read model metadata: %w", err)
	}
	var m map[string]api.Model
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read model metadata %s: %w", path, err)
	}
	return m, nil
}

// sameModel reports whether name, as an operator gave it (--always-on),
// is the model offered as id: the same, or Ollama's name of it without a
// tag, which Ollama lists with its default tag (llama3.2 is offered as
// llama3.2:latest).
func sameModel(name, id string) bool {
	return name == id || !strings.Contains(name, ":") && id == name+":latest"
}
