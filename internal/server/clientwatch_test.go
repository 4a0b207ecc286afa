package server

import (
	"net"
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
