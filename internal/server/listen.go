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
	return err
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
	if shared {
		return 0, l.TCPListener.Close()
	}
	queued := takeAcceptQueue(l.TCPListener)
	err = l.TCPListener.Close()
	r := newRefusals(errStopped)
	for _, c := range queued {
		r.refuse(c)
	}
	r.wait()
	return len(queued), err
}

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
