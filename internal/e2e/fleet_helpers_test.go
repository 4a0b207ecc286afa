package e2e

import (
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/harness"
)

// workers lists the organisation's workers with key.
func (s *server) workers(key string) []map[string]any {
	s.t.Helper()
	r := s.do("GET", "/api/v1/workers", "", bearer(key))
	if r.Status != 200 {
		s.t.Fatalf("workers = %d %s", r.Status, r.Body)
	}
	var out struct {
		Workers []map[string]any `json:"workers"`
	}
	if err := json.Unmarshal(r.Body, &out); err != nil {
		s.t.Fatal(err)
	}
	return out.Workers
}

// workerNamed waits until the worker called name satisfies ok.
func (s *server) workerNamed(key, name string, ok func(map[string]any) bool) map[string]any {
	s.t.Helper()
	var found map[string]any
	if !harness.Eventually(15*time.Second, func() bool {
		for _, w := range s.workers(key) {
			if w["worker_name"] == name && ok(w) {
				found = w
				return true
			}
		}
		return false
	}) {
		s.t.Fatalf("worker %s never reached the wanted state: %v", name, s.workers(key))
	}
	return found
}

func statusIs(want string) func(map[string]any) bool {
	return func(w map[string]any) bool { return w["status"] == want }
}

// events lists worker events with key.
func (s *server) events(key, query string) []map[string]any {
	s.t.Helper()
	r := s.do("GET", "/api/v1/workers/events"+query, "", bearer(key))
	if r.Status != 200 {
		s.t.Fatalf("events = %d %s", r.Status, r.Body)
	}
	var out []map[string]any
	if err := json.Unmarshal(r.Body, &out); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// linkEvents is the connects and disconnects among evs, newest first as
// listed, joined by spaces: "connected disconnected connected".
func linkEvents(evs []map[string]any) string {
	var out []string
	for _, e := range evs {
		if typ, _ := e["event_type"].(string); typ == api.EventConnected || typ == api.EventDisconnected {
			out = append(out, typ)
		}
	}
	return strings.Join(out, " ")
}

// waitEvent waits for an event matching ok.
func (s *server) waitEvent(key, query string, ok func(map[string]any) bool) map[string]any {
	s.t.Helper()
	var found map[string]any
	if !harness.Eventually(15*time.Second, func() bool {
		for _, e := range s.events(key, query) {
			if ok(e) {
				found = e
				return true
			}
		}
		return false
	}) {
		s.t.Fatalf("no matching event in %v", s.events(key, query))
	}
	return found
}

// proxy relays TCP connections to a target and can cut them all at once,
// to break worker links the way a flaky network does.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	held   bool // refuse new connections, as a network that is down does
	wg     sync.WaitGroup
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		held := p.held
		p.mu.Unlock()
		if held {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(c, up) })
		p.wg.Go(func() { p.pipe(up, c) })
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// hold refuses new connections until it is called with false.
func (p *proxy) hold(on bool) {
	p.mu.Lock()
	p.held = on
	p.mu.Unlock()
}

// cut closes every connection through the proxy.
func (p *proxy) cut() int {
	p.mu.Lock()
	n := len(p.conns) / 2
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	return n
}

// sseData returns the data payloads of an SSE body.
func sseData(body []byte) []string {
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}
