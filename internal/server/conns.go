package server

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
)

// connGate bounds the public listener's connections. A connection over the
// cap is answered here, in the API's error shape (fasthttp's own cap would
// send a plain-text 503), and closed. As connections approach the cap, idle
// keep-alive connections are closed sooner: under pressure an idle socket
// holds a place a new client needs.
type connGate struct {
	max int
	// idleMax is how long a keep-alive connection may idle when there is
	// room; idleMin when the listener is nearly full.
	idleMax, idleMin time.Duration
	now              func() time.Time

	mu   sync.Mutex
	open int
	idle map[net.Conn]time.Time // since when each idle connection has waited
}

func newConnGate(max int, idleMax time.Duration) *connGate {
	return &connGate{max: max, idleMax: idleMax, idleMin: 5 * time.Second, now: time.Now, idle: map[net.Conn]time.Time{}}
}

// errOverCapacity is the answer to a connection over the cap.
var errOverCapacity = &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: time.Second,
	Message: "Service temporarily unavailable, please retry: the gateway is serving as many connections as it may"}

// admit counts a new connection, or reports that it is over the cap.
func (g *connGate) admit() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open >= g.max {
		return false
	}
	g.open++
	return true
}

func (g *connGate) release() {
	g.mu.Lock()
	g.open--
	g.mu.Unlock()
}

// state follows fasthttp's view of each connection: only an idle one may
// be closed early.
func (g *connGate) state(c net.Conn, st fasthttp.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch st {
	case fasthttp.StateIdle:
		g.idle[c] = g.now()
	default:
		delete(g.idle, c)
	}
}

// idleLimit is how long a connection may idle with open connections open:
// the whole keep-alive time up to half the cap, shrinking linearly to
// idleMin at nine tenths of it.
func (g *connGate) idleLimit(open int) time.Duration {
	switch {
	case 2*open <= g.max:
		return g.idleMax
	case 10*open >= 9*g.max:
		return g.idleMin
	}
	// The way from half to nine tenths of the cap, in integers.
	num, den := time.Duration(10*open-5*g.max), time.Duration(4*g.max)
	return g.idleMax - (g.idleMax-g.idleMin)*num/den
}

// expired lists the idle connections waiting longer than the load allows.
func (g *connGate) expired() []net.Conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	limit := g.idleLimit(g.open)
	if limit >= g.idleMax {
		return nil // fasthttp's own IdleTimeout applies
	}
	now := g.now()
	var out []net.Conn
	for c, since := range g.idle {
		if now.Sub(since) > limit {
			out = append(out, c)
			delete(g.idle, c)
		}
	}
	return out
}

// reap closes expired idle connections every second until stop closes.
func (g *connGate) reap(stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			for _, c := range g.expired() {
				_ = c.Close()
			}
		}
	}
}

// refuse answers a connection over the cap and closes it. The answer is a
// few hundred bytes, which a new socket's send buffer takes at once; the
// deadline only guards against a peer that is already gone.
func refuse(c net.Conn) {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.Header.Set("X-Request-Id", uuid.NewString())
	status, body := renderError(&resp.Header, errOverCapacity, formCompatible)
	resp.SetStatusCode(status)
	resp.Header.SetContentType("application/json")
	resp.SetConnectionClose()
	resp.SetBodyRaw(body)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	w := bufio.NewWriter(c)
	if resp.Write(w) == nil {
		_ = w.Flush()
	}
	_ = c.Close()
}

// gatedListener admits connections through a connGate.
type gatedListener struct {
	net.Listener
	g *connGate
}

func (l gatedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.g.admit() {
			return &gatedConn{Conn: c, g: l.g}, nil
		}
		refuse(c)
	}
}

// gatedConn gives its place back when closed, once, and keeps its
// registration with the client watch for its whole life.
type gatedConn struct {
	net.Conn
	g     *connGate
	once  sync.Once
	watch atomic.Pointer[watchEntry]
}

func (c *gatedConn) heldWatch() *watchEntry  { return c.watch.Load() }
func (c *gatedConn) holdWatch(e *watchEntry) { c.watch.Store(e) }

// SyscallConn reaches the socket under the wrapper, which the client
// watch registers to notice a departed client.
func (c *gatedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("the connection has no socket")
	}
	return sc.SyscallConn()
}

func (c *gatedConn) Close() error {
	if e := c.watch.Swap(nil); e != nil {
		e.release()
	}
	err := c.Conn.Close()
	c.once.Do(c.g.release)
	return err
}
