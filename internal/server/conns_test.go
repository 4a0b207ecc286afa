package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/buildinfo"
)

func TestIdleLimitShrinksUnderPressure(t *testing.T) {
	g := newConnGate(100, 2*time.Minute)
	tests := []struct {
		open int
		want time.Duration
	}{
		{0, 2 * time.Minute},
		{50, 2 * time.Minute},
		{70, 2*time.Minute - (2*time.Minute-5*time.Second)/2},
		{90, 5 * time.Second},
		{100, 5 * time.Second},
	}
	for _, tt := range tests {
		if got := g.idleLimit(tt.open); got != tt.want {
			t.Errorf("%d open: idle limit %s, want %s", tt.open, got, tt.want)
		}
	}
}

// fakeConn is a connection that only tells whether it was closed.
type fakeConn struct {
	net.Conn
	closed bool
}

func (c *fakeConn) Close() error { c.closed = true; return nil }

func TestExpiredIdleConnections(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	g := newConnGate(10, 2*time.Minute)
	g.now = func() time.Time { return now }
	old, fresh, busy := &fakeConn{}, &fakeConn{}, &fakeConn{}
	for range 5 {
		g.admit()
	}
	g.state(old, fasthttp.StateIdle)
	g.state(busy, fasthttp.StateIdle)
	g.state(busy, fasthttp.StateActive)
	now = now.Add(90 * time.Second)
	g.state(fresh, fasthttp.StateIdle)
	// Half full: fasthttp's own two minutes apply.
	if got := g.expired(); len(got) != 0 {
		t.Fatalf("expired at half load: %v", got)
	}
	// Nine tenths full: five seconds.
	for range 4 {
		g.admit()
	}
	got := g.expired()
	if len(got) != 1 || got[0] != old {
		t.Fatalf("expired %v, want only the connection idle for 90 s", got)
	}
	if got := g.expired(); len(got) != 0 {
		t.Fatalf("expired twice: %v", got)
	}
}

// serveCapped serves a route answering 200 on a loopback listener of its
// own, behind a cap of maxConns connections, until the test ends, and
// returns the listener's address.
func serveCapped(t *testing.T, maxConns int, method, path string) string {
	t.Helper()
	return serveGated(t, newConnGate(maxConns, time.Minute), method, path)
}

// serveGated is serveCapped behind gate g.
func serveGated(t *testing.T, g *connGate, method, path string) string {
	t.Helper()
	s := &Server{log: slog.New(slog.DiscardHandler), metrics: newMetrics(buildinfo.Info{}), gate: g}
	s.public = s.newListener(newMux([]*route{{method: method, path: path, access: accessPublic, handle: func(c *call) error {
		writeJSON(c.ctx, http.StatusOK, map[string]bool{"ok": true})
		return nil
	}}}), false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.ServePublic(ln) })
	t.Cleanup(func() {
		_ = s.public.srv.Shutdown()
		wg.Wait()
	})
	return ln.Addr().String()
}

// A connection over the cap is answered with the API's 503 and closed;
// once a place frees, the next connection is served.
func TestConnectionsOverTheCap(t *testing.T) {
	addr := serveCapped(t, 2, "GET", "/ok")

	get := func(c net.Conn) *http.Response {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := dial(), dial()
	for _, c := range []net.Conn{a, b} {
		if resp := get(c); resp.StatusCode != 200 {
			t.Fatalf("within the cap: %d", resp.StatusCode)
		}
	}
	// Over the cap, the answer waits for the request: an answer before
	// it is one the client does not expect.
	over := dial()
	_ = over.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := over.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("answered before the request: %d bytes, %v", n, err)
	}
	resp := get(over)
	var body struct {
		Detail string `json:"detail"`
		Error  struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-Request-Id") == "" ||
		!resp.Close || body.Error.Type != "service_unavailable" || body.Detail == "" {
		t.Fatalf("over the cap: %d %v %+v", resp.StatusCode, resp.Header, body)
	}
	// The refused connection took no place; a closed one gives its back.
	_ = a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := dial()
		if resp := get(c); resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a closed connection's place was never given back")
		}
	}
}

// A request whose body is still coming when it is refused over the cap
// gets its 503, not a reset: the connection is closed only once the client
// has sent what it was sending.
func TestRefusedUploadGetsItsAnswer(t *testing.T) {
	addr := serveCapped(t, 1, "POST", "/up")
	held, err := net.Dial("tcp", addr) // the one place
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	body := strings.Repeat("x", 4<<20) // more than the sockets' buffers hold
	for range 5 {
		resp, err := client.Post("http://"+addr+"/up", "application/octet-stream", strings.NewReader(body))
		if err != nil {
			t.Fatalf("upload over the cap: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("upload over the cap: %d %v", resp.StatusCode, resp.Header)
		}
	}
}

func TestReadHead(t *testing.T) {
	long := strings.Repeat("a", 10<<10) // past the reader's buffer
	for _, tc := range []struct {
		name, in string
		want     bool
	}{
		{"crlf", "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nbody", true},
		{"lf", "GET / HTTP/1.1\nHost: x\n\n", true},
		{"long header", "POST / HTTP/1.1\r\nX-Long: " + long + "\r\n\r\n", true},
		{"cut short", "GET / HTTP/1.1\r\nHost: x\r\n", false},
		{"nothing", "", false},
		{"too long", "GET / HTTP/1.1\r\nX-Long: " + strings.Repeat(long, 8) + "\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := readHead(bufio.NewReaderSize(strings.NewReader(tc.in), 4<<10)); got != tc.want {
				t.Fatalf("readHead = %v, want %v", got, tc.want)
			}
		})
	}
}

