package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// fakeReplica answers /readyz with its readiness and every other path
// with its name.
type fakeReplica struct {
	name  string
	ready atomic.Bool
	srv   *httptest.Server
}

func newFakeReplica(t *testing.T, name string, ready bool) *fakeReplica {
	f := &fakeReplica{name: name}
	f.ready.Store(ready)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			if !f.ready.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		io.WriteString(w, f.name)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeReplica) addr() string { return strings.TrimPrefix(f.srv.URL, "http://") }

// via sends one request on a connection of its own through the balancer
// and returns the body, "" when the connection was refused or cut.
func via(t *testing.T, b *balancer) string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Get(b.URL() + "/")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func TestBalancerSendsToReadyBackends(t *testing.T) {
	deadAddr := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	for _, tc := range []struct {
		name  string
		ready []bool // per fake replica; a dead address is added after them
		want  map[string]bool
	}{
		{"the ready one of three", []bool{false, true, false}, map[string]bool{"r1": true}},
		{"round robin among the ready", []bool{true, true, false}, map[string]bool{"r0": true, "r1": true}},
		{"a live one when none is ready", []bool{false}, map[string]bool{"r0": true}},
		{"nothing when every backend is dead", nil, map[string]bool{"": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var addrs []string
			for i, ready := range tc.ready {
				addrs = append(addrs, newFakeReplica(t, "r"+string(rune('0'+i)), ready).addr())
			}
			addrs = append(addrs, deadAddr(t))
			b, err := startBalancer(addrs)
			if err != nil {
				t.Fatal(err)
			}
			defer b.close()
			seen := map[string]bool{}
			for range 12 {
				seen[via(t, b)] = true
			}
			if len(seen) != len(tc.want) {
				t.Fatalf("answered by %v, want %v", seen, tc.want)
			}
			for k := range tc.want {
				if !seen[k] {
					t.Fatalf("answered by %v, want %v", seen, tc.want)
				}
			}
		})
	}
}

func TestBalancerFollowsTheReadyBackend(t *testing.T) {
	a, s := newFakeReplica(t, "a", true), newFakeReplica(t, "s", false)
	b, err := startBalancer([]string{a.addr(), s.addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if got := via(t, b); got != "a" {
		t.Fatalf("first answered by %q", got)
	}
	// A kept connection stays with its backend; its backend dying ends it.
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	a.ready.Store(false)
	s.ready.Store(true)
	a.srv.CloseClientConnections()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := br.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the kept connection outlived its backend: read %d bytes", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the kept connection was not closed when its backend closed it")
	}
	if !harness.Eventually(5*time.Second, func() bool { return via(t, b) == "s" }) {
		t.Fatal("new connections did not move to the backend that became ready")
	}
}

func TestBalancerCloseEndsConnections(t *testing.T) {
	a := newFakeReplica(t, "a", true)
	b, err := startBalancer([]string{a.addr()})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The connection is spliced once the backend answers on it.
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	if _, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		b.close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not return with a connection open")
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(br); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("close left the client's connection open")
		}
	}
}
