package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

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
	// The body's pace is kept by whoever reads it (requestBody); this
	// bounds the first wait, until one does.
	return fasthttp.RequestConfig{MaxRequestBodySize: limit, ReadTimeout: bodyIdle}
}

// A request body is read at its client's pace, within bounds: each read
// waits at most bodyIdle for bytes, and the body as a whole gets bodyGrace
// and then a second more for each minBodyRate bytes it has brought. One
// time for the whole body would cut off a large upload on a slow link
// while it was still coming; none would let a client hold its connection,
// and its place under --max-connections, with a byte a minute.
const (
	bodyIdle    = 30 * time.Second
	bodyGrace   = 2 * time.Minute
	minBodyRate = 4 << 10 // bytes a second
)

// errRequestTimeout answers a request whose head or body stopped coming,
// or came too slowly (see headerTimeout, bodyIdle). SDKs retry a 408.
var errRequestTimeout = &api.Error{Kind: api.KindRequestTimeout,
	Message: fmt.Sprintf("The request did not arrive in time: its head must come within %d seconds, each part of its body within %d seconds of the last, and a large body at %d KB/s or faster",
		int(headerTimeout/time.Second), int(bodyIdle/time.Second), minBodyRate>>10)}

// requestBody is the request's body as its client sends it, held to the
// pace above, or nil when fasthttp read it whole (see PostBody). A read
// that runs out of time fails with errRequestTimeout, and one that finds
// the connection ended before the body did with errClientGone; every read
// after such a failure fails the same at once, so that a reader that goes
// on (a parser reading past a part, a drain) does not wait again.
func requestBody(ctx *fasthttp.RequestCtx) io.Reader {
	st := ctx.RequestBodyStream()
	if st == nil {
		return nil
	}
	// One reader a request, whoever asks: what it counts is what the body
	// gave, so that the read after the handler's (finishBody) tells a body
	// read to its end from one cut short of its length.
	if pb, ok := ctx.UserValue(pacedBodyKey).(*pacedBody); ok {
		return pb
	}
	pb := &pacedBody{r: st, conn: ctx.Conn(), start: time.Now(), length: int64(ctx.Request.Header.ContentLength())}
	ctx.SetUserValue(pacedBodyKey, pb)
	return pb
}

// pacedBodyKey keys a request's pacedBody among its user values.
const pacedBodyKey = "svc.body"

type pacedBody struct {
	r     io.Reader
	conn  net.Conn
	start time.Time
	n     int64
	// length is the body's announced length; -1 when chunked.
	length int64
	err    error
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.conn != nil {
		now := time.Now()
		earned := time.Duration(float64(b.n) / minBodyRate * float64(time.Second))
		due := now.Add(bodyIdle)
		if whole := b.start.Add(bodyGrace + earned); whole.Before(due) {
			due = whole
		}
		_ = b.conn.SetReadDeadline(due)
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.err = errRequestTimeout
		return n, b.err
	case errors.Is(err, io.ErrUnexpectedEOF), err == io.EOF && b.length >= 0 && b.n < b.length,
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, net.ErrClosed):
		// The connection ended inside the body (fasthttp reads a short
		// one with a length as a plain end): the client left.
		b.err = errClientGone
		return n, b.err
	}
	return n, err
}

// unread reports a body HeaderReceived refused to read.
func unread(ctx *fasthttp.RequestCtx) bool { return len(ctx.Request.Header.Peek(unreadHeader)) > 0 }

// errMalformedBody answers a body that ended before its framing said
// (a broken chunk, a connection cut short).
var errMalformedBody = &api.Error{Kind: api.KindInvalidRequest, Message: "Malformed HTTP request"}

// errOverLimit is a streamed body found over its limit as it was read.
var errOverLimit = errors.New("request body over its limit")

