package server

import (
	"bytes"
	"errors"
	"io"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
)

// Request bodies are streamed (fasthttp's StreamRequestBody): fasthttp
// reads at most 8 KB of a body before the handler runs and leaves the rest
// on the connection. dispatch reads the body of an ordinary route whole,
// bounded by its limit, so that PostBody works as it always did; a route
// marked streamed (an audio upload) reads it as it comes, and never holds
// it whole. Whatever a handler leaves unread is read and discarded after
// it, up to the limit, or the connection is closed: the next request on a
// kept-alive connection must not start inside this one's body.

// unreadHeader marks a request whose body is not to be read at all: it is
// over its limit by its Content-Length, or its caller has no valid key
// and sends a large or chunked body. The header is the only place
// HeaderReceived can leave a note for dispatch; one a client sends is
// removed first.
const unreadHeader = "X-Svc-Body-Unread"

// limitFor is the most a request to uri may send: its route's own limit
// or the server's.
func (m *mux) limitFor(uri []byte) int {
	if r := m.bodyLimit(uri); r != nil {
		return r.maxBody
	}
	return maxBodySize
}

// public reports a route that takes no key, named by a request's method
// and URI as sent.
func (m *mux) public(method, uri []byte) bool {
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	r, _ := m.match(string(method), string(uri), &params{})
	return r != nil && r.access == accessPublic
}

// headerReceived decides, from the headers alone, whether the body is
// read. A body that cannot be accepted is left on the wire: its
// Content-Length is set to 0, so that fasthttp reads none of it (nor asks
// for it with 100 Continue), and dispatch answers and closes the
// connection.
func (s *Server) headerReceived(h *fasthttp.RequestHeader, m *mux, console bool) fasthttp.RequestConfig {
	h.Del(unreadHeader)
	limit := m.limitFor(h.RequestURI())
	cl := h.ContentLength()
	// The key is checked before any of the body is read, but only a body
	// larger than an anonymous caller's limit (chunked, or announced so)
	// needs it here: a smaller one is read and dropped after the 401, which
	// keeps the connection.
	if !console && (cl == -1 || cl > anonymousBodyLimit) && !m.public(h.Method(), h.RequestURI()) && s.keyError(h) != nil {
		limit = anonymousBodyLimit
		if cl == -1 {
			cl = limit + 1
		}
	}
	if cl > limit {
		h.Set(unreadHeader, "1")
		h.Del(fasthttp.HeaderExpect)
		h.SetContentLength(0)
	}
	return fasthttp.RequestConfig{MaxRequestBodySize: limit}
}

// unread reports a body HeaderReceived refused to read.
func unread(ctx *fasthttp.RequestCtx) bool { return len(ctx.Request.Header.Peek(unreadHeader)) > 0 }

// errMalformedBody answers a body that ended before its framing said
// (a broken chunk, a connection cut short).
var errMalformedBody = &api.Error{Kind: api.KindInvalidRequest, Message: "Malformed HTTP request"}

// errOverLimit is a streamed body found over its limit as it was read.
var errOverLimit = errors.New("request body over its limit")

// readBody reads the body whole, at most limit bytes, for PostBody; a body
// over the limit is errOverLimit.
func readBody(ctx *fasthttp.RequestCtx, limit int) error {
	st := ctx.RequestBodyStream()
	if st == nil {
		return nil
	}
	var b bytes.Buffer
	if cl := ctx.Request.Header.ContentLength(); cl > 0 {
		// Known in advance: one allocation, not a doubling buffer.
		b.Grow(cl + bytes.MinRead)
	}
	if _, err := b.ReadFrom(io.LimitReader(st, int64(limit)+1)); err != nil {
		ctx.SetConnectionClose()
		return errMalformedBody
	}
	if b.Len() > limit {
		ctx.SetConnectionClose()
		return errOverLimit
	}
	ctx.Request.SetBodyRaw(b.Bytes())
	return nil
}

// finishBody reads and drops what the handler left of the body, up to
// limit bytes, and closes the connection when more is left or the body is
// broken; over reports a body found over the limit.
func finishBody(ctx *fasthttp.RequestCtx, limit int) (over bool) {
	st := ctx.RequestBodyStream()
	// A connection already to be closed needs nothing more read from it.
	if st == nil || ctx.Response.ConnectionClose() {
		return false
	}
	n, err := io.CopyN(io.Discard, st, int64(limit)+1)
	if err != io.EOF {
		ctx.SetConnectionClose()
	}
	return n > int64(limit)
}
