package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

// A WebSocket is spliced to the replica that serves it: this replica
// replays the request to that replica and then copies bytes both ways.
// The other replica authenticates the request itself and runs the
// WebSocket as if it had been dialled directly; this replica only carries
// the connection, until either end closes or this replica stops.
//
// Two WebSockets take this way: a worker's link, when the worker could
// not reach its organisation's home (a network that lets it reach only the
// load balancer) and asked to be spliced, and a live transcription that
// reached a replica other than its organisation's home.

// spliceDial bounds the dial of the home for a splice.
const spliceDial = 5 * time.Second

// spliceWorker joins the call's worker link through to home.
func (s *Server) spliceWorker(c *call, home string) error { return s.spliceTo(c, home, link.Path) }

// spliceTo joins the call's WebSocket through to home, where it is asked
// for uri.
func (s *Server) spliceTo(c *call, home, uri string) error {
	head, addr, useTLS, err := spliceRequest(c.ctx, home, uri)
	if err != nil {
		s.log.Warn("cluster: splice a WebSocket", "home", home, "err", err)
		return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: homeRetryAfter,
			Message: "The organisation's home replica cannot be reached to splice the connection; retry"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), spliceDial)
	defer cancel()
	var up net.Conn
	if useTLS {
		d := tls.Dialer{Config: &tls.Config{ServerName: hostOnly(addr), MinVersion: tls.VersionTLS12}}
		up, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		up, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		s.log.Warn("cluster: splice a WebSocket: the home does not answer", "home", home, "err", err)
		c.ctx.SetConnectionClose()
		return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: homeRetryAfter,
			Message: "The organisation's home replica does not answer; retry once another replica has taken it over"}
	}
	if !s.splices.add(up) {
		_ = up.Close()
		return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: homeRetryAfter,
			Message: "This gateway replica is stopping; reconnect through the cluster's load balancer"}
	}
	s.log.Debug("cluster: splicing a WebSocket to its organisation's home", "path", uri, "home", home)
	c.ctx.HijackSetNoResponse(true)
	c.ctx.Hijack(func(down net.Conn) { s.splices.run(down, up, head) })
	return nil
}

// spliceRequest is the request as the home is to get it: the same headers
// (the credentials among them) for the home's host and uri, marked
// spliced. It returns the home's address and whether it speaks TLS.
func spliceRequest(ctx *fasthttp.RequestCtx, home, uri string) (head []byte, addr string, useTLS bool, err error) {
	u, err := url.Parse(home)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, "", false, errors.New("the home's advertised URL is not http(s)://host:port")
	}
	useTLS, addr = u.Scheme == "https", hostPort(u)
	var h fasthttp.RequestHeader
	ctx.Request.Header.CopyTo(&h)
	h.SetRequestURI(uri)
	h.SetHost(u.Host)
	h.Set(link.SplicedHeader, "1")
	h.Set("X-Forwarded-For", ctx.RemoteIP().String())
	return h.Header(), addr, useTLS, nil
}

func hostOnly(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

// splices are the worker links this replica carries to their homes.
type splices struct {
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// add takes up, the connection to a home, before its splice runs (should
// the connection to the worker fail before that, close still closes up);
// false once the replica is stopping.
func (sp *splices) add(up net.Conn) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closed {
		return false
	}
	if sp.conns == nil {
		sp.conns = map[net.Conn]struct{}{}
	}
	sp.conns[up] = struct{}{}
	return true
}

// run replays head to the home on up and copies bytes between the worker's
// connection down and up until either ends.
func (sp *splices) run(down, up net.Conn, head []byte) {
	sp.mu.Lock()
	if sp.closed {
		sp.mu.Unlock()
		_ = down.Close()
		_ = up.Close()
		return
	}
	sp.conns[down] = struct{}{}
	sp.wg.Add(1)
	sp.mu.Unlock()
	defer sp.wg.Done()
	defer func() {
		sp.mu.Lock()
		delete(sp.conns, down)
		delete(sp.conns, up)
		sp.mu.Unlock()
	}()
	// The link keeps itself alive with pings end to end; no deadline of
	// the request's may cut it here.
	_ = down.SetDeadline(time.Time{})
	if _, err := up.Write(head); err != nil {
		_ = down.Close()
		_ = up.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(up, down)
		_ = up.Close()
		_ = down.Close()
	})
	_, _ = io.Copy(down, up)
	_ = down.Close()
	_ = up.Close()
	wg.Wait()
}

// close ends every splice and waits for them.
func (sp *splices) close() {
	sp.mu.Lock()
	sp.closed = true
	for c := range sp.conns {
		_ = c.Close()
	}
	sp.mu.Unlock()
	sp.wg.Wait()
}
