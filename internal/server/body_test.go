package server

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"os"
	"testing"
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
