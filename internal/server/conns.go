package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/sock"
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
	// conns are the connections followed, each with the time it went idle
	// between two requests, zero while new or busy. A gatedConn keeps that
	// time itself (see idleSince), and here is only listed.
	conns map[net.Conn]time.Time
}

func newConnGate(max int, idleMax time.Duration) *connGate {
	return &connGate{max: max, idleMax: idleMax, idleMin: 5 * time.Second, now: time.Now, conns: map[net.Conn]time.Time{}}
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
// be closed early. A gatedConn's requests do not come here (see
// listener.track).
func (g *connGate) state(c net.Conn, st fasthttp.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch st {
	case fasthttp.StateIdle:
		g.conns[c] = g.now()
	case fasthttp.StateNew, fasthttp.StateActive:
		g.conns[c] = time.Time{}
	default:
		delete(g.conns, c)
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
	for c, since := range g.conns {
		if since = idleSince(c, since); !since.IsZero() && now.Sub(since) > limit || waitedOver(c, now, limit) {
			out = append(out, c)
			delete(g.conns, c)
		}
	}
	return out
}

// waitedOver reports a gatedConn that has waited on its client for a
// request's head for longer than limit.
func waitedOver(c net.Conn, now time.Time, limit time.Duration) bool {
	gc, ok := c.(*gatedConn)
	if !ok {
		return false
	}
	t := gc.waiting.Load()
	return t != 0 && now.Sub(time.Unix(0, t)) > limit
}

// idleSince is when c went idle, zero while it is busy: its own record
// for a gatedConn, else since, the one kept for it.
func idleSince(c net.Conn, since time.Time) time.Time {
	if gc, ok := c.(*gatedConn); ok {
		if t := gc.idle.Load(); t != 0 {
			return time.Unix(0, t)
		}
		return time.Time{}
	}
	return since
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

// refusals answers connections the server will not serve with a 503: over
// the cap, or still queued when a stopping server closes its socket (see
// keptListener.release). Each is answered once
// its request's head has come, on a goroutine of its own: an answer
// before the request is one its client does not expect (Go's logs it as
// unsolicited and drops it), and a connection closed with a request body
// still arriving is reset, so the client sees the reset, not the 503. At
// most maxRefusing are answered that way at once; past them a flood's
// connections are answered at once and closed.
type refusals struct {
	answer *api.Error // a 503 with Retry-After
	slots  chan struct{}
	wg     sync.WaitGroup
}

const (
	// maxRefusing bounds the goroutines that answer refused connections.
	maxRefusing = 256
	// refuseWithin bounds the time a refused connection is given to send
	// its request and take its answer; refuseDrain the bytes of a request
	// body read and dropped after the answer.
	refuseWithin = 2 * time.Second
	refuseDrain  = 32 << 20
	// maxRefusedHead bounds the request head read before the answer.
	maxRefusedHead = 64 << 10
)

func newRefusals(answer *api.Error) *refusals {
	return &refusals{answer: answer, slots: make(chan struct{}, maxRefusing)}
}

// refuse answers c with the refusals' 503 and closes it.
func (r *refusals) refuse(c net.Conn) {
	select {
	case r.slots <- struct{}{}:
		r.wg.Go(func() {
			defer func() { <-r.slots }()
			refuseAfterRequest(c, r.answer)
		})
	default:
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		writeRefusal(c, r.answer)
		_ = c.Close()
	}
}

// wait waits for the refusals under way, each at most refuseWithin.
func (r *refusals) wait() { r.wg.Wait() }

// refuseAfterRequest reads c's request head, answers it with answer and
// closes the connection once the client has sent the rest
// of what it was sending (within refuseWithin and refuseDrain), so that the
// close does not reset the answer away.
func refuseAfterRequest(c net.Conn, answer *api.Error) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseWithin))
	br := bufio.NewReaderSize(c, 4<<10)
	if !readHead(br) {
		return
	}
	writeRefusal(c, answer)
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.CopyN(io.Discard, br, refuseDrain)
}

// readHead reads an HTTP request's head, through its blank line; false
// when the connection ended, timed out or sent more than maxRefusedHead
// first.
func readHead(br *bufio.Reader) bool {
	n := 0
	lineStart := true
	for n < maxRefusedHead {
		b, err := br.ReadSlice('\n')
		n += len(b)
		switch {
		case err == bufio.ErrBufferFull:
			lineStart = false
			continue
		case err != nil:
			return false
		}
		if lineStart && (len(b) == 1 || len(b) == 2 && b[0] == '\r') {
			return true
		}
		lineStart = true
	}
	return false
}

