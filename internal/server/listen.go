package server

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// HandoverFile is the unix socket in the data directory on which a running
// server gives its public listening socket to the server replacing it.
const HandoverFile = "handover.sock"

// keptListener is the public socket as Run holds it. Close, which the
// drain calls, only stops Accept: the socket stays bound, and connections
// that arrive during the drain wait in its queue for the server taking it
// over (see handover) rather than being refused. release closes it.
type keptListener struct {
	*net.TCPListener
	stopped atomic.Bool
	// accepting is held through each Accept, so that Close can wait out
	// one already waiting: a deadline that expires while a connection
	// arrives may still let that Accept take it.
	accepting sync.Mutex
	// drainAnswer, when set, answers the connections that arrive once
	// Close stopped Accept, at once, until the socket is handed over or
	// released: a cluster's replica has no successor to queue them for,
	// and its load balancer should move on rather than wait out the
	// drain.
	drainAnswer *api.Error
	refuser     struct {
		mu       sync.Mutex
		stopped  bool          // stopRefusing ran: no refuser starts
		final    bool          // answered ran: none starts again either
		stop     chan struct{} // closed by stopRefusing
		accepted chan struct{} // closed when the refuser takes no more connections; nil until it starts
		done     chan struct{} // closed when the refusals it took are answered too
		answered atomic.Int64
	}
}

func (l *keptListener) Accept() (net.Conn, error) {
	l.accepting.Lock()
	if l.stopped.Load() {
		// Closed: the refuser's own deadlines would let an Accept wait
		// and take a connection.
		l.accepting.Unlock()
		return nil, net.ErrClosed
	}
	c, err := l.TCPListener.Accept()
	l.accepting.Unlock()
	if err != nil && l.stopped.Load() {
		// The deadline Close set, told as a closed listener, which is what
		// ends fasthttp's accept loop.
		return nil, net.ErrClosed
	}
	return c, err
}

// Close stops Accept and leaves the socket open. It returns once no Accept
// is running: a connection an Accept took is served, and every later one
// waits in the queue.
func (l *keptListener) Close() error {
	l.stopped.Store(true)
	err := l.TCPListener.SetDeadline(time.Unix(1, 0))
	l.accepting.Lock()
	//lint:ignore SA2001 the lock only waits for a running Accept to return
	l.accepting.Unlock()
	if l.drainAnswer != nil {
		l.refuser.mu.Lock()
		if !l.refuser.stopped && l.refuser.done == nil {
			stop, accepted, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
			l.refuser.stop, l.refuser.accepted, l.refuser.done = stop, accepted, done
			go func() {
				defer close(done)
				l.refuse(stop, accepted)
			}()
		}
		l.refuser.mu.Unlock()
	}
	return err
}

// refuse answers each connection that arrives with drainAnswer until
// stop; accepted is closed once it takes no more. It returns once the
// refusals it took are answered too.
func (l *keptListener) refuse(stop <-chan struct{}, accepted chan<- struct{}) {
	r := newRefusals(l.drainAnswer)
	defer r.wait()
	defer close(accepted)
	for {
		select {
		case <-stop:
			return
		default:
		}
		// A short deadline, so that a stop is seen within it.
		_ = l.TCPListener.SetDeadline(time.Now().Add(50 * time.Millisecond))
		c, err := l.TCPListener.Accept()
		var ne net.Error
		switch {
		case err == nil:
			l.refuser.answered.Add(1)
			r.refuse(c)
		case errors.Is(err, net.ErrClosed):
			return
		case errors.As(err, &ne) && ne.Timeout():
		default:
			// Out of file descriptors, say: what is queued waits, and
			// the next round tries again.
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// stopRefusing stops what Close started, if it did: from its return no
// connection is taken, and the ones that arrive wait in the queue again
// (for a server the socket is handed to); the refusals under way finish
// on their own. answered waits for those too (release).
func (l *keptListener) stopRefusing() {
	l.refuser.mu.Lock()
	accepted := l.refuser.accepted
	if !l.refuser.stopped && accepted != nil {
		close(l.refuser.stop)
	}
	l.refuser.stopped = true
	l.refuser.mu.Unlock()
	if accepted != nil {
		<-accepted
		_ = l.TCPListener.SetDeadline(time.Unix(1, 0))
	}
}

// resumeRefusing undoes stopRefusing when the handover it made way for
// failed, or its taker exited: the socket is this server's alone again,
// and the connections that arrive while it drains are to be answered,
// not left queued.
func (l *keptListener) resumeRefusing() {
	l.refuser.mu.Lock()
	defer l.refuser.mu.Unlock()
	if !l.refuser.stopped || l.refuser.final {
		return
	}
	l.refuser.stopped = false
	if l.refuser.done == nil {
		// Not draining yet: Close starts the refuser when it is.
		return
	}
	prev := l.refuser.done
	stop, accepted, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	l.refuser.stop, l.refuser.accepted, l.refuser.done = stop, accepted, done
	go func() {
		defer close(done)
		l.refuse(stop, accepted)
		<-prev
	}()
}

// answered stops refusing and returns how many connections were refused,
// once each refusal is answered.
func (l *keptListener) answered() int {
	l.refuser.mu.Lock()
	l.refuser.final = true
	l.refuser.mu.Unlock()
	l.stopRefusing()
	l.refuser.mu.Lock()
	done := l.refuser.done
	l.refuser.mu.Unlock()
	if done != nil {
		<-done
	}
	return int(l.refuser.answered.Load())
}

// release closes the socket. Where another process holds it too (systemd,
// or the server this one handed it to: shared), the connections queued on
// it stay there for that one. Where none does, closing it would reset
// them, each perhaps with its request sent and its client unable to tell
// whether it was served: they are taken first (where the system allows,
// see takeAcceptQueue) and each is answered with a 503 asking the client
// to retry, for which release waits up to refuseWithin. answered is how
// many were.
func (l *keptListener) release(shared bool) (answered int, err error) {
	answered = l.answered()
	if shared {
		return answered, l.TCPListener.Close()
	}
	queued := takeAcceptQueue(l.TCPListener)
	err = l.TCPListener.Close()
	r := newRefusals(errStopped)
	for _, c := range queued {
		r.refuse(c)
	}
	r.wait()
	return answered + len(queued), err
}

// errReplicaStopping answers the connections made while a cluster's
// replica drains: another replica serves them.
var errReplicaStopping = &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: time.Second,
	Message: "Service temporarily unavailable, please retry: this gateway replica is stopping and another serves the request"}

// errStopped answers the connections still queued when a server that
// holds its socket alone stops.
var errStopped = &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: time.Second,
	Message: "Service temporarily unavailable, please retry: the gateway has stopped"}

// sameAddress reports whether the listener at got is the one an --addr of
// want asks for: the same port, and the same address or both the
// unspecified one.
func sameAddress(got net.Addr, want string) bool {
	g, ok := got.(*net.TCPAddr)
	if !ok {
		return false
	}
	w, err := net.ResolveTCPAddr("tcp", want)
	if err != nil || w.Port == 0 || w.Port != g.Port {
		return false
	}
	if w.IP == nil || w.IP.IsUnspecified() {
		return g.IP == nil || g.IP.IsUnspecified()
	}
	return w.IP.Equal(g.IP)
}

// listenPublic is the public socket: systemd's when it passed one, the one
// taken over from the server this one replaces, or a new one on addr.
func listenPublic(addr string, taken *net.TCPListener) (*keptListener, error) {
	if taken != nil {
		return &keptListener{TCPListener: taken}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return &keptListener{TCPListener: ln.(*net.TCPListener)}, nil
}
