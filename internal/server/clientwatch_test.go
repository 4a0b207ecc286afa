package server

import (
	"net"
	"runtime"
	"testing"
	"time"
)

// The watch fires when the peer closes, not before, and not after remove.
func TestClientWatch(t *testing.T) {
	w := newClientWatch(20 * time.Millisecond)
	defer w.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pair := func() (server, client net.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return s, c
	}

	s1, c1 := pair()
	defer s1.Close()
	fired := make(chan struct{}, 1)
	e := w.add(s1, func() { fired <- struct{}{} })
	if e == nil {
		t.Skip("connections cannot be watched on this platform")
	}
	// Pipelined data is not a departure.
	if _, err := c1.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fired:
		t.Fatal("fired while the client is still there")
	case <-time.After(100 * time.Millisecond):
	}
	start := time.Now()
	c1.Close()
	select {
	case <-fired:
		t.Logf("noticed the close after %v", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("did not notice the client closing")
	}
	// Nothing was consumed from the socket.
	buf := make([]byte, 16)
	if n, _ := s1.Read(buf); string(buf[:n]) != "GET / HTTP/1.1\r\n" {
		t.Fatalf("the watch consumed data: %q", buf[:n])
	}

	s2, c2 := pair()
	defer s2.Close()
	e2 := w.add(s2, func() { fired <- struct{}{} })
	w.remove(e2)
	c2.Close()
	select {
	case <-fired:
		t.Fatal("fired after remove")
	case <-time.After(300 * time.Millisecond):
	}
}

// A connection of the public listener stays registered across its
// requests: the watch fires for the request being watched, not between
// requests, and a departure seen between requests cancels the next one.
func TestClientWatchKept(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only the epoll watch keeps connections registered")
	}
	w := newClientWatch(20 * time.Millisecond)
	defer w.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	gate := newConnGate(4, time.Minute)
	gated := gatedListener{Listener: ln, g: gate}
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	conn, err := gated.Accept()
	if err != nil {
		t.Fatal(err)
	}
	fired := make(chan string, 4)
	first := w.add(conn, func() { fired <- "first" })
	if first == nil {
		t.Skip("connections cannot be watched on this platform")
	}
	w.remove(first)
	second := w.add(conn, func() { fired <- "second" })
	if _, isKept := conn.(watchHolder); isKept && second != first {
		t.Fatal("a kept connection registered again for its second request")
	}
	client.Close()
	select {
	case got := <-fired:
		if got != "second" {
			t.Fatalf("fired for the %s request, want the one being watched", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("did not notice the client closing")
	}
	w.remove(second)
	// The client is gone: a request started on the connection now is
	// cancelled at once.
	if e := w.add(conn, func() { fired <- "third" }); e != nil {
		t.Fatal("watched a request whose client had already left")
	}
	if got := <-fired; got != "third" {
		t.Fatalf("fired %s, want third", got)
	}
	conn.Close()
	w.mu.Lock()
	left := len(w.entries)
	w.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d entries left after the connection closed", left)
	}
	if gate.open != 0 {
		t.Fatalf("the gate counts %d connections after close", gate.open)
	}
}
