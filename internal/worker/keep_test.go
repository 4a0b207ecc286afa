package worker

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// keepEngine loads models on demand: Keep takes loadTime and marks the
// model loaded, unless it is in fail; drop unloads one. It installs as
// installEngine does.
type keepEngine struct {
	installEngine
	loadTime time.Duration
	fail     map[string]bool
	// evicted are dropped again as soon as they are loaded, as a model
	// that does not fit beside the others is.
	evicted map[string]bool
	// unknown lists the models without their loaded state, as an engine
	// that cannot tell does.
	unknown bool

	kmu    sync.Mutex
	loaded map[string]bool
	keeps  map[string]int
}

func (e *keepEngine) Models(ctx context.Context) ([]api.Model, error) {
	ms, _ := e.installEngine.Models(ctx)
	e.kmu.Lock()
	defer e.kmu.Unlock()
	for _, id := range []string{"a", "b", "bad", "short:latest"} {
		ms = append(ms, api.Model{ID: id, Capabilities: []string{api.CapChat}})
	}
	for i := range ms {
		if loaded := e.loaded[ms[i].ID]; !e.unknown {
			ms[i].Loaded = &loaded
		}
	}
	return ms, nil
}

func (e *keepEngine) Keep(ctx context.Context, model string) (time.Duration, error) {
	e.kmu.Lock()
	e.keeps[model]++
	was := e.loaded[model]
	e.kmu.Unlock()
	if e.fail[model] {
		return 0, errors.New("out of memory")
	}
	if was {
		return 0, nil
	}
	select {
	case <-time.After(e.loadTime):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	e.kmu.Lock()
	e.loaded[model] = !e.evicted[model]
	e.kmu.Unlock()
	return e.loadTime, nil
}

func (e *keepEngine) drop(model string) {
	e.kmu.Lock()
	e.loaded[model] = false
	e.kmu.Unlock()
}

func (e *keepEngine) keepCounts() map[string]int {
	e.kmu.Lock()
	defer e.kmu.Unlock()
	return maps.Clone(e.keeps)
}

var _ engine.Keeper = (*keepEngine)(nil)

// TestAlwaysOn checks that a worker loads its always-on models as soon as
// an engine offers them (an installed one once installed), tells the
// gateway, lists them as such, loads one again when the engine drops it,
// and retries a load that failed at each listing.
func TestAlwaysOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &keepEngine{installEngine: installEngine{start: make(chan struct{}), step: time.Second, steps: 1},
			loadTime: 2 * time.Second, fail: map[string]bool{"bad": true}, loaded: map[string]bool{}, keeps: map[string]int{}}
		f, log, stop := runLinked(t, Config{Engines: []engine.Engine{eng}, Pull: []string{"late"},
			AlwaysOn: []string{"a", "late", "bad", "ghost"}, RefreshModels: 30 * time.Second}, 0)
		time.Sleep(5 * time.Second)
		// bad is tried again at the listing a's load made.
		if got := eng.keepCounts(); got["a"] != 1 || got["bad"] < 1 || got["bad"] > 2 || len(got) != 2 {
			t.Fatalf("keeps before the install %v, want a once and bad once or twice", got)
		}
		ws := f.Workers("org")
		if len(ws) != 1 {
			t.Fatalf("workers %+v", ws)
		}
		for _, m := range ws[0].Models {
			wantOn := m.ID == "a" || m.ID == "bad"
			if m.AlwaysOn != wantOn {
				t.Errorf("%s listed always_on %v", m.ID, m.AlwaysOn)
			}
			if m.ID == "a" && (m.Loaded == nil || !*m.Loaded) {
				t.Errorf("a listed unloaded after its load")
			}
		}

		close(eng.start)
		<-log.completed
		time.Sleep(5 * time.Second)
		if got := eng.keepCounts(); got["late"] != 1 || got["b"] != 0 || got["a"] != 1 {
			t.Fatalf("keeps after the install %v, want late once, a still once, b never", got)
		}

		eng.drop("a")
		time.Sleep(35 * time.Second) // the next listing, and the load
		if got := eng.keepCounts(); got["a"] != 2 || got["late"] != 1 {
			t.Errorf("keeps after a was dropped %v, want a again and late not", got)
		}
		if got := eng.keepCounts(); got["bad"] < 2 {
			t.Errorf("a failed load was not tried again at the next listing: %v", got)
		}
		stop()

		log.mu.Lock()
		defer log.mu.Unlock()
		var loads []string
		for _, ev := range log.loads {
			loads = append(loads, ev.Metadata["model"].(string))
			if ev.Metadata["always_on"] != true || ev.Metadata["model_load_ms"] != 2000.0 {
				t.Errorf("load event metadata %v", ev.Metadata)
			}
		}
		if want := []string{"a", "late", "a"}; !slices.Equal(loads, want) {
			t.Errorf("model_loaded events for %q, want %q", loads, want)
		}
	})
}

// An install that ends while another always-on model loads is loaded as
// soon as that load is done, not at the next periodic listing.
func TestAlwaysOnInstalledDuringALoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &keepEngine{installEngine: installEngine{step: time.Second, steps: 1},
			loadTime: 3 * time.Second, loaded: map[string]bool{}, keeps: map[string]int{}}
		_, _, stop := runLinked(t, Config{Engines: []engine.Engine{eng}, Pull: []string{"late"},
			AlwaysOn: []string{"a", "late"}, RefreshModels: 30 * time.Second}, 0)
		time.Sleep(10 * time.Second)
		stop()
		if got := eng.keepCounts(); got["a"] != 1 || got["late"] != 1 {
			t.Fatalf("keeps %v ten seconds in, want a and late once", got)
		}
	})
}