// writeRefusal writes answer with Connection: close. The answer
// is a few hundred bytes, which a new socket's send buffer takes at once;
// the caller's deadline only guards against a peer that is already gone.
func writeRefusal(c net.Conn, answer *api.Error) {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.Header.Set("X-Request-Id", uuid.NewString())
	status, body := renderError(&resp.Header, answer, formCompatible)
	resp.SetStatusCode(status)
	resp.Header.SetContentType("application/json")
	resp.SetConnectionClose()
	resp.SetBodyRaw(body)
	w := bufio.NewWriter(c)
	if resp.Write(w) == nil {
		_ = w.Flush()
	}
}

// gatedListener admits connections through a connGate (none when g is
// nil) and cuts off clients that stop reading for longer than stall.
type gatedListener struct {
	net.Listener
	g       *connGate
	refused *refusals // answers those over the cap; set with g
	stall   time.Duration
	// stalled is told of every connection cut off for not reading, and
	// overCap of every one refused at the cap.
	stalled func(net.Conn)
	overCap func()
}

func (l gatedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.g == nil || l.g.admit() {
			// At most sendQueue bytes wait unsent in the kernel: a write
			// blocks, and the stall clock runs, as soon as the client stops
			// reading, and what a stalled client is billed for is what it
			// acknowledged, not megabytes still queued here.
			limitSendQueue(c, sendQueue)
			gc := &gatedConn{Conn: sock.Wrap(c), g: l.g, stall: l.stall, stalled: l.stalled}
			gc.waiting.Store(time.Now().UnixNano())
			return gc, nil
		}
		if l.overCap != nil {
			l.overCap()
		}
		l.refused.refuse(c)
	}
}

// sendQueue bounds the bytes a public connection keeps queued unsent in
// the kernel (TCP_NOTSENT_LOWAT); those in flight are bounded by the
// client's window as ever. Without it a loopback connection queues 4 MB,
// some 20,000 chunks of a stream, for a client that reads nothing.
const sendQueue = 16 << 10

// errStalled is the failure of a write to a client that stopped reading.
var errStalled = errors.New("the client stopped reading")

// gatedConn gives its place back when closed, once, keeps its
// registration with the client watch for its whole life, and cuts off a
// client that stops reading (see Write): it would otherwise hold its
// request, and the worker slot under it, for as long as it kept the
// connection open.
type gatedConn struct {
	net.Conn
	// linger asks Close to drain what the client still sends first
	// (closeUnread).
	linger  atomic.Bool
	g       *connGate // nil: not counted
	stall   time.Duration
	stalled func(net.Conn)
	once    sync.Once
	watch   atomic.Pointer[watchEntry]
	// written counts the bytes the connection has taken: with the send
	// queue, it tells what the client acknowledged (Acknowledged).
	written atomic.Int64
	// own is set once something else sets the connection's deadlines (a
	// worker link after the upgrade): they are then its alone.
	own atomic.Bool
	// waited is how long writes have waited on the client since it last
	// took stallQuantum bytes, at written == progress. Only the goroutine
	// that writes uses them.
	waited   time.Duration
	progress int64
	// deadline is the write deadline last set, which keepDeadline may
	// keep for the next write.
	deadline time.Time
	// idle is when the connection last went idle between two requests, in
	// Unix nanoseconds, 0 while it is new or busy: the listener's and the
	// gate's record, kept here so that the two changes of state each
	// request makes take no lock and no map.
	idle atomic.Int64
	// waiting is when the connection began to wait on its client for a
	// request's head, in Unix nanoseconds: from its acceptance, or from
	// when it went idle, until its handler runs; 0 otherwise. Under
	// pressure the gate closes one that waits too long, as it does an
	// idle one: a client that opens connections and sends nothing, or a
	// byte at a time, would otherwise hold their places.
	waiting atomic.Int64
	// readDue is the read deadline fasthttp asked for last, readSet the
	// one the poller has: an earlier one kept (see SetReadDeadline). Only
	// the goroutine serving the connection reads, and sets them.
	readDue, readSet time.Time
}

// keepDeadline reports whether a write starting at start, which may wait
// on the client until due, can keep the write deadline have. One earlier
// than due can only end the wait early, and the write then goes on for
// the wait it has left; setting one is a change to the poller's timer, so
// a stream's chunks set one each stall period rather than one each.
func keepDeadline(have, start, due time.Time) bool {
	return have.After(start) && !have.After(due)
}

// stallQuantum is how many bytes a client must take to count as reading:
// as much as the kernel may hold unsent for it.
const stallQuantum = sendQueue

// serving notes that the connection's request is in its handler: its
// head is in.
func (c *gatedConn) serving() { c.waiting.Store(0) }

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

