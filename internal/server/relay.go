package server

import (
	"errors"
	"io"
	"net/http"
	"net/url"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/relay"
)

// The translation between fasthttp and the relay: a call's request
// becomes a relay.Request, its answer a response, its stream a chunked
// body of server-sent events.

// inference is the relay.Request of an inference call, before the handler
// adds what its kind needs.
func inference(c *call, kind, model string, stream bool) relay.Request {
	c.model = model
	r := relay.Request{ID: c.requestID, OrgID: c.principal.OrgID, KeyID: c.principal.KeyID,
		Kind: kind, Model: model, Stream: stream, Pin: string(c.ctx.Request.Header.Peek("X-Svc-Worker-Id")),
		// A client's own trace continues through the gateway; no header,
		// no allocation.
		Traceparent: string(c.ctx.Request.Header.Peek("traceparent")),
		Tracestate:  string(c.ctx.Request.Header.Peek("tracestate"))}
	if pc, ok := c.ctx.Conn().(*peerConn); ok {
		r.Departed = pc.departed
	}
	return r
}

// start puts req on the relay; the call is cancelled as soon as its
// client closes the connection.
func (s *Server) start(c *call, req relay.Request) *relay.Call {
	c.rowed = true
	rc := s.relay.Start(req)
	rc.OnEnd(s.watchClient(c.ctx.Conn(), rc.Cancel))
	return rc
}

// relayUnary runs a non-streaming request and answers with its reply;
// late is the form of a failure after a kept-alive reply started.
func (s *Server) relayUnary(c *call, req relay.Request, late errorForm) error {
	return s.answerUnary(c, s.start(c, req), late)
}

// answerUnary answers with the reply of rc, a call already started.
func (s *Server) answerUnary(c *call, rc *relay.Call, late errorForm) error {
	return s.answerUnaryAs(c, rc, late, nil)
}

// answerUnaryAs is answerUnary with a failure after the reply started in
// dialect d's form, when set; the relay translates the body itself
// (relay.Request.Translate).
func (s *Server) answerUnaryAs(c *call, rc *relay.Call, late errorForm, d *dialect) error {
	var fail func(*api.Error) []byte
	if d != nil {
		fail = d.late
	}
	rep, err := rc.Unary()
	if err != nil {
		failedOn(c, rc)
		return err
	}
	h := &c.ctx.Response.Header
	if rep.Worker != nil {
		workerHeaders(h, *rep.Worker)
	}
	c.ctx.SetStatusCode(http.StatusOK)
	c.ctx.SetContentType(rep.ContentType)
	if rep.Late == nil {
		if rep.ServerTiming != "" {
			h.Set("Server-Timing", rep.ServerTiming)
		}
		c.ctx.SetBody(rep.Body)
		return nil
	}
	c.ctx.SetBodyStream(&relayBody{
		write:   func(out *chunks) { rep.Late.Write(&lateWriter{chunks: out, form: late, fail: fail}) },
		abandon: rep.Late.Abandon,
	}, -1)
	return nil
}

// relayStream runs a streaming request: a failure known before any
// output is a plain HTTP error, anything later an event of the stream.
func (s *Server) relayStream(c *call, req relay.Request) error {
	return s.relayStreamAs(c, req, nil)
}

// relayStreamAs is relayStream with the events translated by tr, when set.
func (s *Server) relayStreamAs(c *call, req relay.Request, tr streamTranslator) error {
	rc := s.start(c, req)
	st, err := rc.Stream()
	if err != nil {
		failedOn(c, rc)
		return err
	}
	h := startEvents(c)
	if st.Worker != nil {
		workerHeaders(h, *st.Worker)
	}
	conn, _ := c.ctx.Conn().(*gatedConn)
	c.ctx.SetBodyStream(&relayBody{write: func(out *chunks) { st.Write(eventWriter(out, conn, tr)) }, abandon: st.Abandon}, -1)
	return nil
}

// failedOn names the worker a failed call ran on last, as its usage row
// does: the failure answered is that worker's, or came while it held the
// request. A call no worker took names none.
func failedOn(c *call, rc *relay.Call) {
	if w := rc.LastWorker(); w != nil {
		workerHeaders(&c.ctx.Response.Header, *w)
	}
}

