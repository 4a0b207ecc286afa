package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/link/linktest"
)

// replica is a gateway on loopback that links workers into its own fleet,
// or redirects them while redirect is set.
type replica struct {
	srv      *httptest.Server
	fleet    *fleet.Fleet
	redirect atomic.Pointer[string]
	hellos   atomic.Int64
	// splices counts the link requests that asked to be spliced.
	splices atomic.Int64

	ctx      context.Context // ends the links it serves
	stop     context.CancelFunc
	handlers sync.WaitGroup
	mu       sync.Mutex
	conns    []link.Conn
	killed   sync.Once
}

func newReplica(t *testing.T) *replica {
	r := &replica{fleet: fleet.New(fleet.Config{Grace: 5 * time.Second, Hold: time.Second})}
	r.ctx, r.stop = context.WithCancel(context.Background())
	up := websocket.Upgrader{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.handlers.Add(1)
		defer r.handlers.Done()
		if req.URL.Path != link.Path {
			http.NotFound(w, req)
			return
		}
		ws, err := up.Upgrade(w, req, nil)
		if err != nil {
			return
		}
		conn := link.WebSocket(ws, link.DefaultKeepalive())
		r.mu.Lock()
		r.conns = append(r.conns, conn)
		r.mu.Unlock()
		hello, err := fleet.ReadHello(conn)
		if err != nil {
			_ = conn.Close()
			return
		}
		// A splice is counted before its hello, so that a test that has
		// seen the hello sees the splice it asked for.
		if req.URL.Query().Has(link.SpliceParam) {
			r.splices.Add(1)
		}
		r.hellos.Add(1)
		if to := r.redirect.Load(); to != nil {
			fleet.Redirect(conn, *to)
			return
		}
		_ = r.fleet.Connect(r.ctx, "org", hello, conn)
	}))
	t.Cleanup(r.kill)
	return r
}

func (r *replica) redirectTo(url string) { r.redirect.Store(&url) }

func (r *replica) serve() { r.redirect.Store(nil) }

// dropLinks closes the connections it holds, as a network fault would.
func (r *replica) dropLinks() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
}

// kill stops the replica as a crash would: its port refuses connections
// and the links it held drop.
func (r *replica) kill() {
	r.killed.Do(func() {
		// Once Close returns every request has finished or is hijacked,
		// so no handler is still to be counted.
		r.srv.Close()
		r.stop()
		r.dropLinks()
		r.handlers.Wait()
	})
}

// linked says whether the worker is healthy in f.
func linked(f *fleet.Fleet) bool {
	ws := f.Workers("org")
	return len(ws) == 1 && ws[0].Status == api.StatusHealthy
}

// eventually polls cond until it holds, failing the test after a while.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// records keeps what the agent logs, in order.
type records struct {
	mu   sync.Mutex
	msgs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Clone())
	r.mu.Unlock()
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) all() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func (r *records) count(msg string) int {
	n := 0
	for _, rec := range r.all() {
		if rec.Message == msg {
			n++
		}
	}
	return n
}

const (
	logRedirected = "the gateway redirected the worker"
	logBadRedir   = "the gateway sent a redirect the worker does not follow"
	logUnanswered = "the gateway redirected to does not answer; back to the configured gateway, asking it to splice the link through"
	logRetry      = "gateway link down; reconnecting"
)

// runAgent runs a worker dialling gateway over real websockets until the
// test ends. done receives what Run returns.
func runAgent(t *testing.T, gateway string, eng engine.Engine) (a *Agent, logs *records, done chan error) {
	logs = &records{}
	a, err := New(Config{Gateway: gateway, Token: "t", Name: "box", Engines: []engine.Engine{eng},
		DrainTimeout: time.Second, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the worker stopped with %v", err)
		}
	})
	return a, logs, done
}

