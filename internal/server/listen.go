package server

import (
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
		stop     chan struct{} // closed by stopRefusing
		done     chan struct{} // closed when the refuser has returned; nil until it starts
		answered atomic.Int64
	}
}

func (l *keptListener) Accept() (net.Conn, error) {
	l.accepting.Lock()
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
			l.refuser.stop, l.refuser.done = make(chan struct{}), make(chan struct{})
			go l.refuse(l.refuser.stop, l.refuser.done)
		}
		l.refuser.mu.Unlock()
	}
	return err
}

// refuse answers each connection that arrives with drainAnswer until
// stopRefusing.
func (l *keptListener) refuse(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	r := newRefusals(l.drainAnswer)
	defer r.wait()
	for {
		select {
		case <-stop:
			return
		default:
		}
		// A short deadline, so that a stop is seen within it.
		_ = l.TCPListener.SetDeadline(time.Now().Add(50 * time.Millisecond))
		c, err := l.TCPListener.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
		l.refuser.answered.Add(1)
		r.refuse(c)
	}
}

// stopRefusing ends what Close started, if it did, once the refusals
// under way are answered; from then on connections wait in the queue
// again. It returns how many were answered.
func (l *keptListener) stopRefusing() int {
	l.refuser.mu.Lock()
	done := l.refuser.done
	if !l.refuser.stopped && done != nil {
		close(l.refuser.stop)
	}
	l.refuser.stopped = true
	l.refuser.mu.Unlock()
	if done == nil {
		return 0
	}
	<-done
	_ = l.TCPListener.SetDeadline(time.Unix(1, 0))
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
	answered = l.stopRefusing()
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
