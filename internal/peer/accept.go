package peer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

// AcceptorOptions configure a home's side of its peers' links.
type AcceptorOptions struct {
	// Me is this replica's id.
	Me     string
	Secret []byte
	// Serve runs each stream a peer opens, in its own goroutine; ctx ends
	// when the stream is reset or its session closes.
	Serve func(ctx context.Context, st *link.Stream)
	// Grace is how long a session whose connection dropped is kept for
	// its front to resume; 0 is DefaultGrace.
	Grace  time.Duration
	Logger *slog.Logger
	// Buffers, when set, lends the sessions their write batches.
	Buffers *link.Buffers
}

// Acceptor holds the sessions of the fronts linked to this replica, one
// per front, across their connections' drops.
type Acceptor struct {
	opts AcceptorOptions

	mu     sync.Mutex
	held   map[string]*held // by the front's replica id
	closed bool
}

// held is one front's session.
type held struct {
	id   string // the session's id, as the front named it
	sess *link.Session
	// grace fails the session's streams when its connection has been
	// gone for the grace; nil while it has one.
	grace *time.Timer
}

// errReplaced fails the streams of a front's session that a new one of
// the same front replaced: the front restarted.
var errReplaced = errors.New("peer: the front replica started a new session")

// NewAcceptor returns an acceptor holding no session.
func NewAcceptor(opts AcceptorOptions) *Acceptor {
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Acceptor{opts: opts, held: map[string]*held{}}
}

// Serve shakes hands on a front's new connection and carries its
// session's streams until the connection ends; the session outlives it by
// the grace. A front that fails the handshake is refused.
func (a *Acceptor) Serve(conn link.Conn) error {
	hello, proof, err := Accept(conn, a.opts.Secret, a.opts.Me)
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("peer link from %q: %w", hello.From, err)
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		_ = SendWelcome(conn, Welcome{Error: "this replica is stopping"})
		_ = conn.Close()
		return ErrClosed
	}
	h := a.held[hello.From]
	resumed := h != nil && h.id == hello.SessionID && h.sess.Err() == nil
	var replaced *link.Session
	closeOld := func() {}
	if resumed {
		// A connection the session still holds is dead as far as the
		// front can tell; it is let go for this one.
		closeOld = h.sess.Release()
		if h.grace != nil {
			h.grace.Stop()
			h.grace = nil
		}
	} else {
		if h != nil {
			replaced = h.sess
			if h.grace != nil {
				h.grace.Stop()
			}
		}
		h = &held{id: hello.SessionID}
		h.sess = a.newSession(hello.From, h)
		a.held[hello.From] = h
	}
	sess := h.sess
	a.mu.Unlock()
	closeOld()
	if replaced != nil {
		replaced.Close(errReplaced)
	}
	w := Welcome{Resumed: resumed}
	var peer []api.StreamSeq
	if resumed {
		w.Streams = sess.RecvState()
		peer = proof.Streams
	}
	if err := SendWelcome(conn, w); err != nil {
		_ = conn.Close()
		a.detached(hello.From, h)
		return fmt.Errorf("peer link from %s: send welcome: %w", hello.From, err)
	}
	done, err := sess.Attach(conn, peer)
	if err != nil {
		_ = conn.Close()
		a.detached(hello.From, h)
		return fmt.Errorf("peer link from %s: %w", hello.From, err)
	}
	a.opts.Logger.Debug("peer link: accepted", "from", hello.From, "resumed", resumed)
	<-done
	return nil
}

// newSession makes the session of front from, held as h.
func (a *Acceptor) newSession(from string, h *held) *link.Session {
	return link.NewSession(link.Options{Role: link.Worker, Accept: a.opts.Serve, Buffers: a.opts.Buffers,
		Detached: func(error) { a.detached(from, h) }})
}

// detached starts the grace of a session whose connection dropped.
func (a *Acceptor) detached(from string, h *held) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held[from] != h || h.grace != nil || a.closed {
		return
	}
	h.grace = time.AfterFunc(a.opts.Grace, func() {
		a.mu.Lock()
		expired := a.held[from] == h && h.grace != nil
		if expired {
			delete(a.held, from)
		}
		a.mu.Unlock()
		if expired {
			a.opts.Logger.Warn("peer link: the front did not come back within the grace; its streams end", "from", from, "streams", h.sess.Streams())
			h.sess.Close(fmt.Errorf("%w: the front replica %s did not come back", ErrLost, from))
		}
	})
}

// Sessions reports how many fronts' sessions are held.
func (a *Acceptor) Sessions() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.held)
}

// Close ends every session: their streams fail and their handlers are
// waited for.
func (a *Acceptor) Close() {
	a.mu.Lock()
	a.closed = true
	all := a.held
	a.held = map[string]*held{}
	for _, h := range all {
		if h.grace != nil {
			h.grace.Stop()
		}
	}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range all {
		wg.Go(func() { h.sess.Close(ErrClosed) })
	}
	wg.Wait()
}
