package worker

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// keepTimeout bounds one load of an always-on model: a large model takes
// a minute or two from a slow disk.
const keepTimeout = 10 * time.Minute

// When a kept model's engine keeps dropping it soon after its load, the
// models kept do not fit the engine together (Ollama evicts a model,
// however kept, to load another it has no room for): loading each in turn
// would only evict the other. A model dropped within keepSoon of its load
// twice in a row is loaded again only after a pause, a minute doubling up
// to keepPauseMax.
const (
	keepSoon     = 10 * time.Minute
	keepPauseMax = 30 * time.Minute
)

// keeper is keepLoop's own state.
type keeper struct {
	// kept are the models this process has loaded to keep, with when.
	kept map[string]time.Time
	// soon counts each model's drops in a row that came within keepSoon
	// of its load, and paused holds one back until then.
	soon   map[string]int
	paused map[string]time.Time
	// failed is each model's last failure, so that a load failing the
	// same way at every listing is logged once.
	failed map[string]string
	// absent are the always-on models last logged as offered by no
	// engine.
	absent string
}

// keepLoop loads the always-on models as engines offer them, and loads
// one again when a listing shows that its engine dropped it (Ollama
// restarted, or needed the memory for another model). It looks again
// whenever the models were listed.
func (a *Agent) keepLoop(ctx context.Context) {
	if len(a.cfg.AlwaysOn) == 0 {
		return
	}
	k := &keeper{kept: map[string]time.Time{}, failed: map[string]string{}, soon: map[string]int{}, paused: map[string]time.Time{}}
	for {
		if a.keepListed(ctx, k) {
			// The listing that woke the loop predates the loads: list
			// again, so that the gateway and the next look see them
			// loaded. Its wake is not drained: one from an install that
			// ended during the loads shares the channel.
			a.refreshModels(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-a.keepWake:
		}
	}
}

// keepListed loads every always-on model the last listing offers that
// this process has not loaded or that the listing shows unloaded. It
// reports whether it loaded any.
func (a *Agent) keepListed(ctx context.Context, k *keeper) (loadedAny bool) {
	// A model kept before whose engine does not say whether it is loaded
	// (an Ollama behind the OpenAI API) is kept again at every listing:
	// that costs a loaded model nothing, and loads a dropped one again.
	// Only a load is reported.
	type due struct {
		id    string
		s     served
		again bool
	}
	var todo []due
	a.mu.Lock()
	listed := a.byModel
	for _, m := range a.models {
		if _, kept := k.kept[m.ID]; m.AlwaysOn && (!kept || m.Loaded == nil || !*m.Loaded) {
			todo = append(todo, due{m.ID, a.byModel[m.ID], kept && m.Loaded == nil})
		}
	}
	a.mu.Unlock()
	todo = slices.DeleteFunc(todo, func(d due) bool {
		if d.again {
			return k.pausedNow(d.id)
		}
		at, kept := k.kept[d.id]
		return kept && !k.dropped(a.log, d.id, at)
	})

	var absent []string
	for _, name := range a.cfg.AlwaysOn {
		if !offered(name, listed) {
			absent = append(absent, name)
		}
	}
	if s := strings.Join(absent, ", "); s != k.absent {
		k.absent = s
		if s != "" {
			a.log.Info("always-on models no engine offers yet, loaded once one does", "models", s)
		}
	}

	for _, d := range todo {
		if ctx.Err() != nil {
			return loadedAny
		}
		kp, ok := d.s.eng.(engine.Keeper)
		if !ok {
			// vLLM, llama-server and the local programs hold what they
			// serve from their start: there is nothing to load.
			k.kept[d.id] = time.Now()
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, keepTimeout)
		took, err := kp.Keep(lctx, d.s.local)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return loadedAny
			}
			if msg := err.Error(); k.failed[d.id] != msg {
				k.failed[d.id] = msg
				a.log.Warn("always-on model did not load; tried again at the next listing", "model", d.id, "err", err)
			}
			continue
		}
		delete(k.failed, d.id)
		if d.again {
			if took == 0 {
				continue // loaded all along
			}
			// A load is how such an engine tells that it dropped the
			// model: counted as a drop seen now, which may pause the
			// next. The listing that woke the loop is not repeated for
			// it: the engine's listing would not show the load.
			k.dropped(a.log, d.id, k.kept[d.id])
		} else {
			loadedAny = true
		}
		k.kept[d.id] = time.Now()
		load := &api.ModelLoad{Model: d.id}
		detail := d.id + " kept loaded (always-on)"
		if took > 0 {
			ms := float64(took) / float64(time.Millisecond)
			load.LoadMs = &ms
			detail = d.id + " loaded to keep (always-on)"
		}
		a.log.Info("always-on model loaded", "model", d.id, "load", took)
		a.report(api.WorkerEventReport{EventType: api.EventModelLoaded, Detail: detail, Load: load})
	}
	return loadedAny
}

// offered reports whether a model named name (sameModel) is in listed.
func offered(name string, listed map[string]served) bool {
	for id := range listed {
		if sameModel(name, id) {
			return true
		}
	}
	return false
}

// pausedNow reports whether model id waits out a pause, ending one that
// is over.
func (k *keeper) pausedNow(id string) bool {
	until, ok := k.paused[id]
	if ok && time.Now().Before(until) {
		return true
	}
	delete(k.paused, id)
	return false
}

// dropped notes that the engine dropped model id, loaded to keep at
// loadedAt, and reports whether to load it again now: at once, unless it
// was dropped soon after its load twice in a row, which starts a pause;
// and once a pause is over.
func (k *keeper) dropped(log *slog.Logger, id string, loadedAt time.Time) bool {
	now := time.Now()
	if until, ok := k.paused[id]; ok {
		if now.Before(until) {
			return false
		}
		delete(k.paused, id)
		return true
	}
	if now.Sub(loadedAt) < keepSoon {
		k.soon[id]++
	} else {
		k.soon[id] = 0
	}
	if n := k.soon[id]; n >= 2 {
		pause := min(time.Minute<<(n-2), keepPauseMax)
		k.paused[id] = now.Add(pause)
		log.Warn("always-on model dropped again soon after its load: the engine may not hold every always-on model at once (Ollama: GPU memory, OLLAMA_MAX_LOADED_MODELS); loaded again after a pause",
			"model", id, "pause", pause)
		return false
	}
	log.Info("always-on model dropped by its engine; loading it again", "model", id)
	return true
}
