package server

import (
	"net"
	"testing"
	"time"
)

// The client watch finds the socket under a gated connection: without it
// no departed client would be noticed.
func TestGatedConnKeepsItsSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := socketFD(&gatedConn{Conn: c, g: newConnGate(1, time.Minute)}); !ok {
		t.Fatal("no socket under a gated connection")
	}
}
