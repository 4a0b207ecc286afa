package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// deadlineConn records the read deadlines set on it.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

// timingOut reads n bytes a read, then times out as a connection's read
// past its deadline does.
type timingOut struct{ reads, n int }

func (r *timingOut) Read(p []byte) (int, error) {
	if r.reads == 0 {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	}
	r.reads--
	return copy(p, bytes.Repeat([]byte("x"), r.n)), nil
}

// A body's reads wait at most bodyIdle each, and the body as a whole
// bodyGrace plus what its bytes have earned at minBodyRate; one that runs
// out of time is errRequestTimeout, a 408.
func TestPacedBody(t *testing.T) {
	conn := &deadlineConn{}
	start := time.Now()
	b := &pacedBody{r: &timingOut{reads: 2, n: 4 << 10}, conn: conn, start: start.Add(-bodyGrace)}
	buf := make([]byte, 8<<10)
	if n, err := b.Read(buf); n != 4<<10 || err != nil {
		t.Fatalf("first read: %d, %v", n, err)
	}
	// Two minutes in with nothing yet: no time left for the whole.
	if d := conn.set[0].Sub(start); d > time.Millisecond {
		t.Fatalf("first deadline %v from now, want none left", d)
	}
	if _, err := b.Read(buf); err != nil {
		t.Fatal(err)
	}
	// 4 KB earned a second.
	if d := conn.set[1].Sub(start); d < 900*time.Millisecond || d > 1100*time.Millisecond {
		t.Fatalf("second deadline %v from now, want a second", d)
	}
	_, err := b.Read(buf)
	if !errors.Is(err, errRequestTimeout) || errRequestTimeout.HTTPStatus() != http.StatusRequestTimeout {
		t.Fatalf("timed out: %v", err)
	}
	// A fresh body waits bodyIdle for its next bytes, not its whole grace.
	fresh := &pacedBody{r: &timingOut{reads: 1, n: 1}, conn: conn, start: time.Now()}
	_, _ = fresh.Read(buf)
	if d := time.Until(conn.set[len(conn.set)-1]); d > bodyIdle || d < bodyIdle-time.Second {
		t.Fatalf("fresh body's deadline %v from now, want %v", d, bodyIdle)
	}
}

// oneByteReader hands out a byte a read, as a trickling client does.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) { return o.r.Read(p[:min(1, len(p))]) }

func TestReadPieces(t *testing.T) {
	broken := errors.New("broken chunk")
	for _, tc := range []struct {
		name string
		in   io.Reader
		max  int
		want int // bytes; -1 for an error
	}{
		{"empty", strings.NewReader(""), 100, 0},
		{"small", strings.NewReader("hello"), 100, 5},
		{"one piece exactly", bytes.NewReader(make([]byte, 16<<10)), 1 << 20, 16 << 10},
		{"several pieces", bytes.NewReader(make([]byte, 3<<20+7)), 8 << 20, 3<<20 + 7},
		{"stops at max", bytes.NewReader(make([]byte, 5<<20)), 2<<20 + 1, 2<<20 + 1},
		{"a byte at a time", oneByteReader{strings.NewReader("trickle")}, 100, 7},
		{"broken midway", io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(broken)), 100, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readPieces(tc.in, tc.max)
			switch {
			case tc.want < 0 && !errors.Is(err, broken):
				t.Fatalf("err %v, want the reader's", err)
			case tc.want >= 0 && (err != nil || len(got) != tc.want):
				t.Fatalf("%d bytes, %v; want %d", len(got), err, tc.want)
			}
		})
	}
}
