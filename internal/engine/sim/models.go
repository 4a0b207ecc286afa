package sim

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// model is a served model and, for cold models, whether it is in memory.
type model struct {
	spec ModelSpec

	mu       sync.Mutex
	lastUsed time.Time     // zero until the first load finishes
	loading  chan struct{} // non-nil while a load runs; closed when it ends
	// kept is set by Keep: once loaded, the model is never unloaded.
	kept bool
}

// loaded reports whether a cold model is in memory at now. Warm models
// always are.
func (m *model) loaded(now time.Time) bool {
	if !m.spec.Cold {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.warmLocked(now)
}

func (m *model) warmLocked(now time.Time) bool {
	return !m.lastUsed.IsZero() && (m.kept || now.Sub(m.lastUsed) < ColdIdle)
}

// keep loads the model unless it is loaded and keeps it from then on. A
// load cut short leaves the model as it was, kept once a later load ends.
func (m *model) keep(ctx context.Context, cfg *Config) (time.Duration, error) {
	m.mu.Lock()
	m.kept = true
	m.mu.Unlock()
	wait, _, err := m.acquire(ctx, cfg)
	return wait, err
}

// acquire makes sure the model is loaded before a request uses it. It
// returns how long this request waited for a load (0 when warm) and
// whether it was a cold start. Concurrent requests share one load, as a
// real engine does, and each reports the wait it saw.
func (m *model) acquire(ctx context.Context, cfg *Config) (time.Duration, bool, error) {
	if !m.spec.Cold {
		return 0, false, nil
	}
	start := cfg.Now()
	for {
		m.mu.Lock()
		if m.warmLocked(cfg.Now()) {
			m.lastUsed = cfg.Now()
			m.mu.Unlock()
			return 0, false, nil
		}
		if ch := m.loading; ch != nil {
			// Someone else is loading: wait for it, then look again
			// (the load may have been cancelled).
			m.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return 0, false, ctx.Err()
			}
			if m.loaded(cfg.Now()) {
				return cfg.Now().Sub(start), true, nil
			}
			continue
		}
		ch := make(chan struct{})
		m.loading = ch
		m.mu.Unlock()

		err := cfg.Sleep(ctx, cfg.LoadTime)
		m.mu.Lock()
		m.loading = nil
		if err == nil {
			m.lastUsed = cfg.Now()
		}
		m.mu.Unlock()
		close(ch)
		if err != nil {
			return 0, false, err
		}
		return cfg.LoadTime, true, nil
	}
}

// touch records use at the end of a request, so that the idle time of a
// cold model counts from the last activity.
func (m *model) touch(now time.Time) {
	if !m.spec.Cold {
		return
	}
	m.mu.Lock()
	if !m.lastUsed.IsZero() {
		m.lastUsed = now
	}
	m.mu.Unlock()
}

// listing is the model as the models list shows it now.
func (m *model) listing(now time.Time) api.Model {
	out := m.spec.Model
	out.Capabilities = slices.Clone(m.spec.Capabilities)
	out.Voices = slices.Clone(m.spec.Voices)
	if in := m.spec.Incomplete; in != nil {
		c := *in
		c.Missing = slices.Clone(in.Missing)
		out.Incomplete = &c
	}
	out.SamplingDefaults = maps.Clone(m.spec.SamplingDefaults)
	if m.spec.DefaultThinking != nil {
		v := *m.spec.DefaultThinking
		out.DefaultThinking = &v
	}
	out.Engine = engineKind
	out.Simulated = true
	loaded := m.loaded(now)
	out.Loaded = &loaded
	return out
}

// catalog is the set of models a simulator serves: the configured ones,
// then those Pull installed. Models are only ever added, so a *model
// handed out stays valid; per-model state has its own lock.
type catalog struct {
	mu    sync.RWMutex
	order []*model
	byID  map[string]*model
}

func newCatalog(specs []ModelSpec) *catalog {
	c := &catalog{byID: make(map[string]*model, len(specs))}
	for _, s := range specs {
		c.add(s)
	}
	return c
}

// add serves spec unless a model of its id is served already: the first
// definition wins.
func (c *catalog) add(s ModelSpec) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.byID[s.ID]; dup || s.ID == "" {
		return
	}
	m := &model{spec: s}
	c.order = append(c.order, m)
	c.byID[s.ID] = m
}

func (c *catalog) lookup(id string) (*model, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.byID[id]
	return m, ok
}

// all is the models in the order they were added.
func (c *catalog) all() []*model {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Clone(c.order)
}