// startEvents starts c's reply as a stream of server-sent events, which
// proxies must pass on as they come, and returns its headers.
func startEvents(c *call) *fasthttp.ResponseHeader {
	h := &c.ctx.Response.Header
	c.ctx.SetStatusCode(http.StatusOK)
	h.SetContentType("text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	return h
}

// eventWriter is the stream's writer, in the dialect of tr when set: on a
// public connection one that tells the relay what its client
// acknowledged, so a client that leaves is billed for what it received.
func eventWriter(out *chunks, conn *gatedConn, tr streamTranslator) relay.EventWriter {
	switch {
	case tr != nil && conn != nil:
		return &ackedDialectSSE{dialectSSE: dialectSSE{chunks: out, tr: tr}, conn: conn}
	case tr != nil:
		return &dialectSSE{chunks: out, tr: tr}
	case conn == nil:
		return &sse{chunks: out}
	}
	return &ackedSSE{sse: sse{chunks: out}, conn: conn}
}

// workerHeaders name the serving worker; a name that is not ASCII is
// percent-encoded with the UTF-8” prefix.
func workerHeaders(h *fasthttp.ResponseHeader, w fleet.WorkerInfo) {
	h.Set("X-Worker-Id", w.ID)
	h.Set("X-Worker-Name", headerName(w.Name))
}

func headerName(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return "UTF-8''" + url.PathEscape(name)
		}
	}
	return name
}

// errWriteTo is what Read answers for bodies written only with WriteTo.
var errWriteTo = errors.New("this body is written with WriteTo")

// relayBody is a response body the relay writes: a stream's events, or the
// rest of a reply kept alive. fasthttp calls its WriteTo on the
// connection's own goroutine, and every Write there goes out at once as
// one chunk; so the body needs no goroutine, pipe or buffer of its own,
// which matters for a gateway holding thousands of them. Close abandons a
// body that was never written, because the connection failed or the
// server shut down first.
type relayBody struct {
	write   func(*chunks)
	abandon func()
	ran     bool
	// closed runs once the body is done with, when set.
	closed func()
}

// SupportsBodyWriteTo tells fasthttp to use WriteTo, never Read.
func (b *relayBody) SupportsBodyWriteTo() bool { return true }

func (b *relayBody) WriteTo(w io.Writer) (int64, error) {
	b.ran = true
	out := &chunks{w: w}
	b.write(out)
	return out.n, out.err
}

func (b *relayBody) Read([]byte) (int, error) { return 0, errWriteTo }

func (b *relayBody) Close() error {
	if !b.ran {
		b.ran = true
		b.abandon()
	}
	if b.closed != nil {
		b.closed()
		b.closed = nil
	}
	return nil
}

// chunks writes a body a chunk at a time, counting what went out and
// remembering the first failure, after which nothing more is written.
type chunks struct {
	w   io.Writer
	n   int64
	err error
}

func (c *chunks) write(b []byte) error {
	if c.err != nil {
		return c.err
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
	return err
}

// sse writes server-sent events, each call in one Write so that each
// leaves as one chunk.
type sse struct {
	*chunks
	buf []byte
	eventMarks
}

func (e *sse) Data(events ...[]byte) error {
	e.buf, e.at = e.buf[:0], e.at[:0]
	for _, p := range events {
		e.buf = append(e.buf, "data: "...)
		e.buf = append(e.buf, p...)
		e.buf = append(e.buf, "\n\n"...)
		e.at = append(e.at, len(e.buf))
	}
	e.chunk = len(e.buf)
	return e.write(e.buf)
}

// eventMarks is where each event of the last Data call ended in the chunk
// it wrote, so that a connection counting what its client acknowledged
// can tell it of each event rather than of the whole write.
type eventMarks struct {
	at    []int // each event's end in the chunk
	chunk int   // the chunk's length; 0 when the call wrote none
}

// ends appends the connection's byte count at each event's end, written
// being the count once the chunk went out: the chunk's data is followed
// by nothing but its CRLF.
func (m *eventMarks) ends(dst []int64, written int64) []int64 {
	if m.chunk == 0 {
		return dst
	}
	start := written - int64(len("\r\n")) - int64(m.chunk)
	for _, at := range m.at {
		dst = append(dst, start+int64(at))
	}
	return dst
}

func (e *sse) Comment(text string) error {
	e.buf = append(append(append(e.buf[:0], ": "...), text...), "\n\n"...)
	return e.write(e.buf)
}

// Fail sends an error after the response has started, then ends it.
func (e *sse) Fail(err error) error {
	return e.Data(inReplyError(err, formStreamEvent), []byte("[DONE]"))
}

// ackedSSE is sse on a connection that counts what its client
// acknowledged.
type ackedSSE struct {
	sse
	conn *gatedConn
}

func (e *ackedSSE) Ends(dst []int64) []int64 { return e.ends(dst, e.conn.Written()) }
func (e *ackedSSE) Delivered() int64         { return e.conn.Acknowledged() }

// lateWriter is the rest of a non-streaming reply that started before its
// answer, to keep the connection alive: newlines, then the answer or the
// failure in the form of its route.
type lateWriter struct {
	*chunks
	form errorForm
	fail func(*api.Error) []byte // a failure's body, when set, instead of form's
}

func (l *lateWriter) KeepAlive() error { return l.write([]byte("\n")) }

func (l *lateWriter) Answer(body []byte) error { return l.write(body) }
func (l *lateWriter) Fail(err error) error {
	if l.fail != nil {
		return l.write(l.fail(asAPIError(err, "")))
	}
	return l.write(inReplyError(err, l.form))
}
