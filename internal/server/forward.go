package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
)

// A replica serves the API for organisations homed elsewhere by
// forwarding each request to the organisation's home, which alone holds
// its workers, (the rentals: to the leader) and passing the answer back as
// it comes: streams chunk by chunk. The front authenticates the key first,
// from its own copy of the accounts, so nothing unauthenticated crosses to
// a peer; the peer authenticates it again and serves it with its usual
// handlers, so usage rows, errors, 429s and SSE framing are its own.
//
// The request id the front gave the request travels with it, signed
// with the cluster's secret, and the peer uses it for its usage row: a
// client sees one id whichever replica it reached.

// forwardHeader carries the forwarding replica's request id and its
// signature.
const forwardHeader = "X-Svc-Forward"

// forwarder holds the connections to the peer replicas.
type forwarder struct {
	secret []byte
	// failed is when each peer last failed to answer, until it answers;
	// failing is its size, so that a forward that found its peer
	// answering, as nearly all do, takes no lock.
	mu      sync.Mutex
	failed  map[string]time.Time
	failing atomic.Int32
	// client is net/http's, for what fasthttp's lacks: a request it can
	// abandon, closing its connection, when the client who sent it goes.
	client *http.Client
}

func newForwarder(secret string) *forwarder {
	t := &http.Transport{
		Proxy:               nil, // replicas reach each other directly
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     30 * time.Second,
		// A peer's bodies are passed on as they are, compressed or not.
		DisableCompression: true,
		ForceAttemptHTTP2:  false,
	}
	return &forwarder{secret: []byte(secret), failed: map[string]time.Time{}, client: &http.Client{Transport: t,
		// A redirect is the peer's answer, passed back to the client.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// peerMemory is how long a peer that did not answer is reported so.
const peerMemory = 10 * time.Second

// mark records whether the peer at base answered.
func (f *forwarder) mark(base string, answered bool) {
	if answered && f.failing.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if answered {
		delete(f.failed, base)
	} else {
		f.failed[base] = time.Now()
	}
	f.failing.Store(int32(len(f.failed)))
}

// unreachable lists the peers that failed to answer within peerMemory of
// now and have not answered since.
func (f *forwarder) unreachable(now time.Time) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for base, at := range f.failed {
		if now.Sub(at) < peerMemory {
			out = append(out, base)
		} else {
			delete(f.failed, base)
		}
	}
	f.failing.Store(int32(len(f.failed)))
	slices.Sort(out)
	return out
}

// sign is the signature of a forwarded request id.
func (f *forwarder) sign(requestID string) string {
	m := hmac.New(sha256.New, f.secret)
	m.Write([]byte(requestID))
	return hex.EncodeToString(m.Sum(nil))
}

// forwardedID is the request id a peer replica gave a request it
// forwarded, or "" when the header is absent or not signed by a replica.
func (f *forwarder) forwardedID(ctx *fasthttp.RequestCtx) string {
	if f == nil {
		return ""
	}
	v := ctx.Request.Header.Peek(forwardHeader)
	if len(v) == 0 {
		return ""
	}
	id, sig, ok := strings.Cut(string(v), ".")
	if !ok || len(id) == 0 || len(id) > 64 || !hmac.Equal([]byte(sig), []byte(f.sign(id))) {
		return ""
	}
	return id
}

// forwardTimeout bounds a forwarded request as a whole: longer than any
// request a peer lets run (its relay timing ends those itself).
const forwardTimeout = 2 * time.Hour

// wholeAnswer bounds the answers a front reads whole before passing
// them on.
const wholeAnswer = 1 << 20

// hopHeaders are the headers of one connection, not passed on.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", forwardHeader}

// forward sends the call's request, its body read whole, to the peer at
// base and answers with the peer's answer. The request is abandoned, and
// the connection to the peer closed, the moment its client goes: the peer
// then ends it as a client's disconnect.
func (s *Server) forward(c *call, base string) error {
	ctx, cancel := context.WithTimeout(context.Background(), forwardTimeout)
	watched := s.watch.add(c.ctx.Conn(), cancel)
	done := func() {
		s.watch.remove(watched)
		cancel()
	}
	req, err := http.NewRequestWithContext(ctx, string(c.ctx.Method()), base+string(c.ctx.Request.RequestURI()),
		bytes.NewReader(c.ctx.Request.Body()))
	if err != nil {
		done()
		return err
	}
	for k, v := range c.ctx.Request.Header.All() {
		req.Header.Add(string(k), string(v))
	}
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	req.Header.Del("Content-Length")
	req.ContentLength = int64(len(c.ctx.Request.Body()))
	req.Header.Set(forwardHeader, c.requestID+"."+s.forwarder.sign(c.requestID))
	req.Header.Set("X-Forwarded-For", c.ctx.RemoteIP().String())

	resp, err := s.forwarder.client.Do(req)
	if err != nil {
		gone := errors.Is(ctx.Err(), context.Canceled) // before done cancels it
		done()
		if gone {
			// The client went before the peer answered; nobody reads this.
			return &api.Error{Kind: api.KindClientGone, Message: "Client disconnected"}
		}
		s.metrics.forwards.WithLabelValues("unreachable").Inc()
		s.forwarder.mark(base, false)
		s.log.Debug("forward to a peer replica", "peer", base, "request_id", c.requestID, "err", err)
		c.ctx.SetConnectionClose()
		return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: homeRetryAfter,
			Message: "This gateway replica could not reach the replica at " + base + " that serves the request; retry"}
	}
	s.forwarder.mark(base, true)
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(notHomeHeader) != "" {
		// Refused before it ran: the peer is not the organisation's
		// home (any more). The caller may send it elsewhere.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, wholeAnswer))
		_ = resp.Body.Close()
		done()
		s.metrics.forwards.WithLabelValues("not_home").Inc()
		return errNotHome
	}
	s.metrics.forwards.WithLabelValues("forwarded").Inc()
	out := &c.ctx.Response
	out.SetStatusCode(resp.StatusCode)
	for k, vs := range resp.Header {
		if slices.Contains(hopHeaders, k) || k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			out.Header.Add(k, v)
		}
	}
	// An answer of known, modest length is passed on whole, with its
	// length; a stream, or a large body, as it comes.
	if resp.ContentLength >= 0 && resp.ContentLength <= wholeAnswer {
		defer done()
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			// The peer's head was for its answer, which is not
			// coming: the error gets one of its own.
			out.Header.Reset()
			out.Header.Set("X-Request-Id", c.requestID)
			return s.peerLost(base, err)
		}
		out.SetBodyRaw(b)
		return nil
	}
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	conn := c.ctx.Conn()
	// Passed on as it arrives, each read flushed: a stream's chunks reach
	// the client as the peer sends them.
	c.ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer done()
		defer resp.Body.Close()
		buf := make([]byte, 32<<10)
		for {
			n, rerr := resp.Body.Read(buf)
			if n > 0 {
				if _, err := w.Write(buf[:n]); err != nil {
					return
				}
				if err := w.Flush(); err != nil {
					return
				}
			}
			switch {
			case rerr == nil:
				continue
			case errors.Is(rerr, io.EOF):
				return
			case ctx.Err() != nil:
				return // the client went
			}
			// The peer went mid-answer. A stream ends as one whose
			// worker was lost does; anything else is cut, so that no
			// client takes half an answer for a whole one.
			lost := s.peerLost(base, rerr)
			if sse {
				frame := append([]byte("data: "), inReplyError(lost, formStreamEvent)...)
				_, _ = w.Write(append(frame, "\n\ndata: [DONE]\n\n"...))
				_ = w.Flush()
				return
			}
			_ = conn.Close()
			return
		}
	})
	return nil
}

