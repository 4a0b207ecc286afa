package worker

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/link/linktest"
)

func TestConnectURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://gw:8080", "ws://gw:8080/api/v1/workers/connect"},
		{"https://gw.example.com/", "wss://gw.example.com/api/v1/workers/connect"},
		{"http://gw:8080/api/v1", "ws://gw:8080/api/v1/workers/connect"},
		{"ws://gw:1", "ws://gw:1/api/v1/workers/connect"},
	}
	for _, tt := range tests {
		if got, err := connectURL(tt.in); err != nil || got != tt.want {
			t.Errorf("connectURL(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"gw:8080", "ftp://gw", "http://", "http://u:secret@gw:8080", "http://u@gw"} {
		if _, err := connectURL(bad); err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("connectURL(%q) = %v; want it refused without the password", bad, err)
		}
	}
}

func TestBackoffGrowsWithJitterAndCaps(t *testing.T) {
	b := newBackoff()
	for i := range 20 {
		d := b.next()
		ceiling := min(100*time.Millisecond<<min(i, 7), 10*time.Second) + 10*time.Millisecond
		if d < 10*time.Millisecond || d > ceiling {
			t.Fatalf("attempt %d waited %v, outside [10ms, %v]", i, d, ceiling)
		}
	}
	b.reset()
	if d := b.next(); d > 110*time.Millisecond {
		t.Fatalf("after reset the wait is %v", d)
	}
}

// The gateway's heartbeat_s is taken within bounds: a huge one once
// overflowed into a ticker of nanoseconds that spun the worker.
func TestHeartbeatEvery(t *testing.T) {
	for _, tt := range []struct {
		seconds int
		want    time.Duration
	}{
		{0, 5 * time.Second},
		{-3, 5 * time.Second},
		{math.MinInt, 5 * time.Second},
		{1, time.Second},
		{5, 5 * time.Second},
		{300, 5 * time.Minute},
		{301, 5 * time.Minute},
		{9223372037, 5 * time.Minute},        // times a second, wraps negative
		{20211507185753197, 5 * time.Minute}, // times a second, wraps to 512 ns
		{1 << 40, 5 * time.Minute},
		{math.MaxInt, 5 * time.Minute},
	} {
		if got := heartbeatEvery(tt.seconds); got != tt.want {
			t.Errorf("heartbeatEvery(%d) = %v, want %v", tt.seconds, got, tt.want)
		}
	}
}

// Within the gateway's grace after a drop the worker dials at least every
// second, whatever the backoff has grown to, so that a link back after a
// few seconds' outage resumes its requests; after it the backoff rules.
func TestReconnectWaitWithinTheGrace(t *testing.T) {
	now := time.Now()
	grown := func() *backoff { return &backoff{n: 20} }
	longest := func(droppedAt time.Time, err error) time.Duration {
		var m time.Duration
		for range 200 {
			m = max(m, reconnectWait(grown(), droppedAt, now, err))
		}
		return m
	}
	if w := longest(now.Add(-6*time.Second), errors.New("refused")); w > resumeRetry {
		t.Errorf("6 s after the drop the worker waited up to %v, want at most %v", w, resumeRetry)
	}
	if w := longest(now.Add(-time.Minute), errors.New("refused")); w <= resumeRetry {
		t.Errorf("a minute after the drop the backoff's %v did not apply", w)
	}
	if w := reconnectWait(grown(), now, now, &retryAfterError{after: 3 * time.Second}); w != 3*time.Second {
		t.Errorf("a gateway's Retry-After of 3s gave %v", w)
	}
}

// stubEngine serves model "m", answering "hi" or blocking until released.
type stubEngine struct {
	block   chan struct{}
	started atomic.Int64
	models  []api.Model
}

func (e *stubEngine) Kind() string { return "stub" }
func (e *stubEngine) Models(context.Context) ([]api.Model, error) {
	if e.models != nil {
		return e.models, nil
	}
	return []api.Model{{ID: "m", Capabilities: []string{api.CapChat}, Engine: "stub"}}, nil
}
func (e *stubEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	e.started.Add(1)
	if e.block != nil {
		select {
		case <-e.block:
		case <-ctx.Done():
			return engine.Cancelled()
		}
	}
	if err := sink.Body(ctx, []byte(`{"answer":"hi"}`)); err != nil {
		return engine.Cancelled()
	}
	return engine.OK()
}

