package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/link/linktest"
)

// listEngine lists fixed models, or fails.
type listEngine struct {
	stubEngine
	ids  []string
	fail bool
}

func (e *listEngine) Models(context.Context) ([]api.Model, error) {
	if e.fail {
		return nil, errors.New("down")
	}
	out := make([]api.Model, len(e.ids))
	for i, id := range e.ids {
		out[i] = api.Model{ID: id, Capabilities: []string{api.CapTranscription}}
	}
	return out, nil
}

func TestModelAliases(t *testing.T) {
	whisper := &listEngine{ids: []string{"whisper-large-v3-turbo", "whisper-large-v3"}}
	other := &listEngine{ids: []string{"whisper-large-v3", "tts-1"}}
	tests := []struct {
		name    string
		aliases map[string]string
		listed  []string          // ids offered, in order
		local   map[string]string // id -> the engine's name it is served under
		meta    map[string]api.Model
	}{
		{"no aliases", nil,
			[]string{"whisper-large-v3-turbo", "whisper-large-v3", "tts-1"},
			map[string]string{"whisper-large-v3": "whisper-large-v3", "tts-1": "tts-1"}, nil},
		{"spec ids for local models", map[string]string{"stt-large-v3-turbo": "whisper-large-v3-turbo", "stt-large-v3": "whisper-large-v3"},
			// An aliased model is offered under its aliases only, and the
			// first engine with it serves it.
			[]string{"stt-large-v3-turbo", "stt-large-v3", "tts-1"},
			map[string]string{"stt-large-v3-turbo": "whisper-large-v3-turbo", "stt-large-v3": "whisper-large-v3"}, nil},
		{"two ids for one model", map[string]string{"b": "whisper-large-v3", "a": "whisper-large-v3"},
			[]string{"whisper-large-v3-turbo", "a", "b", "tts-1"},
			map[string]string{"a": "whisper-large-v3", "b": "whisper-large-v3"}, nil},
		{"an alias nobody has", map[string]string{"stt-large-v3": "missing"},
			[]string{"whisper-large-v3-turbo", "whisper-large-v3", "tts-1"}, nil, nil},
		// An alias takes its id from the engine's own model of that id,
		// whichever the engine lists first.
		{"an alias takes a model's id", map[string]string{"whisper-large-v3-turbo": "whisper-large-v3"},
			[]string{"whisper-large-v3-turbo", "tts-1"},
			map[string]string{"whisper-large-v3-turbo": "whisper-large-v3"}, nil},
		{"an alias takes the id of one listed after it", map[string]string{"whisper-large-v3": "whisper-large-v3-turbo"},
			[]string{"whisper-large-v3", "tts-1"},
			map[string]string{"whisper-large-v3": "whisper-large-v3-turbo"}, nil},
		{"metadata by the listed id", map[string]string{"stt-large-v3": "whisper-large-v3"},
			[]string{"whisper-large-v3-turbo", "stt-large-v3", "tts-1"}, nil,
			map[string]api.Model{"stt-large-v3": {ContextWindow: 448}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(Config{Gateway: "http://gw", Token: "t", Name: "w", Engines: []engine.Engine{whisper, other},
				Aliases: tt.aliases, ModelMeta: tt.meta})
			if err != nil {
				t.Fatal(err)
			}
			a.refreshModels(context.Background())
			var ids []string
			for _, m := range a.models {
				ids = append(ids, m.ID)
				if local := tt.aliases[m.ID]; local != "" && m.Local != local || local == "" && m.Local != "" {
					t.Errorf("%s lists local model %q", m.ID, m.Local)
				}
				if meta, ok := tt.meta[m.ID]; ok && m.ContextWindow != meta.ContextWindow {
					t.Errorf("%s did not get its metadata: %+v", m.ID, m)
				}
			}
			if !slices.Equal(ids, tt.listed) {
				t.Fatalf("listed %v, want %v", ids, tt.listed)
			}
			for id, local := range tt.local {
				m := a.servedFor(id)
				eng, name := m.eng, m.local
				if eng != whisper && eng != other || name != local {
					t.Errorf("%s is served as %q by %v, want %q", id, name, eng, local)
				}
			}
			if a.servedFor("missing").eng != nil {
				t.Error("an unlisted id is served")
			}
		})
	}
}

