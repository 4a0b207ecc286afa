package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/peer"
	"github.com/svc-dev/svc/internal/relay"
)

// A replica serves the API for organisations homed elsewhere by
// forwarding each request to the organisation's home, which alone holds
// its workers (the rentals: to the leader), as one stream on its replica
// link (peerlink.go), and passing the answer back as it comes: streams
// chunk by chunk. The front authenticates the key first, from its own
// copy of the accounts, so nothing unauthenticated crosses to a peer; the
// peer authenticates it again and serves it with its usual handlers, so
// usage rows, errors, 429s and SSE framing are its own.
//
// On the stream the request is HTTP/1.1 as a client would send it, its
// body whole or, for an upload, as the client sends it; the answer is
// HTTP/1.1 as the home's server writes it. The stream's header carries
// the request id the front gave the request, which the home uses for its
// usage row: a client sees one id whichever replica it reached.

// target is the replica a request is forwarded to.
type target struct{ id, url string }

// wholeAnswer bounds the answers a front reads whole before passing
// them on.
const wholeAnswer = 1 << 20

// replayCap bounds what a front keeps of an upload it streams to the home,
// to send it again elsewhere if the home refuses it as not_home. The home
// refuses before it reads the body, so it can have taken at most its
// read buffer and the stream's window: a refusal after more than that is
// impossible, and keeping more would be keeping the upload whole.
const replayCap = link.DefaultWindow + 2*link.MaxChunk + headerLimit

// hopHeaders are the headers of one connection, not passed on; the
// framing headers are the front's to write.
var hopHeaders = [...]string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect", "Content-Length", unreadHeader}

func hopHeader(k []byte) bool {
	for _, h := range hopHeaders {
		if len(k) == len(h) && bytes.EqualFold(k, []byte(h)) {
			return true
		}
	}
	return false
}

// appendRequestHead appends the request line and headers of the call's
// request as forwarded: the client's headers, less those of its
// connection, with the body framed by length (n ≥ 0) or chunked (n < 0),
// and the stream's one request closing it.
func appendRequestHead(dst []byte, c *call, n int) []byte {
	h := &c.ctx.Request.Header
	dst = append(dst, h.Method()...)
	dst = append(dst, ' ')
	dst = append(dst, h.RequestURI()...)
	dst = append(dst, " HTTP/1.1\r\n"...)
	for k, v := range h.All() {
		if hopHeader(k) {
			continue
		}
		dst = append(dst, k...)
		dst = append(dst, ": "...)
		dst = append(dst, v...)
		dst = append(dst, "\r\n"...)
	}
	if n >= 0 {
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, int64(n), 10)
		dst = append(dst, "\r\n"...)
	} else {
		dst = append(dst, "Transfer-Encoding: chunked\r\n"...)
	}
	return append(dst, "Connection: close\r\n\r\n"...)
}

// upload is the body of a streamed route, sent to the home as it
// arrives from the client, with what was sent kept while it fits
// replayCap.
type upload struct {
	src    io.Reader
	length int // the client's Content-Length, or -1 for chunked
	sent   []byte
	// replayable: sent holds everything taken from src so far.
	replayable bool
}

// again is the upload to send to the next replica: what was sent, then
// the rest.
func (u *upload) again() *upload {
	return &upload{src: io.MultiReader(bytes.NewReader(u.sent), u.src), length: u.length, replayable: true}
}

// pump sends the upload's body on st until it is whole, the home has
// answered (it wants no more: link.ErrAnswered), or something failed.
func (u *upload) pump(ctx context.Context, st *link.Stream) error {
	buf := make([]byte, link.MaxChunk)
	var framed []byte
	for {
		n, rerr := u.src.Read(buf)
		if n > 0 {
			if u.replayable {
				if len(u.sent)+n <= replayCap {
					u.sent = append(u.sent, buf[:n]...)
				} else {
					u.sent, u.replayable = nil, false
				}
			}
			p := buf[:n]
			if u.length < 0 {
				framed = strconv.AppendInt(framed[:0], int64(n), 16)
				framed = append(append(append(framed, "\r\n"...), p...), "\r\n"...)
				p = framed
			}
			if err := st.SendBody(ctx, p); err != nil {
				return err
			}
		}
		switch {
		case errors.Is(rerr, io.EOF):
			if u.length < 0 {
				if err := st.SendBody(ctx, []byte("0\r\n\r\n")); err != nil {
					return err
				}
			}
			return st.EndBody(ctx)
		case rerr != nil:
			return &clientBodyError{rerr}
		}
	}
}

