package peer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

// Errors a front's session can fail with.
var (
	// ErrUnreachable means the peer has no link up: it was never reached,
	// or its last dial failed. Nothing was sent to it.
	ErrUnreachable = errors.New("peer: the replica does not answer")
	// ErrLost fails the streams of a session the peer no longer holds
	// (it restarted, or the link was down for longer than the grace).
	ErrLost = errors.New("peer: the replica lost the link's session")
	// ErrClosed fails what is left when the pool closes.
	ErrClosed = errors.New("peer: the replica is stopping")
)

// DialFunc opens a connection to the peer at base, its advertised URL.
type DialFunc func(ctx context.Context, base string) (link.Conn, error)

// PoolOptions configure a front's links to its peers.
type PoolOptions struct {
	// Me is this replica's id.
	Me     string
	Secret []byte
	Dial   DialFunc
	// Grace is how long a session whose connection dropped waits to be
	// resumed before its streams fail; 0 is DefaultGrace.
	Grace time.Duration
	// GiveUp is how long a link that cannot connect keeps dialling while
	// nothing asks for it; 0 is DefaultGiveUp.
	GiveUp time.Duration
	Logger *slog.Logger
	// Buffers, when set, lends the sessions their write batches.
	Buffers *link.Buffers
}

// DefaultGrace matches the worker links' grace: a drop shorter than it
// costs no request.
const DefaultGrace = 15 * time.Second

// DefaultGiveUp bounds the dialling of a peer nothing forwards to, such as
// a replica that left the cluster.
const DefaultGiveUp = 2 * time.Minute

// Redials back off from minRedial to maxRedial while they fail; the first
// after a drop is at once.
const (
	minRedial = 50 * time.Millisecond
	maxRedial = 2 * time.Second
)

// endAckDelay holds back the acknowledgement of an answer's end for the
// next request's frames to carry: a forwarded request then costs the
// link one write each way under load, as an HTTP exchange does.
const endAckDelay = 10 * time.Millisecond

// peerMemory is how long a peer that could not be reached is reported so.
const peerMemory = 10 * time.Second

// Pool is a front's links to its peers: one session per peer replica,
// dialled the first time a stream is wanted there and kept up (redialled
// at once after a drop, then with backoff) by a goroutine the pool owns.
type Pool struct {
	opts PoolOptions

	mu     sync.RWMutex
	links  map[string]*peerLink // by replica id
	closed bool
	wg     sync.WaitGroup

	// failed is when each peer (by URL) last failed to connect, until it
	// connects.
	fmu    sync.Mutex
	failed map[string]time.Time
}

// peerLink is the link to one peer. Its session and up are guarded by the
// pool's mu.
type peerLink struct {
	id, url string
	stop    context.CancelFunc
	// sess is what new streams open on: set while the link is up, and
	// while it redials at once after a drop (the streams wait in the
	// session and go out on the resumed connection); nil before the first
	// handshake and once a dial has failed.
	sess *link.Session
	// up is closed when sess is next set.
	up chan struct{}
	// failing: the last dial failed; a stream wanted meanwhile is refused
	// at once rather than made to wait for the next.
	failing bool
	// used is set by each request for a stream, and cleared by the link's
	// goroutine when it looks, to tell an unused link from a busy one.
	used atomic.Bool
}

// NewPool returns a pool with no links yet.
func NewPool(opts PoolOptions) *Pool {
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.GiveUp <= 0 {
		opts.GiveUp = DefaultGiveUp
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Pool{opts: opts, links: map[string]*peerLink{}, failed: map[string]time.Time{}}
}

// Session is the session to open streams to replica id on, at base URL.
// The first call for a peer dials it and waits, as long as ctx allows, for
// the handshake; a peer whose last dial failed is ErrUnreachable at once.
func (p *Pool) Session(ctx context.Context, id, base string) (*link.Session, error) {
	p.mu.RLock()
	l := p.links[id]
	if l != nil && l.url == base {
		l.used.Store(true)
		sess, failing := l.sess, l.failing
		p.mu.RUnlock()
		switch {
		case sess != nil:
			return sess, nil
		case failing:
			return nil, p.unreachable(base, nil)
		}
	} else {
		p.mu.RUnlock()
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	l = p.links[id]
	if l != nil && l.url != base {
		// The replica now advertises another address: its session there
		// cannot be resumed here, and its streams fail when it stops.
		l.stop()
		l = nil
	}
	if l == nil {
		l = p.startLocked(id, base)
	}
	l.used.Store(true)
	sess, up, failing := l.sess, l.up, l.failing
	p.mu.Unlock()
	switch {
	case sess != nil:
		return sess, nil
	case failing:
		return nil, p.unreachable(base, nil)
	}
	select {
	case <-up:
	case <-ctx.Done():
		return nil, p.unreachable(base, ctx.Err())
	}
	p.mu.RLock()
	sess = l.sess
	p.mu.RUnlock()
	if sess == nil {
		return nil, p.unreachable(base, nil)
	}
	return sess, nil
}

// unreachable is the error of a stream wanted at base and not opened, and
// has Unreachable report the peer: for peerMemory after the last request
// it failed, not for as long as the link goes on redialling a peer that
// nothing is forwarded to any more.
func (p *Pool) unreachable(base string, cause error) error {
	p.mark(base, false)
	if cause != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, base, cause)
	}
	return fmt.Errorf("%w: %s", ErrUnreachable, base)
}

// startLocked makes the link to a peer and starts its goroutine; p.mu is
// held.
func (p *Pool) startLocked(id, base string) *peerLink {
	ctx, cancel := context.WithCancel(context.Background())
	l := &peerLink{id: id, url: base, stop: cancel, up: make(chan struct{})}
	p.links[id] = l
	p.wg.Go(func() { p.run(ctx, l) })
	return l
}