// readBody reads the body whole, at most limit bytes, for PostBody; a body
// over the limit is errOverLimit. What a large body holds is taken from
// budget as it comes, and held (in *held) until the request is done; a
// body the budget cannot take is errBodyMemory.
func readBody(ctx *fasthttp.RequestCtx, limit int, budget *bodyBudget, held *int64) error {
	st := requestBody(ctx)
	if st == nil {
		return nil
	}
	var body []byte
	var err error
	if cl := ctx.Request.Header.ContentLength(); cl > 0 && cl <= wholeBody {
		// Known in advance and small: one allocation, not a doubling
		// buffer. A larger one is allocated as it comes, not as it is
		// announced.
		if cl > firstPiece && !budget.take(held, cl) {
			err = errBodyMemory
		}
		if err == nil {
			var b bytes.Buffer
			b.Grow(cl + bytes.MinRead)
			_, err = b.ReadFrom(io.LimitReader(st, int64(limit)+1))
			body = b.Bytes()
		}
	} else {
		body, err = readPieces(st, limit+1, func(n int) bool { return budget.take(held, n) })
	}
	if err != nil {
		if errors.Is(err, errBodyMemory) {
			closeUnread(ctx)
			return err
		}
		ctx.SetConnectionClose()
		if errors.Is(err, errRequestTimeout) || errors.Is(err, errClientGone) {
			return api.ErrorOf(err)
		}
		return errMalformedBody
	}
	if len(body) > limit {
		closeUnread(ctx)
		return errOverLimit
	}
	ctx.Request.SetBodyRaw(body)
	return nil
}

// wholeBody is the largest announced body read into one allocation of
// its length: past it, a client could have the gateway allocate its
// announced length and then send nothing. firstPiece is what a body may
// hold outside the budget (bodyBudget): most requests' bodies are
// smaller, and cost no count.
const (
	wholeBody  = 1 << 20
	firstPiece = 16 << 10
)

// readPieces reads r to its end, or to max bytes, for a body of unknown
// or large length. A doubling buffer would hold up to twice what came,
// and three times while it grew: a body refused past a 32 MB limit would
// cost 96 MB. Pieces, joined once the body is known to fit, cost what
// came, and twice that only while they are joined. take is asked for
// each piece's room past the first before it is made; false ends the
// read with errBodyMemory.
func readPieces(r io.Reader, max int, take func(int) bool) ([]byte, error) {
	var pieces [][]byte
	total, size := 0, firstPiece
	for total < max {
		n := min(size, max-total)
		if len(pieces) > 0 && !take(n) {
			return nil, errBodyMemory
		}
		p := make([]byte, n)
		n, err := io.ReadFull(r, p)
		pieces, total = append(pieces, p[:n]), total+n
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
		size = min(2*size, 1<<20)
	}
	if len(pieces) == 1 {
		return pieces[0], nil
	}
	return bytes.Join(pieces, nil), nil
}

// A client may send a body of up to 32 MB at 4 KB/s: bodies held while
// they come, and then while their requests run, could take the gateway's
// memory for hours with a few dozen connections. What large bodies hold
// together is bounded by a budget: past it, a request whose body needs
// more is refused with a 503 to retry, and others go on.
type bodyBudget struct {
	used atomic.Int64
	max  int64
}

// defaultBodyMemory is the budget of the bodies read whole: thirty-two at
// the 32 MB limit, or some thousand chats of a long conversation.
const defaultBodyMemory = 1 << 30

// take takes n bytes of the budget for a request, if it has them, and
// adds them to what the request holds (*held), which it gives back.
func (b *bodyBudget) take(held *int64, n int) bool {
	if b == nil {
		return true
	}
	if b.used.Add(int64(n)) > b.max {
		b.used.Add(-int64(n))
		return false
	}
	*held += int64(n)
	return true
}

// give returns n bytes taken.
func (b *bodyBudget) give(n int64) {
	if b != nil && n > 0 {
		b.used.Add(-n)
	}
}

// errBodyMemory answers a body the budget cannot take.
var errBodyMemory = &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: time.Second,
	Message: "Service temporarily unavailable, please retry: the gateway holds as many large request bodies as it may at once"}

// finishBody reads and drops what the handler left of the body, up to
// limit bytes, and closes the connection when more is left or the body is
// broken; over reports a body found over the limit.
func finishBody(ctx *fasthttp.RequestCtx, limit int) (over bool) {
	// A connection already to be closed needs nothing more read from it.
	if ctx.Response.ConnectionClose() {
		return false
	}
	st := requestBody(ctx)
	if st == nil {
		return false
	}
	n, err := io.CopyN(io.Discard, st, int64(limit)+1)
	if err != io.EOF {
		ctx.SetConnectionClose()
	}
	return n > int64(limit)
}
