package server

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair is a loopback connection: the server's end, wrapped as the
// public listener wraps it, and the client's.
func tcpPair(t *testing.T, stall time.Duration, stalled func(net.Conn)) (*gatedConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	gl := gatedListener{Listener: ln, stall: stall, stalled: stalled}
	c, err := gl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*gatedConn), client
}

// A client that reads nothing is cut off: the write fails as stalled, the
// listener hears of it, and the client gets a reset after what its kernel
// had taken, which is all the connection counts as acknowledged.
func TestStalledClientIsCutOff(t *testing.T) {
	var stalls atomic.Int32
	server, client := tcpPair(t, 200*time.Millisecond, func(net.Conn) { stalls.Add(1) })
	body := make([]byte, 64<<20) // far more than any socket buffer
	n, err := server.Write(body)
	if !errors.Is(err, errStalled) || n == len(body) {
		t.Fatalf("write to a client that reads nothing: %d bytes, %v", n, err)
	}
	if stalls.Load() != 1 {
		t.Fatalf("%d stalls reported", stalls.Load())
	}
	if server.Written() != int64(n) {
		t.Fatalf("written %d, the write said %d", server.Written(), n)
	}
	acked := server.Acknowledged()
	if acked <= 0 || acked > int64(n) {
		t.Fatalf("acknowledged %d of %d written", acked, n)
	}
	server.Close()
	got, err := io.Copy(io.Discard, client)
	if err == nil {
		t.Fatal("the stalled client's connection was closed, not reset")
	}
	if _, known := unacknowledged(server.Conn); known && got != acked {
		t.Fatalf("the client received %d bytes; %d were counted acknowledged", got, acked)
	}
}

// A client that reads, however slowly, is not cut off.
func TestReadingClientIsNotCutOff(t *testing.T) {
	server, client := tcpPair(t, 10*time.Second, nil)
	body := make([]byte, 8<<20)
	read := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, client)
		read <- n
	}()
	if n, err := server.Write(body); err != nil || n != len(body) {
		t.Fatalf("write to a reading client: %d bytes, %v", n, err)
	}
	server.Close()
	if n := <-read; n != int64(len(body)) {
		t.Fatalf("the client read %d of %d bytes", n, len(body))
	}
}

// Once something else sets the connection's deadlines, as a worker link
// does after the upgrade, they are its own: a write ends at its deadline,
// not as a stall.
func TestOwnDeadlinesOverrideTheStall(t *testing.T) {
	server, _ := tcpPair(t, time.Nanosecond, nil)
	if err := server.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := server.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := server.Write(make([]byte, 64<<20))
	if errors.Is(err, errStalled) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past its own deadline: %v", err)
	}
}

func TestKeepDeadline(t *testing.T) {
	start := time.Unix(1000, 0)
	due := start.Add(30 * time.Second)
	for _, tc := range []struct {
		name string
		have time.Time
		keep bool
	}{
		{"none set", time.Time{}, false},
		{"passed", start.Add(-time.Millisecond), false},
		{"at the start", start, false},
		{"between", start.Add(10 * time.Second), true},
		{"at due", due, true},
		{"after due", due.Add(time.Nanosecond), false},
	} {
		if got := keepDeadline(tc.have, start, due); got != tc.keep {
			t.Errorf("%s: keep %v, want %v", tc.name, got, tc.keep)
		}
	}
}

// A deadline kept from an earlier write ends a wait early, and the write
// then waits out the rest of the stall: the client is cut off only after
// the whole stall.
func TestKeptDeadlineDoesNotShortenTheStall(t *testing.T) {
	const stall = 300 * time.Millisecond
	server, _ := tcpPair(t, stall, nil)
	if _, err := server.Write([]byte("data: first\n\n")); err != nil {
		t.Fatal(err)
	}
	// The first write's deadline is kept; half the stall later it is due
	// in the middle of the next write's wait.
	time.Sleep(stall / 2)
	start := time.Now()
	_, err := server.Write(make([]byte, 64<<20))
	if !errors.Is(err, errStalled) {
		t.Fatalf("write to a client that reads nothing: %v", err)
	}
	if waited := time.Since(start); waited < stall {
		t.Fatalf("cut off after %s, before the stall of %s", waited, stall)
	}
}

func TestKeepReadDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	due := now.Add(2 * time.Minute)
	for _, tc := range []struct {
		name      string
		have, due time.Time
		keep      bool
	}{
		{"none set", time.Time{}, due, false},
		{"passed", now.Add(-time.Millisecond), due, false},
		{"now", now, due, false},
		{"before due", now.Add(time.Minute), due, true},
		{"at due", due, due, true},
		{"after due", due.Add(time.Nanosecond), due, false},
		{"none asked", now.Add(time.Minute), time.Time{}, true},
		{"none set, none asked", time.Time{}, time.Time{}, false},
	} {
		if got := keepReadDeadline(tc.have, now, tc.due); got != tc.keep {
			t.Errorf("%s: keep %v, want %v", tc.name, got, tc.keep)
		}
	}
}

// A read deadline kept from before ends a read early, and the read goes
// on to the deadline asked for: data that comes between the two is read,
// and a read of nothing times out at the later one, not before.
func TestKeptReadDeadline(t *testing.T) {
	const kept, asked = 100 * time.Millisecond, 400 * time.Millisecond
	server, client := tcpPair(t, time.Minute, nil)
	buf := make([]byte, 16)

	_ = server.SetReadDeadline(time.Now().Add(kept))
	_ = server.SetReadDeadline(time.Now().Add(asked))
	if !server.readSet.Before(server.readDue) {
		t.Fatalf("the earlier deadline %v was not kept for %v", server.readSet, server.readDue)
	}
	go func() {
		time.Sleep(2 * kept)
		_, _ = client.Write([]byte("GET"))
	}()
	if n, err := server.Read(buf); err != nil || string(buf[:n]) != "GET" {
		t.Fatalf("read between the kept deadline and the one asked for: %q, %v", buf[:n], err)
	}

	_ = server.SetReadDeadline(time.Now().Add(kept))
	start := time.Now()
	_ = server.SetReadDeadline(start.Add(asked))
	_, err := server.Read(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read of nothing: %v, want a timeout", err)
	}
	if waited := time.Since(start); waited < asked {
		t.Fatalf("timed out after %s, before the %s asked for", waited, asked)
	}

	// Once the deadlines are another's (a worker link's), they are set as
	// asked.
	_ = server.SetDeadline(time.Time{})
	_ = server.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := server.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past a deadline set by the connection's owner: %v", err)
	}
}
