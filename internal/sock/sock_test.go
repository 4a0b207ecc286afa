package sock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// pair is a loopback TCP connection with raw calls on both ends, also
// under the race detector (where Wrap leaves connections as they are).
func pair(t testing.TB) (a, b *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed := make(chan net.Conn, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	d := <-dialed
	if d == nil {
		t.FailNow()
	}
	a, aok := wrap(accepted).(*Conn)
	b, bok := wrap(d).(*Conn)
	if !aok || !bok {
		accepted.Close()
		d.Close()
		t.Skip("no raw socket calls on this platform")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestReadWrite(t *testing.T) {
	a, b := pair(t)
	msg := bytes.Repeat([]byte("chunk "), 100000) // more than the socket buffers hold
	done := make(chan error, 1)
	go func() {
		_, err := a.Write(msg)
		if err == nil {
			err = a.CloseWrite()
		}
		done <- err
	}()
	got, err := io.ReadAll(b) // ends at io.EOF
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("read %d bytes, want %d", len(got), len(msg))
	}
	if n, err := b.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("read after the end: %d, %v", n, err)
	}
	if n, err := b.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty read: %d, %v", n, err)
	}
}

// Deadlines, closes and a reset come back as net.Conn's own errors do.
func TestErrors(t *testing.T) {
	a, b := pair(t)

	_ = b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := b.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v", err)
	}
	_ = b.SetReadDeadline(time.Time{})

	// A writer whose reader reads nothing fills the buffers and waits.
	_ = a.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
	n, err := a.Write(make([]byte, 64<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n <= 0 || n >= 64<<20 {
		t.Fatalf("write past its deadline: %d, %v", n, err)
	}

	_ = b.SetLinger(0)
	b.Close()
	if _, err := b.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read of a closed connection: %v", err)
	}
	_ = a.SetWriteDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, err = a.Write([]byte("x")); err != nil {
			break
		}
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a reset connection: %v", err)
	}
}

// A read waiting on the socket and a write on it go on at once.
func TestReadWhileWriting(t *testing.T) {
	a, b := pair(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 4)
		if _, err := io.ReadFull(a, buf); err != nil || string(buf) != "pong" {
			t.Errorf("a read %q, %v", buf, err)
		}
	})
	if _, err := a.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(b, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("b read %q, %v", buf, err)
	}
	if _, err := b.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// A read waiting on the socket ends when another goroutine closes the
// connection, as the client watch and the link's owners do.
func TestCloseEndsAWaitingRead(t *testing.T) {
	_, b := pair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 8))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // the read is waiting on the poller
	b.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the read went on after the close")
	}
}

// What is no socket, or runs under the race detector, is left as it is.
func TestWrapLeavesOthers(t *testing.T) {
	c, d := net.Pipe()
	defer c.Close()
	defer d.Close()
	if Wrap(c) != c {
		t.Fatal("a pipe was wrapped")
	}
	a, _ := pair(t)
	tc := a.Conn
	_, wrapped := Wrap(tc).(*Conn)
	if wrapped == raceEnabled {
		t.Fatalf("a TCP connection wrapped %v with the race detector %v", wrapped, raceEnabled)
	}
}

func BenchmarkRoundTrip(b *testing.B) {
	for _, raw := range []bool{true, false} {
		name := "net"
		if raw {
			name = "raw"
		}
		b.Run(name, func(b *testing.B) {
			x, y := pair(b)
			var cx, cy net.Conn = x, y
			if !raw {
				cx, cy = x.Conn, y.Conn
			}
			go func() {
				buf := make([]byte, 64)
				for {
					n, err := cy.Read(buf)
					if err != nil {
						return
					}
					if _, err := cy.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
			msg, buf := []byte("data: {}\n\n"), make([]byte, 64)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cx.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(cx, buf[:len(msg)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
