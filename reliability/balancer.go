package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// balancer is the load balancer in front of a cluster's replicas, as an
// operator would run one: a TCP proxy that asks each backend's /readyz
// every balanceEvery and sends each new connection to a ready backend,
// round robin. With none ready it sends the connection to any backend
// that answers at all, so that a client gets a standby's 503 rather than
// a refused connection; a backend that refuses the dial is passed over
// for the next. Bytes are spliced both ways unchanged, and a connection
// ends on both sides when either side ends it, as when the backend dies.
type balancer struct {
	ln       net.Listener
	backends []*backend
	next     atomic.Uint64

	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// backend is one replica behind the balancer and what its last health
// check found.
type backend struct {
	addr  string
	ready atomic.Bool // /readyz answered 200
	live  atomic.Bool // /readyz answered at all
}

// balanceEvery is how often the balancer asks each backend's /readyz.
const balanceEvery = 200 * time.Millisecond

// startBalancer listens on a free loopback port in front of the backends
// (host:port each) and runs until close.
func startBalancer(backends []string) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("balancer: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	b := &balancer{ln: ln, stop: stop, conns: map[net.Conn]struct{}{}}
	for _, a := range backends {
		b.backends = append(b.backends, &backend{addr: a})
	}
	// One round of checks before the first connection is taken, so that
	// it goes to the leader if there is one; then each backend is checked
	// on its own, so that one slow to answer delays no other's.
	var first sync.WaitGroup
	for _, be := range b.backends {
		first.Go(func() { be.check(ctx) })
	}
	first.Wait()
	for _, be := range b.backends {
		b.wg.Go(func() { be.health(ctx) })
	}
	b.wg.Go(func() { b.accept(ctx) })
	return b, nil
}

// URL is the balancer's address as clients and workers dial it.
func (b *balancer) URL() string { return "http://" + b.ln.Addr().String() }

// close stops the health checks and the listener, ends every spliced
// connection and waits for all of it.
func (b *balancer) close() {
	b.stop()
	b.ln.Close()
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// health checks the backend each balanceEvery until ctx ends.
func (be *backend) health(ctx context.Context) {
	t := time.NewTicker(balanceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		be.check(ctx)
	}
}

// healthClient asks /readyz on a connection of its own each time: a
// backend killed since the last check must not be seen through a kept
// connection's stale answer.
var healthClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext},
	Timeout:   time.Second,
}

// check asks the backend's /readyz once.
func (be *backend) check(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+be.addr+"/readyz", nil)
	if err != nil {
		return
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		be.ready.Store(false)
		be.live.Store(false)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	be.live.Store(true)
	be.ready.Store(resp.StatusCode == http.StatusOK)
}

// readyCount is how many backends the last checks found ready.
func (b *balancer) readyCount() int {
	n := 0
	for _, be := range b.backends {
		if be.ready.Load() {
			n++
		}
	}
	return n
}

func (b *balancer) accept(ctx context.Context) {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (out of files): pause rather than spin.
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if !b.track(c) {
			c.Close()
			return
		}
		b.wg.Go(func() {
			defer b.untrack(c)
			b.serve(ctx, c)
		})
	}
}

func (b *balancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *balancer) untrack(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
	c.Close()
}

// order is the backends a new connection tries, best first: the ready
// ones, then the live ones, then the rest, each kind taken in turn from
// the next in the rotation.
func (b *balancer) order() []*backend {
	var ready, live, rest []*backend
	for _, be := range b.backends {
		switch {
		case be.ready.Load():
			ready = append(ready, be)
		case be.live.Load():
			live = append(live, be)
		default:
			rest = append(rest, be)
		}
	}
	turn := int(b.next.Add(1))
	rotate := func(bs []*backend) []*backend {
		if len(bs) == 0 {
			return nil
		}
		k := turn % len(bs)
		return slices.Concat(bs[k:], bs[:k])
	}
	return slices.Concat(rotate(ready), rotate(live), rotate(rest))
}

// serve dials a backend for the client connection c and splices the two.
func (b *balancer) serve(ctx context.Context, c net.Conn) {
	var up net.Conn
	for _, be := range b.order() {
		d := net.Dialer{Timeout: time.Second}
		var err error
		if up, err = d.DialContext(ctx, "tcp", be.addr); err == nil {
			break
		}
	}
	if up == nil {
		return
	}
	if !b.track(up) {
		up.Close()
		return
	}
	defer b.untrack(up)
	var wg sync.WaitGroup
	// Whichever direction ends first ends both: a backend that dies takes
	// its clients' connections with it, as it would without a balancer.
	splice := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	wg.Go(func() { splice(up, c) })
	wg.Go(func() { splice(c, up) })
	wg.Wait()
}
