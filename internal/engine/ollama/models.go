package ollama

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc/internal/api"
)

// showParallel bounds concurrent /api/show calls: Ollama reads model
// metadata from disk for each.
const showParallel = 4

// showEntry is a cached /api/show answer, valid while the digest holds.
type showEntry struct {
	digest string
	model  api.Model
}

// samplingKeys are the Modelfile parameters reported as sampling defaults.
var samplingKeys = []string{"temperature", "top_p", "top_k", "min_p", "repeat_penalty"}

// Models lists the installed models with their capabilities, context
// window, sampling defaults and whether Ollama holds them in memory.
func (e *Engine) Models(ctx context.Context) ([]api.Model, error) {
	var tags struct {
		Models []struct {
			Name   string `json:"name"`
			Model  string `json:"model"`
			Digest string `json:"digest"`
		} `json:"models"`
	}
	if err := e.call(ctx, http.MethodGet, "/api/tags", nil, &tags); err != nil {
		return nil, fmt.Errorf("ollama: list models: %w", err)
	}

	models := make([]api.Model, len(tags.Models))
	var g errgroup.Group
	g.SetLimit(showParallel)
	for i, t := range tags.Models {
		name := t.Name
		if name == "" {
			name = t.Model
		}
		g.Go(func() error {
			models[i] = e.describe(ctx, name, t.Digest)
			return nil
		})
	}
	_ = g.Wait() // describe never fails: it falls back on the name
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ollama: list models: %w", err)
	}
	e.pruneShows(models)

	// Loaded state is best effort: a failing /api/ps leaves it unknown
	// rather than failing the list.
	since := e.lastMark()
	if loaded, err := e.ps(ctx); err == nil {
		e.setLoaded(loaded, since)
		for i := range models {
			models[i].Loaded = ptr(loaded[ModelKey(models[i].ID)])
		}
	}
	e.mu.Lock()
	for i := range models {
		models[i].ContextWindow = within(models[i].ContextWindow, e.contexts[ModelKey(models[i].ID)])
	}
	e.mu.Unlock()
	return models, nil
}

// within is the context window of a model trained for trained tokens
// that Ollama runs with n (0: not known).
func within(trained, n int) int {
	if n > 0 && (trained == 0 || n < trained) {
		return n
	}
	return trained
}

// describe returns a model's metadata from the cache or /api/show.
func (e *Engine) describe(ctx context.Context, name, digest string) api.Model {
	e.mu.Lock()
	c, ok := e.shows[name]
	e.mu.Unlock()
	if ok && c.digest == digest {
		return cloneModel(c.model)
	}
	m, err := e.show(ctx, name)
	if err != nil {
		// Not cached, so the next listing asks again.
		return fallbackModel(name)
	}
	e.mu.Lock()
	e.shows[name] = showEntry{digest: digest, model: m}
	e.mu.Unlock()
	return cloneModel(m)
}

// pruneShows drops cache entries for models no longer installed.
func (e *Engine) pruneShows(models []api.Model) {
	e.mu.Lock()
	defer e.mu.Unlock()
	keep := make(map[string]bool, len(models))
	for _, m := range models {
		keep[m.ID] = true
	}
	maps.DeleteFunc(e.shows, func(name string, _ showEntry) bool { return !keep[name] })
}

// show reads one model's metadata from /api/show.
func (e *Engine) show(ctx context.Context, name string) (api.Model, error) {
	var v struct {
		Capabilities []string                   `json:"capabilities"`
		ModelInfo    map[string]json.RawMessage `json:"model_info"`
		Parameters   string                     `json:"parameters"`
	}
	if err := e.call(ctx, http.MethodPost, "/api/show", map[string]string{"model": name}, &v); err != nil {
		return api.Model{}, fmt.Errorf("show %s: %w", name, err)
	}
	m := fallbackModel(name)
	if caps, thinks := capabilities(v.Capabilities); len(caps) > 0 {
		// Older Ollama sends no capabilities; the fallback stays then.
		m.Capabilities = caps
		if thinks {
			m.DefaultThinking = ptr(true)
		}
	}
	m.ContextWindow = within(contextLength(v.ModelInfo), numCtx(v.Parameters))
	m.SamplingDefaults = samplingDefaults(v.Parameters)
	return m, nil
}

