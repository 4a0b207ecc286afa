package server

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
)

// A standby serves the API for its clients by forwarding each request to
// the leader, which alone holds the workers, and passing the answer back
// as it comes: streams chunk by chunk. The standby authenticates the key
// first, from its own copy of the accounts, so nothing unauthenticated
// crosses to the leader; the leader authenticates it again and serves it
// with its usual handlers, so usage rows, errors, 429s and SSE framing are
// the leader's own.
//
// The request id the standby gave the request travels with it, signed
// with the cluster's secret, and the leader uses it for its usage row: a
// client sees one id whichever replica it reached.

// forwardHeader carries the forwarding replica's request id and its
// signature.
const forwardHeader = "X-Svc-Forward"

// forwarder holds a client per leader URL.
type forwarder struct {
	secret []byte

	mu      sync.Mutex
	clients map[string]*fasthttp.HostClient
}

func newForwarder(secret string) *forwarder {
	return &forwarder{secret: []byte(secret), clients: map[string]*fasthttp.HostClient{}}
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
	v := ctx.Request.Header.Peek(forwardHeader)
	if f == nil || len(v) == 0 {
		return ""
	}
	id, sig, ok := strings.Cut(string(v), ".")
	if !ok || len(id) == 0 || len(id) > 64 || !hmac.Equal([]byte(sig), []byte(f.sign(id))) {
		return ""
	}
	return id
}

// forwardTimeout bounds a forwarded request as a whole: longer than any
// request the leader lets run (its relay timing ends those itself).
const forwardTimeout = 2 * time.Hour

// client is the pooled client for the leader at base.
func (f *forwarder) client(base string) (*fasthttp.HostClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients[base]; ok {
		return c, nil
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return nil, errors.New("the leader's URL is not usable: " + base)
	}
	c := &fasthttp.HostClient{
		Addr:                hostPort(u),
		IsTLS:               u.Scheme == "https",
		Name:                "svc-replica",
		MaxConns:            4096,
		MaxConnWaitTimeout:  5 * time.Second,
		ReadTimeout:         forwardTimeout,
		WriteTimeout:        time.Minute,
		MaxIdleConnDuration: 30 * time.Second,
		StreamResponseBody:  true,
		// The leader's answers are passed on as they are.
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
	}
	// Old leaders' clients are dropped as the lease moves on; their idle
	// connections close by themselves.
	clear(f.clients)
	f.clients[base] = c
	return c, nil
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return u.Host + ":443"
	}
	return u.Host + ":80"
}

// wholeAnswer bounds the answers a standby reads whole before passing
// them on.
const wholeAnswer = 1 << 20

// hopHeaders are the headers of one connection, not passed on.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", forwardHeader}

// forward sends the call's request, its body read whole, to the leader at
// base and answers with the leader's answer.
func (s *Server) forward(c *call, base string) error {
	hc, err := s.forwarder.client(base)
	if err != nil {
		return err
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	c.ctx.Request.Header.CopyTo(&req.Header)
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	req.Header.Set(forwardHeader, c.requestID+"."+s.forwarder.sign(c.requestID))
	req.Header.Set("X-Forwarded-For", c.ctx.RemoteIP().String())
	req.SetBodyRaw(c.ctx.Request.Body())
	req.SetHost(hc.Addr)

	resp := fasthttp.AcquireResponse()
	if err := hc.Do(req, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		s.metrics.forwards.WithLabelValues("unreachable").Inc()
		s.log.Warn("forward to the leader", "leader", base, "request_id", c.requestID, "err", err)
		return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, Code: api.CodeStandby, CodeHeader: true,
			RetryAfter: standbyRetryAfter, Message: "This gateway replica could not reach the cluster's leader at " + base + " to serve the request; retry"}
	}
	s.metrics.forwards.WithLabelValues("forwarded").Inc()
	out := &c.ctx.Response
	resp.Header.CopyTo(&out.Header)
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	body := resp.BodyStream()
	// An answer of known, modest length is passed on whole, with its
	// length; a stream, or a large body, as it comes.
	if cl := resp.Header.ContentLength(); body == nil || (cl >= 0 && cl <= wholeAnswer) {
		defer fasthttp.ReleaseResponse(resp)
		if body == nil {
			out.SetBodyRaw(append([]byte(nil), resp.Body()...))
			return nil
		}
		// Body would read the stream too, but keep it in resp.
		b, err := io.ReadAll(io.LimitReader(body, wholeAnswer+1))
		_ = resp.CloseBodyStream()
		if err != nil {
			// The leader's head was for its answer, which is not
			// coming: the error gets one of its own.
			out.Header.Reset()
			out.Header.Set("X-Request-Id", c.requestID)
			return fmt.Errorf("read the leader's answer: %w", err)
		}
		out.SetBodyRaw(b)
		return nil
	}
	out.Header.SetContentLength(-1)
	// Passed on as it arrives, each read flushed: a stream's chunks reach
	// the client as the leader sends them. A client that goes away ends
	// the copy, and closing the leader's connection tells it so.
	c.ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer fasthttp.ReleaseResponse(resp)
		defer func() { _ = resp.CloseBodyStream() }()
		buf := make([]byte, 32<<10)
		for {
			n, rerr := body.Read(buf)
			if n > 0 {
				if _, err := w.Write(buf[:n]); err != nil {
					return
				}
				if err := w.Flush(); err != nil {
					return
				}
			}
			if rerr != nil {
				return
			}
		}
	})
	return nil
}