// clientBodyError is a client's body that could not be read.
type clientBodyError struct{ err error }

func (e *clientBodyError) Error() string { return "read the client's body: " + e.err.Error() }
func (e *clientBodyError) Unwrap() error { return e.err }

// streamReader reads the bytes of a stream's answer: its DATA frames, up
// to its END. A stream that fails (reset when the client went, or lost
// with its peer) fails the read.
type streamReader struct {
	st  *link.Stream
	buf []byte
	end bool
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.end {
			return 0, io.EOF
		}
		f, err := r.st.Recv(context.Background())
		if err != nil {
			return 0, err
		}
		switch f.Type {
		case link.TypeEnd:
			r.end = true
		case link.TypeData:
			r.buf = f.Payload
		default:
			return 0, link.ErrInvalid
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// answerReader is what a front reads one answer through, pooled: the
// answers of many small requests then cost no buffer each.
type answerReader struct {
	sr streamReader
	br *bufio.Reader
}

var answerReaders = sync.Pool{New: func() any {
	a := &answerReader{}
	a.br = bufio.NewReaderSize(&a.sr, 8<<10)
	return a
}}

func newAnswerReader(st *link.Stream) *answerReader {
	a := answerReaders.Get().(*answerReader)
	a.sr = streamReader{st: st}
	a.br.Reset(&a.sr)
	return a
}

func (a *answerReader) release() {
	a.sr = streamReader{}
	a.br.Reset(&a.sr)
	answerReaders.Put(a)
}

// forwarding is one request on its way to a peer and back.
type forwarding struct {
	s  *Server
	c  *call
	to target
	st *link.Stream
	ar *answerReader
	// gone: the client went, and the stream was reset for it.
	gone atomic.Bool
	// stopped: this replica's drain ran out of time, and the stream was
	// reset for it (forwardSet.abort).
	stopped atomic.Bool
	unwatch func()
}

// lost is the client's answer for a forward whose stream failed with
// err: the drain's end when this replica stopped it, else the peer's
// loss.
func (f *forwarding) lost(err error) error {
	if f.stopped.Load() {
		return relay.ErrShuttingDown
	}
	return f.s.peerLost(f.c, f.to, err)
}

// forwardSet holds the forwards under way: a drain that runs out of time
// ends them, as it ends the requests this replica runs itself.
type forwardSet struct {
	mu sync.Mutex
	m  map[*forwarding]struct{}
}

func (fs *forwardSet) add(f *forwarding) {
	fs.mu.Lock()
	if fs.m == nil {
		fs.m = map[*forwarding]struct{}{}
	}
	fs.m[f] = struct{}{}
	fs.mu.Unlock()
}

func (fs *forwardSet) remove(f *forwarding) {
	fs.mu.Lock()
	delete(fs.m, f)
	fs.mu.Unlock()
}

// abort ends every forward under way: its stream is reset saying this
// replica is stopping, which ends the request at its home with the 503
// shutting_down its client is answered here (a stream with its error
// event). It returns how many it ended.
func (fs *forwardSet) abort() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for f := range fs.m {
		f.stopped.Store(true)
		f.st.ResetStopping()
	}
	return len(fs.m)
}

// leave is the client watch's: the client went, and its stream is reset,
// which ends the request at the home as a client's disconnect, and
// whatever waits on the stream here.
func (f *forwarding) leave() {
	f.gone.Store(true)
	f.st.Reset()
}

// done lets go of what the forward holds.
func (f *forwarding) done() {
	f.s.forwards.remove(f)
	if f.unwatch != nil {
		f.unwatch()
		f.unwatch = nil
	}
	if f.ar != nil {
		f.ar.release()
		f.ar = nil
	}
}

// requestBufs holds the buffers a request is written into for its
// stream, which copies it.
var requestBufs = sync.Pool{New: func() any { return new([]byte) }}

// forward sends the call's request to the peer to, its body as read
// (or, for an upload, as it arrives: up), and answers with the peer's
// answer. The stream is reset, which ends the request there as a
// client's disconnect, the moment the client goes.
//
// Nothing here waits on a context: what waits, waits on the stream, and
// the client's departure resets it.
func (s *Server) forward(c *call, to target, up *upload) error {
	bg := context.Background()
	sess, err := s.peers.Session(bg, to.id, to.url)
	if err != nil {
		return &peerDownError{err}
	}
	f := &forwarding{s: s, c: c, to: to}
	// From here the peer may have the request, and it writes the usage
	// row, whatever becomes of the answer: one request, one row.
	c.rowed = true
	bp := requestBufs.Get().(*[]byte)
	buf := appendClient((*bp)[:0], c)
	nh := len(buf)
	if up == nil {
		body := c.ctx.Request.Body()
		buf = append(appendRequestHead(buf, c, len(body)), body...)
		f.st, err = sess.Open(bg, buf[:nh], buf[nh:])
	} else if f.st, err = sess.OpenDuplex(bg, buf[:nh]); err == nil {
		buf = appendRequestHead(buf, c, up.length)
		err = f.st.SendBody(bg, buf[nh:])
	}
	if cap(buf) <= 64<<10 {
		*bp = buf[:0]
		requestBufs.Put(bp)
	}
	if err != nil {
		if f.st != nil {
			f.st.Reset()
		}
		if link.Unsent(err) {
			// The link closed before the request went out: the peer
			// never had it, and the row is this replica's again.
			c.rowed = false
			return &peerDownError{err}
		}
		s.metrics.forwards.WithLabelValues("lost").Inc()
		return s.peerLost(c, to, err)
	}
	s.forwards.add(f)
	// A client that went before this is reported at once.
	f.unwatch = s.watchClient(c.ctx.Conn(), f.leave)
	var pumped chan error
	if up != nil {
		pumped = make(chan error, 1)
		go func() { pumped <- up.pump(bg, f.st) }()
	}
	f.ar = newAnswerReader(f.st)
	herr := c.ctx.Response.Header.Read(f.ar.br)
	var perr error
	if pumped != nil {
		// The body is the client connection's to read until the pump is
		// done with it. A home answers once it has read the body, or
		// early, wanting no more (the rest is then the front's to drain):
		// either way the pump ends.
		perr = <-pumped
	}
	h := &c.ctx.Response.Header
	if herr != nil {
		f.done()
		h.Reset()
		h.Set("X-Request-Id", c.requestID)
		var cbe *clientBodyError
		switch {
		case errors.As(perr, &cbe):
			c.ctx.SetConnectionClose()
			switch {
			case errors.Is(cbe.err, fasthttp.ErrBodyTooLarge):
				return s.tooLarge(c.ctx, s.public.mux, false)
			case errors.Is(cbe.err, errRequestTimeout):
				return errRequestTimeout
			}
			return errMalformedBody
		case f.gone.Load():
			return errClientGone
		}
		s.metrics.forwards.WithLabelValues("lost").Inc()
		return f.lost(herr)
	}
	if h.StatusCode() == fasthttp.StatusServiceUnavailable && len(h.Peek(notHomeHeader)) > 0 {
		// Refused before it ran: the peer is not the organisation's
		// home (any more). The caller may send it elsewhere.
		_, _ = io.Copy(io.Discard, io.LimitReader(f.ar.br, wholeAnswer))
		f.done()
		h.Reset()
		h.Set("X-Request-Id", c.requestID)
		s.metrics.forwards.WithLabelValues("not_home").Inc()
		return errNotHome
	}
	s.metrics.forwards.WithLabelValues("forwarded").Inc()
	// The answer is the home's; the connection to the client is this
	// replica's, kept alive or not by its own rules.
	h.ResetConnectionClose()
	n := h.ContentLength()
	status := h.StatusCode()
	switch {
	case c.ctx.IsHead() || status < 200 || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified:
		defer f.done()
		_, _ = io.Copy(io.Discard, f.ar.br)
		return nil
	case n >= 0 && n <= wholeAnswer:
		defer f.done()
		if err := f.readWhole(n); err != nil {
			h.Reset()
			h.Set("X-Request-Id", c.requestID)
			c.ctx.Response.ResetBody()
			if f.gone.Load() {
				return errClientGone
			}
			return f.lost(err)
		}
		return nil
	}
	f.stream(n == -1)
	return nil
}

// appendClient appends the stream header of the call's request: its id
// and its client's address.
func appendClient(dst []byte, c *call) []byte {
	var ab [64]byte
	addr := ab[:0]
	if ta, ok := c.ctx.RemoteAddr().(*net.TCPAddr); ok {
		addr, _ = ta.AddrPort().AppendText(addr)
	}
	return peer.AppendRequest(dst, c.requestID, addr)
}

// readWhole reads an answer of n bytes into the response, then the
// stream's end.
func (f *forwarding) readWhole(n int) error {
	br, resp := f.ar.br, &f.c.ctx.Response
	for n > 0 {
		if br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil {
				return err
			}
		}
		p, _ := br.Peek(min(n, br.Buffered()))
		resp.AppendBody(p)
		_, _ = br.Discard(len(p))
		n -= len(p)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("the answer runs past its Content-Length")
		}
		return err
	}
	return nil
}