// Close stops every link and waits for their goroutines: the streams
// still open fail with ErrClosed.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	for _, l := range p.links {
		l.stop()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Unreachable lists the peers (by URL) a stream was wanted at and could
// not be opened within peerMemory of now, and that have not connected
// since.
func (p *Pool) Unreachable(now time.Time) []string {
	p.fmu.Lock()
	defer p.fmu.Unlock()
	var out []string
	for base, at := range p.failed {
		if now.Sub(at) < peerMemory {
			out = append(out, base)
		} else {
			delete(p.failed, base)
		}
	}
	slices.Sort(out)
	return out
}

func (p *Pool) mark(base string, ok bool) {
	p.fmu.Lock()
	defer p.fmu.Unlock()
	if ok {
		delete(p.failed, base)
	} else {
		p.failed[base] = time.Now()
	}
}

// publish sets what new streams to the peer open on; nil with failing
// refuses them until the next handshake.
func (p *Pool) publish(l *peerLink, sess *link.Session, failing bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l.failing = failing
	if l.sess == sess && (sess != nil || !failing) {
		return
	}
	l.sess = sess
	// Whoever waits for the link looks again: at the session, or at the
	// failure.
	close(l.up)
	l.up = make(chan struct{})
}

// forget removes l unless a request asked for it since the last look,
// reporting whether it did.
func (p *Pool) forget(l *peerLink) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.used.Swap(false) {
		return false
	}
	if p.links[l.id] == l {
		delete(p.links, l.id)
	}
	return true
}

func (p *Pool) newSession() (*link.Session, string) {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	return link.NewSession(link.Options{Role: link.Gateway, Buffers: p.opts.Buffers, EndAckDelay: endAckDelay}), hex.EncodeToString(raw[:])
}

// run keeps the link to a peer up until ctx ends, or until it has failed
// to connect for GiveUp with nothing asking for it. A dropped connection
// is dialled again at once and the session resumed, its streams intact;
// one the peer cannot resume within the grace fails its streams.
func (p *Pool) run(ctx context.Context, l *peerLink) {
	log := p.opts.Logger.With("peer", l.id, "url", l.url)
	sess, sid := p.newSession()
	defer func() {
		p.publish(l, nil, true)
		sess.Close(ErrClosed)
	}()
	wait := time.Duration(0)
	// lost is when the session lost its connection, zero while it has
	// one; failingSince when the dials began to fail, zero while one
	// succeeds.
	var lost, failingSince time.Time
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		conn, w, err := p.connect(ctx, l, sess, sid)
		if ctx.Err() != nil {
			if conn != nil {
				_ = conn.Close()
			}
			return
		}
		now := time.Now()
		if err != nil {
			p.publish(l, nil, true)
			log.Debug("peer link: dial", "err", err)
			if failingSince.IsZero() {
				failingSince = now
			}
			if !lost.IsZero() && (hopeless(err) || now.Sub(lost) >= p.opts.Grace) {
				log.Warn("peer link: the replica cannot resume the session; its streams fail", "streams", sess.Streams(), "err", err)
				sess.Close(fmt.Errorf("%w: %s: %w", ErrLost, l.url, err))
				sess, sid = p.newSession()
				lost = time.Time{}
			}
			if lost.IsZero() && sess.Streams() == 0 && now.Sub(failingSince) >= p.opts.GiveUp && p.forget(l) {
				log.Info("peer link: given up on a replica nothing forwards to")
				return
			}
			wait = min(max(2*wait, minRedial), maxRedial)
			continue
		}
		p.mark(l.url, true)
		failingSince = time.Time{}
		if !w.Resumed && sess.Streams() > 0 {
			// The peer does not hold our session (it restarted): what
			// was forwarded on it may have run there, and is lost.
			log.Warn("peer link: the replica lost the session; its streams fail", "streams", sess.Streams())
			sess.Close(fmt.Errorf("%w: %s restarted", ErrLost, l.url))
			sess, _ = p.newSession()
		}
		var peer []api.StreamSeq
		if w.Resumed {
			peer = w.Streams
		}
		done, err := sess.Attach(conn, peer)
		if err != nil {
			_ = conn.Close()
			wait = minRedial
			continue
		}
		if !lost.IsZero() {
			log.Info("peer link: resumed", "down", now.Sub(lost).Round(time.Millisecond).String(), "streams", len(peer))
		}
		lost = time.Time{}
		p.publish(l, sess, false)
		select {
		case <-done:
			// Dialled again at once: a brief drop costs nothing, and
			// new streams wait in the session meanwhile.
			lost, wait = time.Now(), 0
		case <-ctx.Done():
			return
		}
	}
}

// hopeless reports a dial that says the session cannot be resumed,
// however long the front waits: nothing listens at the peer's address
// (its process is gone, and a new one would not know the session), or
// whatever answers there is not the peer.
func hopeless(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrRefused) || errors.Is(err, ErrProof)
}

// dialTimeout bounds a dial and its handshake.
const dialTimeout = 5 * time.Second

// connect dials the peer and shakes hands, presenting sess under sid.
func (p *Pool) connect(ctx context.Context, l *peerLink, sess *link.Session, sid string) (link.Conn, Welcome, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn, err := p.opts.Dial(ctx, l.url)
	if err != nil {
		return nil, Welcome{}, err
	}
	// The handshake's reads are bounded by the connection's keepalive,
	// not by ctx: close the connection if ctx ends first.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	w, err := Dial(conn, p.opts.Secret, Hello{From: p.opts.Me, To: l.id, SessionID: sid}, sess.RecvState)
	if !stop() || err != nil {
		_ = conn.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, Welcome{}, err
	}
	return conn, w, nil
}