// An engine that fails to list keeps serving what it listed before, under
// the same ids.
func TestModelsKeptWhenAnEngineFails(t *testing.T) {
	e := &listEngine{ids: []string{"whisper-large-v3"}}
	a, err := New(Config{Gateway: "http://gw", Token: "t", Name: "w", Engines: []engine.Engine{e},
		Aliases: map[string]string{"stt-large-v3": "whisper-large-v3"}})
	if err != nil {
		t.Fatal(err)
	}
	a.refreshModels(context.Background())
	e.fail = true
	a.refreshModels(context.Background())
	if m := a.servedFor("stt-large-v3"); m.eng != e || m.local != "whisper-large-v3" || len(a.models) != 1 {
		t.Fatalf("after a failed listing: %v %q %v", m.eng, m.local, a.models)
	}
}

// installEngine installs a model by reporting progress every step, steps
// times, once start is closed (a nil start does not wait).
type installEngine struct {
	stubEngine
	start chan struct{}
	step  time.Duration
	steps int
	// refuse is how many pulls find the engine not listening yet.
	refuse int

	mu        sync.Mutex
	installed []string
}

func (e *installEngine) Models(context.Context) ([]api.Model, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []api.Model{{ID: "m", Capabilities: []string{api.CapChat}}}
	for _, id := range e.installed {
		out = append(out, api.Model{ID: id, Capabilities: []string{api.CapChat}})
	}
	return out, nil
}

func (e *installEngine) Pull(ctx context.Context, model string, progress func(api.PullProgress)) error {
	e.mu.Lock()
	refused := e.refuse > 0
	e.refuse--
	e.mu.Unlock()
	if refused {
		return fmt.Errorf("pull %s: %w", model, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	}
	if e.start != nil {
		select {
		case <-e.start:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := range e.steps + 1 {
		progress(api.PullProgress{Status: "pulling", Total: int64(e.steps), Completed: int64(i)})
		if i < e.steps {
			select {
			case <-time.After(e.step):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	e.mu.Lock()
	e.installed = append(e.installed, model)
	e.mu.Unlock()
	return nil
}

// eventLog records the model_install events the gateway gets, with when
// they came, and the model_loaded events apart.
type eventLog struct {
	mu     sync.Mutex
	events []api.WorkerEvent
	at     []time.Time
	loads  []api.WorkerEvent
	// completed is closed when an install's completed event comes.
	completed chan struct{}
}

func (l *eventLog) RecordEvent(_ string, ev api.WorkerEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ev.EventType == api.EventModelLoaded {
		l.loads = append(l.loads, ev)
	}
	if ev.EventType != api.EventModelInstall {
		return
	}
	l.events = append(l.events, ev)
	l.at = append(l.at, time.Now())
	if ev.Install != nil && ev.Install.State == api.InstallCompleted {
		close(l.completed)
	}
}

func (l *eventLog) states() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.events {
		if ev.Install == nil {
			out = append(out, "")
			continue
		}
		out = append(out, ev.Install.State)
	}
	return out
}

// runPulls runs an agent that installs models, connecting after
// dialDelay, until the test ends or stop is called.
func runPulls(t *testing.T, eng engine.Engine, models []string, dialDelay time.Duration) (f *fleet.Fleet, log *eventLog, stop func()) {
	return runLinked(t, Config{Engines: []engine.Engine{eng}, Pull: models}, dialDelay)
}

// runLinked runs an agent of cfg (its gateway, token, name and dial
// filled in) linked to a fleet, connecting after dialDelay, until the test
// ends or stop is called.
func runLinked(t *testing.T, cfg Config, dialDelay time.Duration) (f *fleet.Fleet, log *eventLog, stop func()) {
	log = &eventLog{completed: make(chan struct{})}
	f = fleet.New(fleet.Config{Grace: 5 * time.Second, Hold: time.Second, Events: log})
	var links sync.WaitGroup
	cfg.Gateway, cfg.Token, cfg.Name = "http://unused", "t", "box"
	cfg.Dial = func(ctx context.Context, _ string) (link.Conn, error) {
		select {
		case <-time.After(dialDelay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		gw, wk := linktest.Pipe()
		links.Go(func() {
			if hello, err := fleet.ReadHello(gw); err == nil {
				_ = f.Connect(context.Background(), "org", hello, gw)
			}
		})
		return wk, nil
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			links.Wait()
		})
	}
	t.Cleanup(stop)
	return f, log, stop
}

func healthy(f *fleet.Fleet) bool {
	ws := f.Workers("org")
	return len(ws) == 1 && ws[0].Status == api.StatusHealthy
}

// Install progress goes to the gateway at most once a second, and the
// completed event ends it with the model already listed.
func TestPullProgressOnceASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &installEngine{start: make(chan struct{}), step: 10 * time.Millisecond, steps: 150}
		f, log, _ := runPulls(t, eng, []string{"big"}, 0)
		synctest.Wait()
		if !healthy(f) {
			t.Fatalf("the worker has not connected: %+v", f.Workers("org"))
		}
		close(eng.start)
		<-log.completed

		// The started event waits for the link, as the end does.
		states := log.states()
		skip := 1
		if states[0] != "started" || states[len(states)-1] != "completed" {
			t.Fatalf("install events %q", states)
		}
		progress := states[skip : len(states)-1]
		if n := len(progress); n < 2 || n > 3 || slices.ContainsFunc(progress, func(s string) bool { return s != "progress" }) {
			t.Fatalf("install events %q: want 2 or 3 progress events over 1.5 s", states)
		}
		log.mu.Lock()
		for i := skip + 1; i < len(states)-1; i++ {
			if gap := log.at[i].Sub(log.at[i-1]); gap < 900*time.Millisecond {
				t.Errorf("progress events %v apart", gap)
			}
		}
		first := log.events[skip]
		log.mu.Unlock()
		if in := first.Install; in == nil || *in != (api.ModelInstall{Model: "big", State: api.InstallProgress, Total: 150}) {
			t.Errorf("progress %+v", in)
		}
		// The events API shows the install as its metadata.
		if b, _ := json.Marshal(first.Metadata); string(b) != `{"completed":0,"model":"big","state":"progress","total":150}` {
			t.Errorf("progress metadata %s", b)
		}
		ws := f.Workers("org")
		if !slices.ContainsFunc(ws[0].Models, func(m api.Model) bool { return m.ID == "big" }) {
			t.Errorf("the installed model is not listed: %+v", ws[0].Models)
		}
	})
}

// An engine that does not listen yet as the worker starts (a rental's
// Ollama, started beside it) is waited for: the install is tried again,
// and ends installed, not failed.
func TestPullWaitsForTheEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &installEngine{refuse: 3}
		_, log, _ := runPulls(t, eng, []string{"small"}, 0)
		select {
		case <-log.completed:
		case <-time.After(10 * time.Minute):
			t.Fatalf("no install completed; events %q", log.states())
		}
		if states := log.states(); len(states) != 2 || states[0] != "started" || states[1] != "completed" {
			t.Fatalf("install events %q, want started and completed", states)
		}
	})
}