// openOn sends a request to the worker through f.
func openOn(t *testing.T, f *fleet.Fleet) (*fleet.Lease, *link.Stream) {
	t.Helper()
	ctx := context.Background()
	l, err := f.Acquire(ctx, fleet.Need{OrgID: "org", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	hdr, _ := json.Marshal(api.LinkRequest{RequestID: "r", Kind: api.KindChat, Model: "m"})
	st, err := l.Open(ctx, hdr, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	return l, st
}

func serveOn(t *testing.T, f *fleet.Fleet) {
	t.Helper()
	l, st := openOn(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, res, err := readAll(ctx, st)
	if err != nil || body != `{"answer":"hi"}` || res.Status != http.StatusOK {
		t.Fatalf("request: %q %+v %v", body, res, err)
	}
	l.Release(fleet.Succeeded)
}

func TestRedirectLinksTheWorkerToTheReplicaNamed(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	a.redirectTo(b.srv.URL)
	_, logs, _ := runAgent(t, a.srv.URL, &stubEngine{})
	eventually(t, "the worker is linked to the replica redirected to", func() bool { return linked(b.fleet) })
	serveOn(t, b.fleet)
	if n := len(a.fleet.Workers("org")); n != 0 {
		t.Fatalf("the redirecting gateway lists %d workers", n)
	}
	if n := a.hellos.Load(); n != 1 {
		t.Fatalf("the redirecting gateway got %d hellos, want 1", n)
	}
	var redirect slog.Record
	for _, rec := range logs.all() {
		if rec.Message == logRedirected {
			redirect = rec
		}
	}
	attrs := map[string]string{}
	redirect.Attrs(func(at slog.Attr) bool { attrs[at.Key] = at.Value.String(); return true })
	if attrs["from"] != a.srv.URL || attrs["to"] != b.srv.URL {
		t.Fatalf("redirect logged as %q with %v", redirect.Message, attrs)
	}
}

// A link through the replica redirected to that drops while the replica
// is up is dialled there again, and its streams resume.
func TestRedirectedWorkerRedialsTheReplicaAfterADrop(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	a.redirectTo(b.srv.URL)
	eng := &stubEngine{block: make(chan struct{})}
	agent, _, _ := runAgent(t, a.srv.URL, eng)
	eventually(t, "the worker is linked to B", func() bool { return linked(b.fleet) })
	l, st := openOn(t, b.fleet)
	eventually(t, "the engine runs the request", func() bool { return agent.active.Load() == 1 })
	b.dropLinks()
	eventually(t, "the worker is back on B", func() bool { return b.hellos.Load() == 2 && linked(b.fleet) })
	close(eng.block)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, res, err := readAll(ctx, st)
	if err != nil || body != `{"answer":"hi"}` || res.Status != http.StatusOK {
		t.Fatalf("after the drop: %q %+v %v", body, res, err)
	}
	l.Release(fleet.Succeeded)
	if n := a.hellos.Load(); n != 1 {
		t.Fatalf("the configured gateway got %d hellos, want 1: the worker left the replica it was sent to", n)
	}
}

// When the replica redirected to dies, the worker goes back to the
// configured gateway, which now serves it or sends it elsewhere. The
// request it was running fails on both ends instead of hanging: the
// gateway it lands on does not know its session.
func TestRedirectedWorkerReturnsWhenTheReplicaDies(t *testing.T) {
	for _, elsewhere := range []bool{false, true} {
		name := map[bool]string{false: "configured gateway serves", true: "configured gateway redirects elsewhere"}[elsewhere]
		t.Run(name, func(t *testing.T) {
			a, b, c := newReplica(t), newReplica(t), newReplica(t)
			a.redirectTo(b.srv.URL)
			eng := &stubEngine{block: make(chan struct{})}
			agent, _, _ := runAgent(t, a.srv.URL, eng)
			eventually(t, "the worker is linked to B", func() bool { return linked(b.fleet) })
			l, st := openOn(t, b.fleet)
			eventually(t, "the engine runs the request", func() bool { return agent.active.Load() == 1 })

			home := a
			if elsewhere {
				a.redirectTo(c.srv.URL)
				home = c
			} else {
				a.serve()
			}
			b.kill()
			eventually(t, "the worker is linked where the configured gateway says", func() bool { return linked(home.fleet) })
			// Nothing was resumed: the engine stopped the request.
			eventually(t, "the request running at the crash is cancelled", func() bool { return agent.active.Load() == 0 })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, res, err := readAll(ctx, st); err == nil || ctx.Err() != nil {
				t.Fatalf("the request on the dead replica: %+v %v", res, err)
			}
			l.Release(fleet.Failed)
			close(eng.block)
			serveOn(t, home.fleet)
		})
	}
}

// Replicas that name each other bounce the worker at most maxRedirects
// times before it backs off on the configured gateway.
func TestRedirectLoopIsBounded(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	a.redirectTo(b.srv.URL)
	b.redirectTo(a.srv.URL)
	_, logs, done := runAgent(t, a.srv.URL, &stubEngine{})
	const rounds = 3
	eventually(t, "the worker has backed off a few times", func() bool { return logs.count(logRetry) >= rounds })
	var followed []int // redirects followed before each back-off
	n := 0
	for _, rec := range logs.all() {
		switch rec.Message {
		case logRedirected:
			n++
		case logRetry:
			followed = append(followed, n)
			n = 0
		}
	}
	for i, n := range followed {
		if n != maxRedirects {
			t.Fatalf("back-off %d came after %d redirects, want %d (all: %v)", i, n, maxRedirects, followed)
		}
	}
	// Every round starts on the configured gateway: one hello more there
	// than the redirects to it.
	if ha, hb := a.hellos.Load(), b.hellos.Load(); ha < int64(rounds)*(maxRedirects/2+1) || hb < int64(rounds)*maxRedirects/2 {
		t.Fatalf("hellos: A %d, B %d", ha, hb)
	}
	select {
	case err := <-done:
		t.Fatalf("the worker stopped: %v", err)
	default:
	}
	// Once a replica takes it, the worker settles there.
	b.serve()
	eventually(t, "the worker is linked to B", func() bool { return linked(b.fleet) })
}

// A redirect the worker cannot or should not follow sends it back to the
// configured gateway, and does not stop it: once the gateway serves it,
// it links.
func TestBadRedirectsAreNotFollowed(t *testing.T) {
	refusing := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(refusing.Close)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for _, tt := range []struct {
		name, to, log string
	}{
		{"not http", "ftp://" + refusing.Listener.Addr().String(), logBadRedir},
		{"no host", "http://", logBadRedir},
		{"replica refuses the link", refusing.URL, logUnanswered},
		{"replica unreachable", gone.URL, logUnanswered},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := newReplica(t)
			a.redirectTo(tt.to)
			_, logs, done := runAgent(t, a.srv.URL, &stubEngine{})
			eventually(t, "the worker came back to the configured gateway", func() bool { return a.hellos.Load() >= 2 })
			if logs.count(tt.log) == 0 {
				t.Fatalf("no %q logged", tt.log)
			}
			if tt.log == logBadRedir && logs.count(logRedirected) != 0 {
				t.Fatal("the redirect was followed")
			}
			// Back from a replica that did not answer, the worker asks the
			// configured gateway to splice; from a redirect it would not
			// follow, it does not.
			if got := a.splices.Load() > 0; got != (tt.log == logUnanswered) {
				t.Fatalf("%d link requests asked to splice", a.splices.Load())
			}
			a.serve()
			eventually(t, "the worker is linked to the configured gateway", func() bool { return linked(a.fleet) })
			select {
			case err := <-done:
				t.Fatalf("the worker stopped: %v", err)
			default:
			}
		})
	}
}

func TestCheckRedirect(t *testing.T) {
	tests := []struct {
		gateway, to string
		ok          bool
	}{
		{"http://lb:8080", "http://gw-2.internal:8080", true},
		{"http://lb:8080", "https://gw-2.internal:8443", true},
		{"https://lb", "https://gw-2.internal:8443/", true},
		{"https://lb", "http://gw-2.internal:8080", false},
		{"wss://lb", "http://gw-2.internal:8080", false},
		{"HTTPS://lb", "HTTP://gw-2.internal:8080", false},
		{"http://lb:8080", "HTTPS://gw-2.internal:8443", true},
		{"http://lb:8080", "ws://gw-2:8080", false},
		{"http://lb:8080", "ftp://gw-2", false},
		{"http://lb:8080", "gw-2:8080", false},
		{"http://lb:8080", "http://", false},
		{"http://lb:8080", "http://:8080", false},
		{"http://lb:8080", "", false},
		{"http://lb:8080", "http://gw 2", false},
	}
	for _, tt := range tests {
		a := &Agent{cfg: Config{Gateway: tt.gateway}}
		if err := a.checkRedirect(tt.to); (err == nil) != tt.ok {
			t.Errorf("gateway %s, redirect %q: err %v, want ok %v", tt.gateway, tt.to, err, tt.ok)
		}
	}
}

func TestHandshakeReadsARedirect(t *testing.T) {
	gw, wk := linktest.Pipe()
	go func() {
		_, _ = fleet.ReadHello(gw)
		fleet.Redirect(gw, "http://gw-2:8080")
	}()
	w, err := handshake(wk, api.Hello{Protocol: link.Protocol, Name: "x"})
	if err != nil || w.Redirect != "http://gw-2:8080" || w.WorkerID != "" {
		t.Fatalf("welcome %+v, err %v", w, err)
	}
}

// A gateway that answers the link with 503 and a Retry-After (a cluster's
// standby while no replica leads) is tried again after that long, not
// after the backoff's growing wait.
func TestWorkerWaitsTheGatewaysRetryAfter(t *testing.T) {
	var refusals atomic.Int64
	r := newReplica(t)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if refusals.Add(1) <= 3 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"detail":"standby"}`, http.StatusServiceUnavailable)
			return
		}
		r.srv.Config.Handler.ServeHTTP(w, req)
	}))
	t.Cleanup(front.Close)
	_, logs, _ := runAgent(t, front.URL, &stubEngine{})
	eventually(t, "the worker linked after three refusals", func() bool { return linked(r.fleet) })
	var waits []string
	for _, rec := range logs.all() {
		if rec.Message != logRetry {
			continue
		}
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "retry_in" {
				waits = append(waits, a.Value.String())
			}
			return true
		})
	}
	if !slices.Equal(waits, []string{"1s", "1s", "1s"}) {
		t.Fatalf("waited %v between tries, want the gateway's 1s each time", waits)
	}
}