// fallbackModel guesses a model's capability from its name, for when
// Ollama cannot say.
func fallbackModel(name string) api.Model {
	capability := api.CapChat
	if strings.Contains(strings.ToLower(name), "embed") {
		capability = api.CapEmbeddings
	}
	return api.Model{ID: name, Capabilities: []string{capability}, Engine: Kind}
}

// capabilities maps Ollama's capability names onto the gateway's. Ollama's
// "insert" (fill-in-the-middle) has no counterpart and is dropped.
func capabilities(in []string) (caps []string, thinks bool) {
	for _, c := range in {
		var out string
		switch c {
		case "completion":
			out = api.CapChat
		case "embedding":
			out = api.CapEmbeddings
		case "vision":
			out = api.CapVision
		case "tools":
			out = api.CapTools
		case "thinking":
			out, thinks = api.CapReasoning, true
		default:
			continue
		}
		if !slices.Contains(caps, out) {
			caps = append(caps, out)
		}
	}
	return caps, thinks
}

// contextLength finds "<architecture>.context_length" in model_info.
func contextLength(info map[string]json.RawMessage) int {
	for k, raw := range info {
		if !strings.HasSuffix(k, ".context_length") {
			continue
		}
		var n float64
		if json.Unmarshal(raw, &n) == nil && n > 0 {
			return int(n)
		}
	}
	return 0
}

// numCtx is the Modelfile's num_ctx parameter, the context Ollama runs
// the model with, if the parameters text sets it; else 0.
func numCtx(params string) int {
	for line := range strings.Lines(params) {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "num_ctx" {
			if n, err := strconv.Atoi(f[1]); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// samplingDefaults reads the Modelfile parameters text, one
// "name value" a line, e.g. "temperature    0.6".
func samplingDefaults(params string) map[string]float64 {
	var out map[string]float64
	for line := range strings.Lines(params) {
		f := strings.Fields(line)
		if len(f) != 2 || !slices.Contains(samplingKeys, f[0]) {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		if out == nil {
			out = make(map[string]float64)
		}
		out[f[0]] = v
	}
	return out
}

// ps returns the models Ollama holds in memory, by ModelKey. A model
// listed counts as loaded whatever its size_vram: 0 only means it sits in
// system memory. The context each was loaded with (Ollama's default for
// the server's memory, OLLAMA_CONTEXT_LENGTH, or the Modelfile's num_ctx)
// is remembered: a prompt longer than it is refused (every request is
// sent with truncate false), so it is the window the worker offers, also
// once the model is unloaded.
func (e *Engine) ps(ctx context.Context) (map[string]bool, error) {
	var v struct {
		Models []struct {
			Name          string `json:"name"`
			Model         string `json:"model"`
			ContextLength int    `json:"context_length"`
		} `json:"models"`
	}
	if err := e.call(ctx, http.MethodGet, "/api/ps", nil, &v); err != nil {
		return nil, fmt.Errorf("ollama: loaded models: %w", err)
	}
	loaded := make(map[string]bool, len(v.Models))
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range v.Models {
		for _, n := range []string{m.Name, m.Model} {
			if n == "" {
				continue
			}
			loaded[ModelKey(n)] = true
			if m.ContextLength > 0 {
				e.contexts[ModelKey(n)] = m.ContextLength
			}
		}
	}
	return loaded, nil
}

// cloneModel copies the slices and maps of a cached model so callers can
// change what they get.
func cloneModel(m api.Model) api.Model {
	m.Capabilities = slices.Clone(m.Capabilities)
	m.SamplingDefaults = maps.Clone(m.SamplingDefaults)
	if m.DefaultThinking != nil {
		m.DefaultThinking = ptr(*m.DefaultThinking)
	}
	return m
}
