package server

import (
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// clientWatch notices clients that close their connection while their
// request waits on a worker. fasthttp reports a departed client only when
// a write fails, which for a queued request or a long time to first token
// may be minutes away; a cancel must reach the engine at once.
//
// On Linux the kernel says so: each watched socket is registered with an
// epoll instance of our own for EPOLLRDHUP (the peer closed its side), and
// one goroutine waits for those events. Registering a socket with a second
// epoll instance does not disturb the runtime's poller, and nothing is read
// from the socket, so fasthttp finds it as it left it.
type clientWatch struct {
	mu   sync.Mutex
	epfd int
	// ep is epfd as a file of the runtime's poller, which tells when the
	// instance has events: the goroutine waits there rather than in a
	// blocking epoll_wait, which would hold the process's only P (with
	// GOMAXPROCS=1) until sysmon took it back, up to 10 ms later.
	ep      *os.File
	epRaw   syscall.RawConn
	wakefd  int // an eventfd that ends the wait on close
	entries map[int32]*watchEntry
	// gen numbers the registrations, so that an event of a socket since
	// closed is not taken for one of the socket given its descriptor
	// next: epoll_wait may return it after the descriptor was reused.
	gen     int32
	started bool
	closed  bool
	done    chan struct{}
	// failed is set when epoll cannot be set up; nothing is watched then
	// and a departed client is noticed on the next failed write.
	failed bool
}

type watchEntry struct {
	w   *clientWatch
	fd  int32
	gen int32
	// kept: the entry lives as long as its connection (see watchHolder)
	// rather than one request; it leaves the epoll set just before the
	// socket closes.
	kept bool
	// cancel is the watched request's, nil between the requests of a kept
	// entry. hup records a departure seen while no request was watched.
	cancel func()
	hup    bool
}

// watchHolder is a connection that keeps its registration across its
// requests, so that a request costs no system call here: the first one
// registers the socket (edge-triggered, so the departure is reported
// once) and the connection releases it when it closes.
type watchHolder interface {
	heldWatch() *watchEntry
	holdWatch(*watchEntry)
}

func newClientWatch(time.Duration) *clientWatch {
	return &clientWatch{epfd: -1, wakefd: -1, entries: map[int32]*watchEntry{}, done: make(chan struct{})}
}

// initLocked creates the epoll instance on first use; the caller holds w.mu.
func (w *clientWatch) initLocked() bool {
	if w.started || w.failed {
		return w.started
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		w.failed = true
		return false
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		w.failed = true
		return false
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		w.failed = true
		return false
	}
	ep, raw, err := pollable(epfd)
	if err != nil {
		unix.Close(wakefd)
		w.failed = true
		return false
	}
	w.epfd, w.ep, w.epRaw, w.wakefd, w.started = epfd, ep, raw, wakefd, true
	go w.run()
	return true
}

// add watches conn and calls cancel once if its peer goes away. It returns
// nil for connections that cannot be watched.
func (w *clientWatch) add(conn net.Conn, cancel func()) *watchEntry {
	holder, kept := conn.(watchHolder)
	if kept {
		if e := holder.heldWatch(); e != nil {
			w.mu.Lock()
			live, gone := w.entries[e.fd] == e, e.hup
			if live && !gone {
				e.cancel = cancel
			}
			w.mu.Unlock()
			if gone {
				cancel() // the client left before this request was watched
			}
			if !live || gone {
				return nil
			}
			return e
		}
	}
	fd, ok := socketFD(conn)
	if !ok {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || !w.initLocked() {
		return nil
	}
	w.gen++
	e := &watchEntry{w: w, fd: int32(fd), gen: w.gen, kept: kept, cancel: cancel}
	events := uint32(unix.EPOLLRDHUP | unix.EPOLLONESHOT)
	if kept {
		events = unix.EPOLLRDHUP | unix.EPOLLET
	}
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: e.gen}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return nil
	}
	w.entries[e.fd] = e
	if kept {
		holder.holdWatch(e)
	}
	return e
}

// remove stops watching the request. A kept entry stays registered for
// the connection's next request; another is unregistered while the
// connection is still open, so the descriptor still names the same socket.
func (w *clientWatch) remove(e *watchEntry) {
	if e == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.kept {
		e.cancel = nil
		return
	}
	w.forgetLocked(e)
}

// release unregisters a kept entry; its connection calls it just before
// closing the socket, whose descriptor may then be reused.
func (e *watchEntry) release() {
	w := e.w
	w.mu.Lock()
	defer w.mu.Unlock()
	e.cancel = nil
	w.forgetLocked(e)
}

func (w *clientWatch) forgetLocked(e *watchEntry) {
	if w.entries[e.fd] == e {
		delete(w.entries, e.fd)
		if !w.closed {
			_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, int(e.fd), nil)
		}
	}
}

// pollable hands epfd to the runtime's poller; on failure epfd is closed.
func pollable(epfd int) (*os.File, syscall.RawConn, error) {
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, nil, err
	}
	ep := os.NewFile(uintptr(epfd), "clientwatch-epoll")
	raw, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		return nil, nil, err
	}
	return ep, raw, nil
}

func (w *clientWatch) run() {
	defer close(w.done)
	events := make([]unix.EpollEvent, 128)
	for {
		var n int
		var err error
		// Each wait starts with a look, so events left over from a full
		// batch are taken without a new edge.
		werr := w.epRaw.Read(func(fd uintptr) bool {
			for {
				n, err = unix.EpollWait(int(fd), events, 0)
				if err != unix.EINTR {
					return n > 0 || err != nil
				}
			}
		})
		if werr != nil || err != nil {
			return
		}
		var fire []func()
		w.mu.Lock()
		for _, ev := range events[:n] {
			if int(ev.Fd) == w.wakefd {
				w.mu.Unlock()
				return
			}
			e := w.entries[ev.Fd]
			if e == nil || e.gen != ev.Pad || ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
				continue
			}
			if e.kept {
				// Registered until the connection closes; reported once.
				e.hup = true
			} else {
				w.forgetLocked(e)
			}
			if e.cancel != nil {
				fire = append(fire, e.cancel)
				e.cancel = nil
			}
		}
		w.mu.Unlock()
		for _, cancel := range fire {
			cancel()
		}
	}
}

// close stops the watching goroutine and waits for it.
func (w *clientWatch) close() {
	w.mu.Lock()
	started, closed := w.started, w.closed
	w.closed = true
	w.mu.Unlock()
	if !started || closed {
		return
	}
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	_, _ = unix.Write(w.wakefd, one)
	<-w.done
	w.ep.Close()
	unix.Close(w.wakefd)
}

// socketFD returns the descriptor of a socket connection.
func socketFD(conn net.Conn) (int, bool) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	if raw.Control(func(f uintptr) { fd = int(f) }) != nil || fd < 0 {
		return 0, false
	}
	return fd, true
}
