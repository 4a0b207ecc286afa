package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
)

const (
	// maxAttempts bounds how many workers one request is tried on.
	maxAttempts = 3
	// firstWait is how long a streaming request waits for its first output
	// before the response starts, so that quick failures are still plain
	// HTTP errors.
	firstWait = time.Second
	// keepAlive is the gap after which a stream gets a comment line.
	keepAlive = 15 * time.Second
	// maxResponse bounds a non-streaming answer.
	maxResponse = 64 << 20
)

func (s *Server) chatCompletions(c *call) error { return s.relayRequest(c, api.KindChat, api.CapChat) }
func (s *Server) embeddings(c *call) error {
	return s.relayRequest(c, api.KindEmbeddings, api.CapEmbeddings)
}

// relay is one inference request on its way through a worker.
type relay struct {
	s         *Server
	kind      string
	need      fleet.Need
	header    []byte
	body      []byte
	requestID string
	stream    bool

	// ctx ends when the client goes away or the request is over.
	ctx    context.Context
	cancel context.CancelFunc
	watch  *watchEntry

	lease    *fleet.Lease
	st       *link.Stream
	attempts int
	// lastErr is what the last worker failed with, answered when no other
	// worker is left to try.
	lastErr error
}

func (s *Server) relayRequest(c *call, kind, capability string) error {
	body := append([]byte(nil), c.ctx.PostBody()...)
	var head struct {
		Model    json.RawMessage   `json:"model"`
		Stream   json.RawMessage   `json:"stream"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := decodeLenient(body, &head); err != nil {
		return err
	}
	var v api.Validator
	var model string
	if len(head.Model) == 0 || string(head.Model) == "null" {
		v.Add("model", api.FieldMissing, "required")
	} else if json.Unmarshal(head.Model, &model) != nil || model == "" {
		v.Add("model", api.FieldWrongType, "expected a model id")
	}
	stream := false
	if len(head.Stream) > 0 && string(head.Stream) != "null" {
		if json.Unmarshal(head.Stream, &stream) != nil {
			v.Add("stream", api.FieldWrongType, "expected true or false")
		}
	}
	if err := v.Err(); err != nil {
		return err
	}
	hdr, _ := json.Marshal(api.LinkRequest{RequestID: c.requestID, Kind: kind, Model: model, Stream: stream && kind == api.KindChat})
	r := &relay{
		s: s, kind: kind, header: hdr, body: body, requestID: c.requestID, stream: stream && kind == api.KindChat,
		need: fleet.Need{
			OrgID: c.principal.OrgID, Model: model, Capability: capability,
			Pin: string(c.ctx.Request.Header.Peek("X-Svc-Worker-Id")), Affinity: affinity(model, head.Messages),
		},
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.watch = s.watch.add(c.ctx.Conn(), r.cancel)
	if !r.stream {
		defer r.finish()
		return r.unary(c)
	}
	return r.startStream(c)
}

// decodeLenient reads a body whose unknown fields are forwarded: only
// syntax and the types of the fields read here are checked.
func decodeLenient(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax), len(body) == 0:
			return decodeJSON(body, v) // the strict decoder words the 400
		case errors.As(err, &typ):
			field := typ.Field
			if field == "" {
				field = "body"
			}
			return api.Invalid(api.FieldError{Field: field, Type: api.FieldWrongType, Message: "expected " + describe(typ.Type)})
		default:
			return api.BadRequest("Malformed JSON: %v", err)
		}
	}
	return nil
}

// affinity names a conversation by its model and opening messages, which
// later turns repeat: they then prefer the worker that may hold the prefix
// in its cache.
func affinity(model string, messages []json.RawMessage) string {
	if len(messages) == 0 {
		return ""
	}
	h := fnv.New64a()
	h.Write([]byte(model))
	for _, m := range messages[:min(2, len(messages))] {
		h.Write([]byte{0})
		h.Write(m)
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

func (r *relay) finish() {
	r.s.watch.remove(r.watch)
	r.cancel()
}

// acquire gets a slot on a worker not yet tried.
func (r *relay) acquire() error {
	r.attempts++
	l, err := r.s.fleet.Acquire(r.ctx, r.need)
	if errors.Is(err, fleet.ErrTriedAll) && r.lastErr != nil {
		return r.lastErr
	}
	if err != nil {
		return err
	}
	r.lease = l
	r.st = nil
	return nil
}

// open starts the request on the leased worker.
func (r *relay) open() error {
	st, err := r.lease.Open(r.ctx, r.header, r.body)
	if err != nil {
		return err
	}
	r.st = st
	return nil
}

// failed releases the lease after a failure with cause and reports
// whether another worker may be tried.
func (r *relay) failed(o fleet.Outcome, cause error) bool {
	r.lastErr = cause
	r.lease.Release(o)
	r.need.Exclude = append(r.need.Exclude, r.lease.Worker.ID)
	return r.attempts < maxAttempts && r.ctx.Err() == nil
}

// lostError is the 503 for a request whose worker went away.
func (r *relay) lostError(err error) error {
	var lost *fleet.LostError
	name := r.lease.Worker.Name + " (" + r.lease.Worker.ID + ")"
	if errors.As(err, &lost) {
		return &api.Error{Status: http.StatusServiceUnavailable, Code: "worker_lost", RetryAfter: time.Second,
			Message: "Worker " + name + " disconnected while handling the request and did not return in time; retry"}
	}
	return &api.Error{Status: http.StatusServiceUnavailable, Code: "worker_lost", RetryAfter: time.Second,
		Message: "The response from worker " + name + " could not be relayed; retry", Err: err}
}

// resultError is the error for a worker's failed result.
func resultError(res *api.Result) error {
	e := &api.Error{Status: res.Status, Message: "the worker failed"}
	if res.Error != nil {
		e.Message, e.Type, e.Code = res.Error.Message, res.Error.Type, res.Error.Code
	}
	if e.Status < 400 || e.Status > 599 {
		e.Status = http.StatusBadGateway
	}
	if e.Status == http.StatusServiceUnavailable {
		e.RetryAfter = time.Second
	}
	return e
}

// outcome judges a result for the worker's health: engine and worker
// failures count, the client's own mistakes and cancels do not.
func outcome(res *api.Result) fleet.Outcome {
	switch {
	case res.Status == http.StatusOK:
		return fleet.Succeeded
	case res.Retryable || res.Status == http.StatusInternalServerError || res.Status == http.StatusBadGateway ||
		res.Status == http.StatusServiceUnavailable || res.Status == http.StatusGatewayTimeout:
		return fleet.Failed
	}
	return fleet.Neutral
}

// retryable reports whether a failed result may be tried on another worker.
// Nothing has reached the client, so any failure another worker may not
// share qualifies; lasting answers (4xx, 501, 507) do not.
func retryable(res *api.Result) bool {
	switch res.Status {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return res.Retryable
}

func parseResult(msg []byte) *api.Result {
	var res api.Result
	if err := json.Unmarshal(msg, &res); err != nil || res.Status == 0 {
		return &api.Result{Status: http.StatusBadGateway, Error: &api.ResultError{
			Message: "the worker's result was lost in transit", Type: api.TypeUpstream}}
	}
	return &res
}

// readMessage reads one whole message, waiting at most wait for it to
// begin (0 waits as long as ctx lives). errIdle means nothing came.
func (r *relay) readMessage(wait time.Duration) (link.Type, []byte, error) {
	ctx := r.ctx
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(r.ctx, wait)
		defer cancel()
	}
	f, err := r.st.Recv(ctx)
	if err != nil {
		if wait > 0 && errors.Is(err, context.DeadlineExceeded) && r.ctx.Err() == nil {
			return 0, nil, errIdle
		}
		return 0, nil, err
	}
	if !f.More() {
		return f.Type, f.Payload, nil
	}
	msg := append([]byte(nil), f.Payload...)
	for f.More() {
		// The rest of a started message follows at once; do not cut it.
		if f, err = r.st.Recv(r.ctx); err != nil {
			return 0, nil, err
		}
		msg = append(msg, f.Payload...)
		if len(msg) > maxResponse {
			return 0, nil, errTooLarge
		}
	}
	return f.Type, msg, nil
}

var (
	errIdle     = errors.New("no output yet")
	errTooLarge = errors.New("the worker's answer is larger than the gateway relays")
)

// unary runs a non-streaming request: nothing reaches the client until the
// answer is complete, so every failure another worker may not share is
// retried there.
func (r *relay) unary(c *call) error {
	for {
		if err := r.acquire(); err != nil {
			return err
		}
		res, body, err := r.collect()
		switch {
		case r.ctx.Err() != nil:
			r.clientGone()
			return &api.Error{Status: 499, Message: "Client disconnected"}
		case err != nil:
			if r.failed(fleet.Failed, r.lostError(err)) {
				continue
			}
			return r.lastErr
		case res.Status != http.StatusOK:
			if retryable(res) && r.failed(outcome(res), resultError(res)) {
				continue
			}
			r.lease.Release(outcome(res))
			return resultError(res)
		}
		r.lease.Release(fleet.Succeeded)
		r.workerHeaders(&c.ctx.Response.Header)
		c.ctx.SetStatusCode(http.StatusOK)
		c.ctx.SetContentType("application/json")
		c.ctx.SetBody(body)
		return nil
	}
}

// collect runs the request on the leased worker and gathers its answer.
func (r *relay) collect() (*api.Result, []byte, error) {
	if err := r.open(); err != nil {
		return nil, nil, err
	}
	var body []byte
	for {
		typ, msg, err := r.readMessage(0)
		if err != nil {
			return nil, nil, err
		}
		if typ == link.TypeEnd {
			return parseResult(msg), body, nil
		}
		if body = append(body, msg...); len(body) > maxResponse {
			r.st.Reset()
			return &api.Result{Status: http.StatusBadGateway, Error: &api.ResultError{Message: errTooLarge.Error()}}, nil, nil
		}
	}
}

// workerHeaders names the serving worker; a name that is not ASCII is
// percent-encoded with the UTF-8” prefix.
func (r *relay) workerHeaders(h *fasthttp.ResponseHeader) {
	h.Set("X-Worker-Id", r.lease.Worker.ID)
	h.Set("X-Worker-Name", headerName(r.lease.Worker.Name))
}

func headerName(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return "UTF-8''" + url.PathEscape(name)
		}
	}
	return name
}

// startStream finds a worker and waits briefly for its first output, so
// that everything known up front is a plain HTTP error; then the response
// starts and the rest is relayed by the stream writer.
func (r *relay) startStream(c *call) error {
	first, err := r.begin()
	if err != nil {
		r.finish()
		return err
	}
	h := &c.ctx.Response.Header
	c.ctx.SetStatusCode(http.StatusOK)
	h.SetContentType("text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	r.workerHeaders(h)
	c.ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer r.finish()
		r.pump(w, first)
	})
	return nil
}

// firstOutput is what begin found: nothing yet, an event, or the end.
type firstOutput struct {
	typ link.Type
	msg []byte
}

func (r *relay) begin() (firstOutput, error) {
	for {
		if err := r.acquire(); err != nil {
			return firstOutput{}, err
		}
		if err := r.open(); err != nil {
			if r.failed(fleet.Failed, r.lostError(err)) {
				continue
			}
			return firstOutput{}, r.lastErr
		}
		typ, msg, err := r.readMessage(firstWait)
		switch {
		case errors.Is(err, errIdle):
			return firstOutput{}, nil
		case err != nil && r.ctx.Err() != nil:
			r.st.Reset()
			r.lease.Release(fleet.Neutral)
			return firstOutput{}, &api.Error{Status: 499, Message: "Client disconnected"}
		case err != nil:
			if r.failed(fleet.Failed, r.lostError(err)) {
				continue
			}
			return firstOutput{}, r.lastErr
		case typ == link.TypeEnd:
			res := parseResult(msg)
			if res.Status == http.StatusOK {
				return firstOutput{typ: typ, msg: msg}, nil
			}
			if retryable(res) && r.failed(outcome(res), resultError(res)) {
				continue
			}
			r.lease.Release(outcome(res))
			return firstOutput{}, resultError(res)
		default:
			return firstOutput{typ: typ, msg: msg}, nil
		}
	}
}

// sse writes server-sent events and notices a departed client.
type sse struct {
	w    *bufio.Writer
	gone bool
}

func (e *sse) data(b []byte) {
	if e.gone {
		return
	}
	_, _ = e.w.WriteString("data: ")
	_, _ = e.w.Write(b)
	_, _ = e.w.WriteString("\n\n")
	e.gone = e.w.Flush() != nil
}

func (e *sse) comment(text string) {
	if e.gone {
		return
	}
	_, _ = e.w.WriteString(": " + text + "\n\n")
	e.gone = e.w.Flush() != nil
}

// errorFrame sends an error after the response has started, then ends it.
func (e *sse) errorFrame(err error) {
	var ae *api.Error
	if !errors.As(err, &ae) {
		ae = &api.Error{Status: http.StatusBadGateway, Message: err.Error()}
	}
	payload := map[string]any{"message": ae.Message, "type": ae.ErrorType(), "code": ae.Code}
	if ae.Code == "" {
		payload["code"] = strconv.Itoa(ae.Status)
	}
	if ae.RetryAfter > 0 {
		payload["retry_after"] = int(ae.RetryAfter.Round(time.Second) / time.Second)
	}
	if ae.Capacity {
		payload["queue_depth"] = ae.QueueDepth
	}
	b, _ := json.Marshal(map[string]any{"error": payload})
	e.data(b)
	e.data([]byte("[DONE]"))
}

// pump relays the stream to the client until the worker's result, then
// ends the response. A worker lost before any output is replaced.
func (r *relay) pump(w *bufio.Writer, first firstOutput) {
	out := &sse{w: w}
	wrote := false
	chunkID := ""
	next := first
	for {
		typ, msg := next.typ, next.msg
		next = firstOutput{}
		if typ == 0 {
			var err error
			typ, msg, err = r.readMessage(keepAlive)
			switch {
			case errors.Is(err, errIdle):
				out.comment("keep-alive")
				if out.gone {
					r.clientGone()
					return
				}
				continue
			case err != nil && r.ctx.Err() != nil:
				r.clientGone()
				return
			case err != nil:
				if !wrote && r.failed(fleet.Failed, r.lostError(err)) {
					if err := r.retry(); err != nil {
						out.errorFrame(err)
						return
					}
					continue
				}
				if wrote {
					r.lease.Release(fleet.Failed)
				}
				out.errorFrame(r.lostError(err))
				return
			}
		}
		if typ != link.TypeEnd {
			if chunkID == "" {
				chunkID = idOf(msg)
			}
			out.data(msg)
			wrote = true
			if out.gone {
				r.clientGone()
				return
			}
			continue
		}
		res := parseResult(msg)
		if res.Status != http.StatusOK {
			if !wrote && retryable(res) && r.failed(outcome(res), resultError(res)) {
				if err := r.retry(); err != nil {
					out.errorFrame(err)
					return
				}
				continue
			}
			r.lease.Release(outcome(res))
			out.errorFrame(resultError(res))
			return
		}
		r.lease.Release(fleet.Succeeded)
		if res.Usage != nil {
			b, _ := json.Marshal(map[string]any{
				"id": chunkID, "object": "chat.completion.chunk", "created": time.Now().Unix(),
				"model": r.need.Model, "choices": []any{}, "usage": res.Usage,
			})
			out.data(b)
		}
		out.data([]byte("[DONE]"))
		return
	}
}

// retry moves a stream that has sent nothing yet to another worker.
func (r *relay) retry() error {
	if err := r.acquire(); err != nil {
		return err
	}
	if err := r.open(); err != nil {
		r.lease.Release(fleet.Failed)
		return r.lostError(err)
	}
	return nil
}

// clientGone stops the worker for a client that left.
func (r *relay) clientGone() {
	if r.st != nil {
		r.st.Reset()
	}
	if r.lease != nil {
		r.lease.Release(fleet.Neutral)
	}
}

// idOf reads the id of a chat.completion.chunk.
func idOf(chunk []byte) string {
	var v struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(chunk, &v)
	if v.ID == "" {
		return fmt.Sprintf("chatcmpl-%d", time.Now().UnixNano())
	}
	return v.ID
}
