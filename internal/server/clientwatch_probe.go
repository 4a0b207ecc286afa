//go:build !linux

package server

import (
	"net"
	"sync"
	"time"
)

// clientWatch notices clients that close their connection while their
// request waits on a worker. fasthttp reports a departed client only when
// a write fails, which for a long generation (or a queued request) may be
// minutes away; a cancel must reach the engine at once. One goroutine
// probes every watched connection a few times a second without reading
// from it.
type clientWatch struct {
	every time.Duration

	mu      sync.Mutex
	entries map[*watchEntry]struct{}
	stop    chan struct{}
	done    chan struct{}
	started bool
}

type watchEntry struct {
	conn   net.Conn
	cancel func()
}

// release is for connections that keep an entry across requests, which
// only the epoll watch does.
func (e *watchEntry) release() {}

func newClientWatch(every time.Duration) *clientWatch {
	return &clientWatch{every: every, entries: map[*watchEntry]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// add watches conn and calls cancel once if its peer goes away. It returns
// nil for connections that cannot be probed.
func (w *clientWatch) add(conn net.Conn, cancel func()) *watchEntry {
	if !probeable(conn) {
		return nil
	}
	e := &watchEntry{conn: conn, cancel: cancel}
	w.mu.Lock()
	if !w.started {
		w.started = true
		go w.run()
	}
	w.entries[e] = struct{}{}
	w.mu.Unlock()
	return e
}

// remove stops watching; after it returns the probe no longer touches the
// connection, so fasthttp may use it again.
func (w *clientWatch) remove(e *watchEntry) {
	if e == nil {
		return
	}
	w.mu.Lock()
	delete(w.entries, e)
	w.mu.Unlock()
}

func (w *clientWatch) run() {
	defer close(w.done)
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		// Probing under the lock keeps remove from returning while a probe
		// of that connection is in progress.
		w.mu.Lock()
		for e := range w.entries {
			if peerClosed(e.conn) {
				delete(w.entries, e)
				e.cancel()
			}
		}
		w.mu.Unlock()
	}
}

// close stops the probing goroutine and waits for it.
func (w *clientWatch) close() {
	w.mu.Lock()
	started := w.started
	w.started = true // no restart after close
	w.mu.Unlock()
	close(w.stop)
	if started {
		<-w.done
	}
}