// rig joins an agent to a fleet over in-memory connections.
type rig struct {
	t     *testing.T
	fleet *fleet.Fleet
	agent *Agent
	conns chan *linktest.Conn
	stop  context.CancelFunc
	done  chan error
	links sync.WaitGroup // the gateway's side of each connection
	gate  gate           // holds what the worker receives while shut
}

// gate holds messages on their way to the worker while it is shut.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while messages go through; nil: never shut
}

func (g *gate) shut() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

func (g *gate) wait() {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open != nil {
		<-open
	}
}

type gatedConn struct {
	link.Conn
	g *gate
}

func (c gatedConn) ReadMessage() ([]byte, error) {
	m, err := c.Conn.ReadMessage()
	c.g.wait()
	return m, err
}

func newRig(t *testing.T, eng engine.Engine, cfg Config) *rig {
	r := &rig{t: t, fleet: fleet.New(fleet.Config{Grace: 5 * time.Second, Hold: time.Second}), conns: make(chan *linktest.Conn, 16), done: make(chan error, 1)}
	cfg.Gateway, cfg.Token, cfg.Name, cfg.Engines = "http://unused", "t", "box", []engine.Engine{eng}
	cfg.Dial = func(ctx context.Context, _ string) (link.Conn, error) {
		gw, wk := linktest.Pipe()
		r.conns <- wk
		r.links.Go(func() {
			hello, err := fleet.ReadHello(gw)
			if err == nil {
				_ = r.fleet.Connect(context.Background(), "org", hello, gw)
			}
		})
		return gatedConn{wk, &r.gate}, nil
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.agent = a
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
		r.links.Wait()
	})
	r.expect("healthy", func(w api.Worker) bool { return w.Status == api.StatusHealthy })
	return r
}

// expect returns the worker as the fleet lists it once the agent and the
// fleet have settled, failing the test unless ok holds.
func (r *rig) expect(what string, ok func(api.Worker) bool) api.Worker {
	r.t.Helper()
	synctest.Wait()
	ws := r.fleet.Workers("org")
	if len(ws) != 1 || !ok(ws[0]) {
		r.t.Fatalf("worker not %s: %+v", what, ws)
	}
	return ws[0]
}

// running waits for the engine to have started a request.
func running(t *testing.T, eng *stubEngine) {
	t.Helper()
	synctest.Wait()
	if eng.started.Load() == 0 {
		t.Fatal("the engine has not started the request")
	}
}

func (r *rig) request(ctx context.Context) (*fleet.Lease, *link.Stream) {
	r.t.Helper()
	l, err := r.fleet.Acquire(ctx, fleet.Need{OrgID: "org", Model: "m"})
	if err != nil {
		r.t.Fatal(err)
	}
	hdr, _ := json.Marshal(api.LinkRequest{RequestID: "r", Kind: api.KindChat, Model: "m"})
	st, err := l.Open(ctx, hdr, []byte(`{}`))
	if err != nil {
		r.t.Fatal(err)
	}
	return l, st
}

func readAll(ctx context.Context, st *link.Stream) (string, *api.Result, error) {
	var body string
	for {
		typ, msg, err := st.ReadMessage(ctx)
		if err != nil {
			return body, nil, err
		}
		if typ == link.TypeEnd {
			var res api.Result
			_ = json.Unmarshal(msg, &res)
			return body, &res, nil
		}
		body += string(msg)
	}
}

func TestAgentServesAndReportsModels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &stubEngine{}, Config{MaxConcurrent: 2, ModelMeta: map[string]api.Model{"m": {ContextWindow: 4096}}})
		w := r.expect("listed", func(api.Worker) bool { return true })
		if w.MaxConcurrent != 2 || len(w.Models) != 1 || w.Models[0].ContextWindow != 4096 {
			t.Fatalf("worker %+v", w)
		}
		l, st := r.request(context.Background())
		body, res, err := readAll(context.Background(), st)
		if err != nil || body != `{"answer":"hi"}` || res.Status != http.StatusOK {
			t.Fatalf("%q %+v %v", body, res, err)
		}
		l.Release(fleet.Succeeded)
	})
}

func TestAgentResumesAfterADrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &stubEngine{block: make(chan struct{})}
		r := newRig(t, eng, Config{})
		l, st := r.request(context.Background())
		conn := <-r.conns
		running(t, eng)
		_ = conn.Close() // the link drops while the engine works
		<-r.conns        // the agent dialled again
		close(eng.block)
		body, res, err := readAll(context.Background(), st)
		if err != nil || body != `{"answer":"hi"}` || res.Status != http.StatusOK {
			t.Fatalf("after the drop: %q %+v %v", body, res, err)
		}
		l.Release(fleet.Succeeded)
	})
}

func TestAgentCancelReachesTheEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &stubEngine{block: make(chan struct{})}
		r := newRig(t, eng, Config{})
		l, st := r.request(context.Background())
		running(t, eng)
		st.Reset()
		l.Release(fleet.Neutral)
		synctest.Wait()
		if r.agent.active.Load() != 0 {
			t.Fatal("the engine kept running after the gateway reset the stream")
		}
	})
}

func TestAgentDrainsOnStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &stubEngine{block: make(chan struct{})}
		r := newRig(t, eng, Config{DrainTimeout: 10 * time.Second})
		l, st := r.request(context.Background())
		running(t, eng)
		r.stop()
		r.expect("draining", func(w api.Worker) bool { return w.Draining })
		if _, err := r.fleet.Acquire(context.Background(), fleet.Need{OrgID: "org", Model: "m"}); err == nil {
			t.Fatal("a draining worker took a new request")
		}
		close(eng.block)
		body, res, err := readAll(context.Background(), st)
		if err != nil || res.Status != http.StatusOK || body == "" {
			t.Fatalf("request running at stop: %q %+v %v", body, res, err)
		}
		l.Release(fleet.Succeeded)
		select {
		case err := <-r.done:
			r.done <- err
		case <-time.After(5 * time.Second):
			t.Fatal("agent did not return after draining")
		}
	})
}

// A request the gateway sent just before the worker began to drain, still
// on its way when the drain starts, is served: the worker counts its
// running requests once the gateway has acknowledged the GoAway, which
// comes after that request on the link.
func TestAgentDrainServesARequestInFlightToIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &stubEngine{}, Config{DrainTimeout: 10 * time.Second})
		r.gate.shut()
		l, st := r.request(context.Background())
		r.stop()
		// The worker has sent its GoAway and is waiting: the request and the
		// acknowledgement are held on the way to it.
		r.expect("draining", func(w api.Worker) bool { return w.Draining })
		r.gate.release()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		body, res, err := readAll(ctx, st)
		if err != nil || res.Status != http.StatusOK || body == "" {
			t.Fatalf("request on its way at the drain: %q %+v %v", body, res, err)
		}
		l.Release(fleet.Succeeded)
	})
}

// A worker stopped while its link is down has no GoAway acknowledgement
// to wait for, and nothing running: it stops at once.
func TestAgentStopsAtOnceWhileTheLinkIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := New(Config{Gateway: "http://unused", Token: "t", Name: "box", Engines: []engine.Engine{&stubEngine{}},
			DrainTimeout: time.Minute, Dial: func(context.Context, string) (link.Conn, error) { return nil, errors.New("refused") }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		synctest.Wait()
		start := time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("the stop took %v", d)
		}
	})
}

func TestHandshakeRefusalIsPermanent(t *testing.T) {
	gw, wk := linktest.Pipe()
	go func() {
		_, _ = fleet.ReadHello(gw)
		fleet.Refuse(gw, "no such thing")
	}()
	_, err := handshake(wk, api.Hello{Protocol: link.Protocol, Name: "x"})
	var perm *PermanentError
	if !errors.As(err, &perm) {
		t.Fatalf("err = %v", err)
	}
}

// A refusal that says when to try again is for now: the agent waits and
// tries again, and a unit does not take its exit for good.
func TestHandshakeRefusalWithAWaitIsForNow(t *testing.T) {
	gw, wk := linktest.Pipe()
	go func() {
		_, _ = fleet.ReadHello(gw)
		b, _ := json.Marshal(api.Welcome{Error: "the organisation's fleet is full", RetryAfterS: 60})
		_ = gw.WriteMessage(link.AppendFrame(nil, &link.Frame{Type: link.TypeWelcome, Payload: b}))
		_ = gw.Close()
	}()
	_, err := handshake(wk, api.Hello{Protocol: link.Protocol, Name: "x"})
	var perm *PermanentError
	var later *retryAfterError
	if errors.As(err, &perm) || !errors.As(err, &later) || later.after != time.Minute {
		t.Fatalf("err = %#v, want a wait of a minute", err)
	}
}