// An install that ends before the worker first connects is still
// reported: the gateway waits for it to call a rental ready.
func TestPullCompletedBeforeConnecting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &installEngine{}
		_, log, _ := runPulls(t, eng, []string{"small"}, 300*time.Millisecond)
		<-log.completed
		if states := log.states(); states[0] != "started" {
			t.Fatalf("install events %q", states)
		}
	})
}

// An install the worker's stop cuts short is reported failed, saying so,
// before the link goes: it does not read as under way for good.
func TestPullStoppedByTheWorkersStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &installEngine{start: make(chan struct{})}
		_, log, stop := runPulls(t, eng, []string{"big"}, 0)
		time.Sleep(time.Second) // linked, and the install under way
		stop()
		states := log.states()
		if len(states) != 2 || states[0] != "started" || states[1] != "failed" {
			t.Fatalf("install events %q", states)
		}
		log.mu.Lock()
		detail := log.events[1].Detail
		log.mu.Unlock()
		if detail == nil || !strings.Contains(*detail, "shutting down") {
			t.Fatalf("detail %v", detail)
		}
	})
}

// slowStartEngine lists model "m" once it listens, at up; before, its
// model list fails as a connection refused would.
type slowStartEngine struct {
	stubEngine
	up    time.Time
	calls atomic.Int64
}

func (e *slowStartEngine) Models(ctx context.Context) ([]api.Model, error) {
	e.calls.Add(1)
	if time.Now().Before(e.up) {
		return nil, errors.New("connection refused")
	}
	return e.stubEngine.Models(ctx)
}

// A worker started before its engine listens asks for the models again
// after 1 s, 2 s, 4 s..., not at the next 30 s refresh, and back at the
// usual pace once it has them.
func TestModelsListedSoonAfterTheEngineListens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &slowStartEngine{up: time.Now().Add(3500 * time.Millisecond)}
		r := newRig(t, eng, Config{})
		r.expect("connected without models", func(w api.Worker) bool { return len(w.Models) == 0 })
		time.Sleep(7 * time.Second)
		r.expect("listing the engine's model", func(w api.Worker) bool { return len(w.Models) == 1 })
		if n := eng.calls.Load(); n != 4 {
			t.Fatalf("the engine was asked %d times by 7 s, want 4 (at 0, 1, 3 and 7 s)", n)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if n := eng.calls.Load(); n != 5 {
			t.Fatalf("the engine was asked %d times by 37 s, want 5", n)
		}
	})
}