// Write writes p, cutting off a client that stopped reading: one that
// takes less than stallQuantum bytes in stall spent waiting on it. A slow
// reader goes on; one that reads nothing is cut off however its kernel
// trickles in a few more bytes of window, and its connection is reset so
// that nothing more queued for it is delivered. p goes a quantum at a
// time, so that what the kernel takes at once does not count as progress
// made while waiting.
func (c *gatedConn) Write(p []byte) (int, error) {
	if c.stall <= 0 || c.own.Load() {
		n, err := c.Conn.Write(p)
		c.written.Add(int64(n))
		return n, err
	}
	done := 0
	for done < len(p) {
		start := time.Now()
		if due := start.Add(c.stall - c.waited); !keepDeadline(c.deadline, start, due) {
			c.deadline = due
			_ = c.Conn.SetWriteDeadline(due)
		}
		n, err := c.Conn.Write(p[done:min(len(p), done+stallQuantum)])
		done += n
		written := c.written.Add(int64(n))
		c.waited += time.Since(start)
		if written-c.progress >= stallQuantum {
			c.progress, c.waited = written, 0
		}
		switch {
		case err == nil:
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return done, err
		case c.waited >= c.stall:
			if tc, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
				_ = tc.SetLinger(0)
			}
			if c.stalled != nil {
				c.stalled(c)
			}
			return done, fmt.Errorf("%w: it took under %d bytes in %s", errStalled, stallQuantum, c.stall)
		}
	}
	return done, nil
}

// Read reads as the connection does, but a timeout of a read deadline
// kept (see SetReadDeadline) before the one asked for is not one: the
// asked one is set and the read goes on.
func (c *gatedConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if n > 0 || err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || c.own.Load() {
			return n, err
		}
		due := c.readDue
		if !due.IsZero() && !time.Now().Before(due) {
			return n, err
		}
		c.readSet = due
		if err := c.Conn.SetReadDeadline(due); err != nil {
			return 0, err
		}
	}
}

// SetReadDeadline keeps the read deadline the poller has when it is still
// to come and not after t: fasthttp sets two a request (the keep-alive
// wait, then the time to read the request), each a change to the
// poller's timer, and a connection's requests now set one each idle
// period rather than two each.
func (c *gatedConn) SetReadDeadline(t time.Time) error {
	if c.own.Load() {
		return c.Conn.SetReadDeadline(t)
	}
	c.readDue = t
	if keepReadDeadline(c.readSet, time.Now(), t) {
		return nil
	}
	c.readSet = t
	return c.Conn.SetReadDeadline(t)
}

// keepReadDeadline reports whether a read deadline have, set earlier, can
// stand for due (zero: none) at now: it is still to come, and a read it
// ends early is read again to due.
func keepReadDeadline(have, now, due time.Time) bool {
	if due.IsZero() {
		return have.After(now)
	}
	return keepDeadline(have, now, due)
}

// SetDeadline and SetWriteDeadline hand the write deadline to the caller:
// fasthttp clears the deadlines when it gives the connection to a worker
// link, which sets its own. Its send queue goes back to the kernel's
// default too, so the link batches as it did.
func (c *gatedConn) SetDeadline(t time.Time) error {
	c.ownDeadlines()
	return c.Conn.SetDeadline(t)
}

func (c *gatedConn) SetWriteDeadline(t time.Time) error {
	c.ownDeadlines()
	return c.Conn.SetWriteDeadline(t)
}

func (c *gatedConn) ownDeadlines() {
	if !c.own.Swap(true) {
		limitSendQueue(c.Conn, 0)
	}
}

// Written is how many bytes the connection has taken.
func (c *gatedConn) Written() int64 { return c.written.Load() }

// Acknowledged is how many of them the client's end has acknowledged:
// those taken, less those still in the socket's send queue. Where the
// queue cannot be read it is every byte taken.
func (c *gatedConn) Acknowledged() int64 {
	n := c.written.Load()
	if q, ok := unacknowledged(c.Conn); ok {
		return max(0, n-int64(q))
	}
	return n
}

func (c *gatedConn) Close() error {
	if e := c.watch.Swap(nil); e != nil {
		e.release()
	}
	if c.linger.Load() {
		c.drain()
	}
	err := c.Conn.Close()
	if c.g != nil {
		c.once.Do(c.g.release)
	}
	return err
}

// Lingering bounds what a connection closed on a client still sending
// takes from it.
const (
	lingerFor   = 5 * time.Second
	lingerBytes = 256 << 20
)

// closeUnread closes ctx's connection once its answer is out, its
// request's body left unread (over the limit), after draining what the
// client still sends: closing a socket with data unread resets the
// connection, and a client still sending, as most do until their body is
// out, would see the reset instead of the answer.
func closeUnread(ctx *fasthttp.RequestCtx) {
	ctx.SetConnectionClose()
	if c, ok := ctx.Conn().(*gatedConn); ok {
		c.linger.Store(true)
	}
}

// drain half-closes the connection, so the client sees the answer end, and
// reads what it still sends, for lingerFor or lingerBytes at most.
func (c *gatedConn) drain() {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(lingerFor))
	buf := make([]byte, 32<<10)
	for n := 0; n < lingerBytes; {
		k, err := c.Conn.Read(buf)
		if err != nil {
			return
		}
		n += k
	}
}