// Past maxRefusing refusals under way, a connection over the cap is
// answered at once rather than given a goroutine.
func TestRefusalsPastTheirBoundAnswerAtOnce(t *testing.T) {
	r := &refusals{answer: errOverCapacity, slots: make(chan struct{})} // none free
	server, client := net.Pipe()
	defer client.Close()
	go r.refuse(server)
	resp, err := http.ReadResponse(bufio.NewReader(client), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Fatalf("refused at once: %d, close %v", resp.StatusCode, resp.Close)
	}
	r.wait()
}

// The public listener's connections keep their own idle time, which their
// requests change without the listener's or the gate's lock: the gate
// expires them by it and the drain closes them by it, busy ones not.
func TestGatedConnectionsKeepTheirIdleTime(t *testing.T) {
	g := newConnGate(10, 2*time.Minute)
	l := &listener{gate: g, conns: map[net.Conn]time.Time{}}
	for range 9 {
		g.admit()
	}
	idleFake, busyFake := &fakeConn{}, &fakeConn{}
	idle, busy := &gatedConn{Conn: idleFake}, &gatedConn{Conn: busyFake}
	for _, c := range []*gatedConn{idle, busy} {
		l.track(c, fasthttp.StateNew)
		l.track(c, fasthttp.StateActive)
		l.track(c, fasthttp.StateIdle)
	}
	l.track(busy, fasthttp.StateActive)
	busy.serving()
	if len(g.conns) != 2 || len(l.conns) != 2 {
		t.Fatalf("followed: gate %d, listener %d; want 2 each", len(g.conns), len(l.conns))
	}

	g.now = func() time.Time { return time.Now().Add(90 * time.Second) }
	if got := g.expired(); len(got) != 1 || got[0] != idle {
		t.Fatalf("expired %v, want only the idle connection", got)
	}

	// The idle one went idle well over the drain's quiet time ago.
	idle.idle.Store(time.Now().Add(-time.Second).UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	l.drainConns(ctx, 10*time.Millisecond)
	if !idleFake.closed || busyFake.closed {
		t.Fatalf("drain closed the idle connection: %v, the busy one: %v", idleFake.closed, busyFake.closed)
	}

	for _, c := range []*gatedConn{idle, busy} {
		l.track(c, fasthttp.StateClosed)
	}
	if len(g.conns) != 0 || len(l.conns) != 0 {
		t.Fatalf("after closing: gate %d, listener %d followed", len(g.conns), len(l.conns))
	}
}

// Under pressure, a connection that waits on its client for a request's
// head (new and silent, or sending its head) goes as an idle one does;
// one whose request is in its handler stays.
func TestGateClosesConnectionsWaitingForAHead(t *testing.T) {
	g := newConnGate(10, 2*time.Minute)
	l := &listener{gate: g, conns: map[net.Conn]time.Time{}}
	for range 9 {
		g.admit()
	}
	silent, heading, serving := &gatedConn{Conn: &fakeConn{}}, &gatedConn{Conn: &fakeConn{}}, &gatedConn{Conn: &fakeConn{}}
	for _, c := range []*gatedConn{silent, heading, serving} {
		c.waiting.Store(time.Now().UnixNano()) // as gatedListener.Accept
		l.track(c, fasthttp.StateNew)
	}
	l.track(heading, fasthttp.StateActive)
	l.track(serving, fasthttp.StateActive)
	serving.serving()
	g.now = func() time.Time { return time.Now().Add(time.Second) }
	if got := g.expired(); len(got) != 0 {
		t.Fatalf("expired within the limit: %v", got)
	}
	g.now = func() time.Time { return time.Now().Add(10 * time.Second) }
	got := g.expired()
	if len(got) != 2 || !slices.Contains(got, net.Conn(silent)) || !slices.Contains(got, net.Conn(heading)) {
		t.Fatalf("expired %v, want the silent and the heading connections", got)
	}
	// With room, fasthttp's head timeout applies.
	g2 := newConnGate(10, 2*time.Minute)
	g2.admit()
	g2.state(silent, fasthttp.StateNew)
	g2.now = g.now
	if got := g2.expired(); len(got) != 0 {
		t.Fatalf("expired with room: %v", got)
	}
}

// Connections that send nothing do not keep the clients after them out
// for long when they fill the cap: the gate closes them, and the next
// client is served.
func TestSilentConnectionsGiveWay(t *testing.T) {
	g := newConnGate(2, time.Minute)
	g.idleMin = 200 * time.Millisecond
	addr := serveGated(t, g, "GET", "/ok")
	for i, head := range []string{"", "GET /ok HTTP/1.1\r\nHost: x\r\n"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(i, err)
		}
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get("http://" + addr + "/ok")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("silent connections kept the cap full: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
