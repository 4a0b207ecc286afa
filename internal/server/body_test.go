package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
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
	// Once out of time it stays so: a reader going on (a parser reading
	// past a part, a drain) fails at once, without waiting again.
	set := len(conn.set)
	if _, err := b.Read(buf); !errors.Is(err, errRequestTimeout) || len(conn.set) != set {
		t.Fatalf("read after the timeout: %v, %d deadlines set", err, len(conn.set)-set)
	}
	// A fresh body waits bodyIdle for its next bytes, not its whole grace.
	fresh := &pacedBody{r: &timingOut{reads: 1, n: 1}, conn: conn, start: time.Now()}
	_, _ = fresh.Read(buf)
	if d := time.Until(conn.set[len(conn.set)-1]); d > bodyIdle || d < bodyIdle-time.Second {
		t.Fatalf("fresh body's deadline %v from now, want %v", d, bodyIdle)
	}
}

// A body whose connection ends before the body does is its client's
// leaving (499), not a malformed request: fasthttp reads a short body
// with a length as a plain end, and a chunked one as an unexpected one.
func TestPacedBodyCutShort(t *testing.T) {
	for _, tc := range []struct {
		name   string
		r      io.Reader
		length int64
		want   error
	}{
		{"short of its length", strings.NewReader("abc"), 10, errClientGone},
		{"a chunked body cut", io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(io.ErrUnexpectedEOF)), -1, errClientGone},
		{"reset", io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(syscall.ECONNRESET)), 10, errClientGone},
		{"whole", strings.NewReader("abc"), 3, io.EOF},
		{"whole, chunked", strings.NewReader("abc"), -1, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &pacedBody{r: tc.r, length: tc.length}
			got, err := io.ReadAll(b)
			if tc.want == io.EOF {
				if err != nil || string(got) != "abc" {
					t.Fatalf("%q, %v; want the body", got, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || string(got) != "abc" {
				t.Fatalf("%q, %v; want %v", got, err, tc.want)
			}
			if _, again := b.Read(make([]byte, 1)); !errors.Is(again, tc.want) {
				t.Fatalf("read again: %v", again)
			}
		})
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
			got, err := readPieces(tc.in, tc.max, func(int) bool { return true })
			switch {
			case tc.want < 0 && !errors.Is(err, broken):
				t.Fatalf("err %v, want the reader's", err)
			case tc.want >= 0 && (err != nil || len(got) != tc.want):
				t.Fatalf("%d bytes, %v; want %d", len(got), err, tc.want)
			}
		})
	}
}

// The bodies read whole hold no more memory together than their budget:
// a piece the budget cannot take ends the read, and what a read took is
// given back by its taker.
func TestReadPiecesTakesFromTheBudget(t *testing.T) {
	b := &bodyBudget{max: 1 << 20}
	var held int64
	take := func(n int) bool { return b.take(&held, n) }
	got, err := readPieces(bytes.NewReader(make([]byte, 600<<10)), 32<<20, take)
	if err != nil || len(got) != 600<<10 || held == 0 || b.used.Load() != held {
		t.Fatalf("%d bytes, %v; %d held, %d used", len(got), err, held, b.used.Load())
	}
	first := held
	// A second body at the same time finds the budget short.
	if _, err := readPieces(bytes.NewReader(make([]byte, 600<<10)), 32<<20, take); !errors.Is(err, errBodyMemory) {
		t.Fatalf("a body past the budget: %v, want errBodyMemory", err)
	}
	b.give(held)
	if b.used.Load() != 0 {
		t.Fatalf("%d used after all was given back", b.used.Load())
	}
	held = 0
	if _, err := readPieces(bytes.NewReader(make([]byte, 600<<10)), 32<<20, take); err != nil || held != first {
		t.Fatalf("once the first was given back: %v, %d held", err, held)
	}
	// A small body takes nothing: its one piece is not counted.
	held = 0
	if _, err := readPieces(strings.NewReader("small"), 32<<20, take); err != nil || held != 0 {
		t.Fatalf("a small body: %v, %d held", err, held)
	}
}

// A streamed answer's body gives the request body's memory back once it
// is done with, written or not, and only once.
func TestRelayBodyGivesBackOnClose(t *testing.T) {
	for _, written := range []bool{true, false} {
		abandoned, given := 0, 0
		b := &relayBody{write: func(*chunks) {}, abandon: func() { abandoned++ }, closed: func() { given++ }}
		if written {
			if _, err := b.WriteTo(io.Discard); err != nil {
				t.Fatal(err)
			}
		}
		_ = b.Close()
		_ = b.Close()
		if given != 1 || abandoned != map[bool]int{true: 0, false: 1}[written] {
			t.Fatalf("written %v: given back %d times, abandoned %d", written, given, abandoned)
		}
	}
}