// errNotHome is a peer's refusal of a forwarded request before running
// it: it is not the organisation's home.
var errNotHome = errors.New("the peer is not the organisation's home")

// forwardOrServe forwards the call to the peer at base and, when the peer
// refuses it as not the organisation's home, asks where the home is now
// and tries once more there, or here. Only a refusal made before the
// request ran is retried: GPU work is never done twice.
func (s *Server) forwardOrServe(c *call, base string) error {
	err := s.forward(c, base)
	if !errors.Is(err, errNotHome) {
		return err
	}
	s.cluster.Homes.Forget(c.principal.OrgID)
	next, err := s.serveAt(c)
	switch {
	case err != nil:
		return err
	case next == "":
		return c.route.handle(c)
	case next != base:
		if err = s.forward(c, next); !errors.Is(err, errNotHome) {
			return err
		}
	}
	c.ctx.SetConnectionClose()
	return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, Code: api.CodeNotHome, CodeHeader: true,
		RetryAfter: homeRetryAfter, Message: "The organisation's home is moving between gateway replicas; retry"}
}

// peerLost is the answer owed when the peer went away mid-answer.
func (s *Server) peerLost(base string, err error) error {
	s.log.Warn("the peer replica went away during a forwarded request", "peer", base, "err", err)
	return &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkerLost, RetryAfter: time.Second,
		Message: "The gateway replica serving the request went away while serving it; retry", Err: err}
}