// A model whose engine does not say whether it is loaded is kept again at
// every listing, which loads it again once the engine dropped it; only
// the loads are reported.
func TestAlwaysOnLoadedStateUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &keepEngine{loadTime: time.Second, unknown: true, loaded: map[string]bool{}, keeps: map[string]int{}}
		_, log, stop := runLinked(t, Config{Engines: []engine.Engine{eng}, AlwaysOn: []string{"a"}, RefreshModels: 30 * time.Second}, 0)
		time.Sleep(5 * time.Second)
		eng.drop("a")
		time.Sleep(60 * time.Second) // two listings: a load, then a keep of a loaded model
		stop()
		if got := eng.keepCounts()["a"]; got < 3 {
			t.Errorf("kept %d times over two listings after the first, want at least 3", got)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if n := len(log.loads); n != 2 {
			t.Errorf("%d model_loaded events, want 2: the first load and the one after the drop", n)
		}
	})
}

// TestAlwaysOnDroppedSoonIsPaused checks that a model the engine drops
// again soon after each load is loaded again only after growing pauses,
// with a warning: always-on models that do not fit together would
// otherwise evict each other at every listing.
func TestAlwaysOnDroppedSoonIsPaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &keepEngine{loadTime: time.Second, evicted: map[string]bool{"a": true},
			loaded: map[string]bool{}, keeps: map[string]int{}}
		var logged syncBuffer
		_, _, stop := runLinked(t, Config{Engines: []engine.Engine{eng}, AlwaysOn: []string{"a", "b"},
			RefreshModels: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(&logged, nil))}, 0)
		time.Sleep(30 * time.Minute)
		stop()
		got := eng.keepCounts()
		// Loads at the start and at the first listing, then after pauses
		// of 1, 2, 4 and 8 minutes (the next, of 16, outlasts the run):
		// six in half an hour, where every listing would be sixty.
		if got["a"] < 5 || got["a"] > 8 || got["b"] != 1 {
			t.Errorf("keeps %v over 30 minutes, want a paused and b once", got)
		}
		if !strings.Contains(logged.String(), "dropped again soon after its load") {
			t.Errorf("no warning of the drops:\n%s", logged.String())
		}
	})
}

// TestAlwaysOnLoadedStateUnknownDroppedSoonIsPaused is the pause above
// for an engine that does not say what it has loaded (an Ollama behind
// the OpenAI API), where a keep that loads is how a drop is found: the
// loads are paused the same way, and come at listings, not one after
// another.
func TestAlwaysOnLoadedStateUnknownDroppedSoonIsPaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &keepEngine{loadTime: time.Second, unknown: true, evicted: map[string]bool{"a": true},
			loaded: map[string]bool{}, keeps: map[string]int{}}
		var logged syncBuffer
		_, log, stop := runLinked(t, Config{Engines: []engine.Engine{eng}, AlwaysOn: []string{"a"},
			RefreshModels: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(&logged, nil))}, 0)
		time.Sleep(30 * time.Minute)
		stop()
		log.mu.Lock()
		loads := len(log.loads)
		log.mu.Unlock()
		// As above: loads at the start and at the next listings, then
		// after pauses of 1, 2, 4 and 8 minutes.
		if loads < 4 || loads > 9 {
			t.Errorf("%d loads over 30 minutes, want a few, paused", loads)
		}
		if !strings.Contains(logged.String(), "dropped again soon after its load") {
			t.Errorf("no warning of the drops:\n%s", logged.String())
		}
	})
}

// TestAlwaysOnByOllamasShortName: a model named without its tag, as
// Ollama's users name them, is the one Ollama offers with its default tag.
func TestAlwaysOnByOllamasShortName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &keepEngine{loadTime: time.Second, loaded: map[string]bool{}, keeps: map[string]int{}}
		_, log, stop := runLinked(t, Config{Engines: []engine.Engine{eng}, AlwaysOn: []string{"short"}, RefreshModels: 30 * time.Second}, 0)
		time.Sleep(5 * time.Second)
		stop()
		if got := eng.keepCounts()["short:latest"]; got != 1 {
			t.Errorf("short:latest kept %d times, want once", got)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.loads) != 1 {
			t.Errorf("%d model_loaded events, want 1", len(log.loads))
		}
	})
}

func TestSameModel(t *testing.T) {
	for _, tc := range []struct {
		name, id string
		same     bool
	}{
		{"llama3.2", "llama3.2", true},
		{"llama3.2", "llama3.2:latest", true},
		{"llama3.2:latest", "llama3.2:latest", true},
		{"llama3.2:1b", "llama3.2:latest", false},
		{"llama3.2:latest", "llama3.2", false},
		{"qwen", "qwen3:latest", false},
	} {
		if got := sameModel(tc.name, tc.id); got != tc.same {
			t.Errorf("sameModel(%q, %q) = %v", tc.name, tc.id, got)
		}
	}
}

// syncBuffer is a log's destination that goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