// stream passes the answer's body on as it arrives, each piece flushed:
// a stream's chunks reach the client as the home sends them.
func (f *forwarding) stream(chunked bool) {
	c := f.c
	sse := bytes.HasPrefix(c.ctx.Response.Header.ContentType(), []byte("text/event-stream"))
	conn := c.ctx.Conn()
	var body io.Reader = f.ar.br
	if chunked {
		body = httputil.NewChunkedReader(f.ar.br)
	}
	c.ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer f.done()
		buf := make([]byte, 16<<10)
		for {
			n, rerr := body.Read(buf)
			if n > 0 {
				if _, err := w.Write(buf[:n]); err != nil {
					f.st.Reset()
					return
				}
				if err := w.Flush(); err != nil {
					f.st.Reset()
					return
				}
			}
			switch {
			case rerr == nil:
				continue
			case errors.Is(rerr, io.EOF):
				// The chunks' end; the stream's follows.
				_, _ = io.Copy(io.Discard, f.ar.br)
				return
			case f.gone.Load():
				return // the client went
			}
			// The peer went mid-answer. A stream ends as one whose
			// worker was lost does; anything else is cut, so that no
			// client takes half an answer for a whole one.
			lost := f.lost(rerr)
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
}

// errNotHome is a peer's refusal of a forwarded request before running
// it: it is not the organisation's home.
var errNotHome = errors.New("the peer is not the organisation's home")

// peerDownError is a forward for which no link to the peer could be had:
// nothing of the request was sent.
type peerDownError struct{ err error }

func (e *peerDownError) Error() string { return "no link to the peer: " + e.err.Error() }
func (e *peerDownError) Unwrap() error { return e.err }

// errClientGone answers a request whose client went before its peer
// answered; nobody reads it.
var errClientGone = &api.Error{Kind: api.KindClientGone, Message: "Client disconnected"}

// forwardOrServe forwards the call to the peer to and, when the peer
// refuses it as not the organisation's home, asks where the home is now
// and tries once more there, or here. Only a refusal made before the
// request ran is retried: GPU work is never done twice.
func (s *Server) forwardOrServe(c *call, to target) error {
	if websocket.FastHTTPIsWebSocketUpgrade(c.ctx) {
		// A live transcription's WebSocket is spliced to the home, once:
		// one spliced here already found the home moved.
		if len(c.ctx.Request.Header.Peek(link.SplicedHeader)) > 0 {
			return s.notHome(c, "The organisation's home moved while the connection was being passed to it")
		}
		return s.spliceTo(c, to.url, string(c.ctx.Request.Header.RequestURI()))
	}
	var up *upload
	if c.route.streamed {
		up = &upload{src: requestBody(c.ctx), length: c.ctx.Request.Header.ContentLength(), replayable: true}
		if up.length < 0 {
			up.length = -1
		}
	}
	err := s.forward(c, to, up)
	var down *peerDownError
	if errors.As(err, &down) {
		return s.homeDown(c, to, up, down)
	}
	if !errors.Is(err, errNotHome) {
		return err
	}
	// Refused before it ran, the request has no row there.
	c.rowed = false
	s.cluster.Homes.Forget(c.principal.OrgID)
	if up != nil && !up.replayable {
		return s.homeMoving(c)
	}
	if up != nil {
		up = up.again()
	}
	next, err := s.serveAt(c)
	switch {
	case err != nil:
		return err
	case next.url == "" && up != nil:
		// Served here, an upload would be read by its handler from the
		// client's connection, where what the front already sent is
		// missing; the client sends it again.
		return s.homeMoving(c)
	case next.url == "":
		return c.route.handle(c)
	case next != to:
		return s.forwardLast(c, next, up)
	}
	return s.homeMoving(c)
}

// forwardLast is a request's last forward, to next, after its first
// found the home gone or moved: a peer that cannot be reached, or that
// refuses it as not the home, ends it with a 503.
func (s *Server) forwardLast(c *call, next target, up *upload) error {
	err := s.forward(c, next, up)
	var down *peerDownError
	switch {
	case errors.As(err, &down):
		return s.unreachable(c, next, down.err)
	case errors.Is(err, errNotHome):
		c.rowed = false
		return s.homeMoving(c)
	}
	return err
}

// homeDown serves a request whose home this replica could not link to,
// nothing of it sent: the home may have died and another replica taken
// the organisation since this one last read the homes, so the database
// is asked (at most every quarter second for an organisation), and the
// request goes to the new home, or is served here if this replica now is
// it. While the dead home's registration lasts, the answer is 503 with
// Retry-After.
func (s *Server) homeDown(c *call, to target, up *upload, down *peerDownError) error {
	if !s.cluster.Homes.ForgetUnreachable(c.principal.OrgID) {
		// Asked a moment ago: the database named this home then.
		return s.unreachable(c, to, down.err)
	}
	next, err := s.serveAt(c)
	switch {
	case err != nil:
		return err
	case next == to:
		return s.unreachable(c, to, down.err)
	case next.url == "":
		// Nothing of an upload was read yet: its handler reads it from
		// the client's connection.
		return c.route.handle(c)
	}
	return s.forwardLast(c, next, up)
}

// homeMoving is the answer owed when the organisation's home refused a
// request as not its home and the next could not take it either.
func (s *Server) homeMoving(c *call) error {
	c.ctx.SetConnectionClose()
	return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, Code: api.CodeNotHome, CodeHeader: true,
		RetryAfter: homeRetryAfter, Message: "The organisation's home is moving between gateway replicas; retry"}
}

// unreachable is the answer owed when the link to the peer is down:
// nothing was sent.
func (s *Server) unreachable(c *call, to target, err error) error {
	s.metrics.forwards.WithLabelValues("unreachable").Inc()
	s.log.Debug("forward to a peer replica", "peer", to.url, "request_id", c.requestID, "err", err)
	c.ctx.SetConnectionClose()
	return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: homeRetryAfter,
		Message: "This gateway replica could not reach the replica at " + to.url + " that serves the request; retry"}
}

// peerLost is the answer owed when the peer went away with the request:
// it may have run there, so it is not sent anywhere else.
func (s *Server) peerLost(c *call, to target, err error) error {
	s.log.Warn("the peer replica went away during a forwarded request", "peer", to.url, "request_id", c.requestID, "err", err)
	return &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkerLost, RetryAfter: time.Second,
		Message: "The gateway replica serving the request went away while serving it; retry", Err: err}
}
