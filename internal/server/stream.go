package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
)

// startStream begins a streaming request. Anything known up front (an
// unknown model, no worker, a pinned worker that cannot serve, an engine
// that refuses at once) is a plain HTTP error. When a worker is free
// within WorkerWait the response names it; otherwise the response starts
// without worker headers and the request keeps waiting inside the stream,
// where a 429 or 503 arrives as an error frame.
func (r *relay) startStream(c *call) error {
	acquired := make(chan error, 1)
	go func() { acquired <- r.acquire() }()
	var first firstOutput
	pending := acquired
	select {
	case err := <-acquired:
		pending = nil
		if err == nil {
			first, err = r.begin()
		}
		if err != nil {
			r.done(err)
			return err
		}
	case <-time.After(r.s.timing.WorkerWait):
	}
	h := &c.ctx.Response.Header
	c.ctx.SetStatusCode(http.StatusOK)
	h.SetContentType("text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	if pending == nil {
		workerHeaders(h, r.lease.Worker)
	}
	c.ctx.SetBodyStream(&eventStream{r: r, first: first, pending: pending}, -1)
	return nil
}

// eventStream is a streaming response's body. fasthttp calls its WriteTo
// on the connection's own goroutine, and every Write there goes out at
// once as one chunk; so the stream needs no goroutine, pipe or buffer of
// its own, which matters for a gateway holding thousands of them.
type eventStream struct {
	r       *relay
	first   firstOutput
	pending <-chan error
	ran     bool
}

// SupportsBodyWriteTo tells fasthttp to use WriteTo, never Read.
func (s *eventStream) SupportsBodyWriteTo() bool { return true }

func (s *eventStream) WriteTo(w io.Writer) (int64, error) {
	s.ran = true
	defer func() {
		// fasthttp turns a panic here into a write error; the request
		// is still recorded and the bug logged rather than lost.
		if p := recover(); p != nil {
			s.r.s.log.Error("stream relay panicked", "panic", p, "stack", string(debug.Stack()))
			s.r.done(&api.Error{Status: http.StatusInternalServerError, Message: "Internal error while streaming"})
			panic(p)
		}
	}()
	out := &sse{w: w}
	s.r.done(s.r.pump(out, s.first, s.pending))
	return out.n, out.err
}

func (s *eventStream) Read([]byte) (int, error) {
	return 0, errors.New("an event stream is written with WriteTo")
}

// Close ends a stream whose body was never written, because the
// connection failed or the server shut down first: the request is
// abandoned like one whose client went away.
func (s *eventStream) Close() error {
	if s.ran {
		return nil
	}
	s.ran = true
	r := s.r
	r.cancel()
	if s.pending != nil {
		<-s.pending // returns at once after the cancel
	}
	r.clientGone()
	r.done(errClientGone)
	return nil
}

// firstOutput is what begin found: nothing yet, an event, or the end.
type firstOutput struct {
	typ link.Type
	msg []byte
}

// begin opens the request on the leased worker and waits up to FirstWait
// for its first output, moving to another worker on failures before any.
func (r *relay) begin() (firstOutput, error) {
	err := r.openOrMove()
	for err == nil {
		typ, msg, rerr := r.readMessage(r.s.timing.FirstWait)
		switch {
		case errors.Is(rerr, errIdle):
			return firstOutput{}, nil
		case rerr != nil && r.ctx.Err() != nil:
			r.clientGone()
			return firstOutput{}, r.ctxError()
		case rerr != nil:
			if !r.failed(fleet.Failed, r.lostError(rerr)) {
				return firstOutput{}, r.lastErr
			}
		case typ == link.TypeEnd:
			res := parseResult(msg)
			if res.Status == http.StatusOK {
				return firstOutput{typ: typ, msg: msg}, nil
			}
			if !retryable(res) || !r.failed(outcome(res), resultError(res)) {
				return firstOutput{}, r.settle(res)
			}
		default:
			return firstOutput{typ: typ, msg: msg}, nil
		}
		err = r.retry()
	}
	return firstOutput{}, err
}

// sse writes server-sent events, each in one Write so that each leaves
// as one chunk, and notices a departed client.
type sse struct {
	w    io.Writer
	buf  []byte
	n    int64
	err  error
	gone bool
}

func (e *sse) write(b []byte) {
	if e.gone {
		return
	}
	n, err := e.w.Write(b)
	e.n += int64(n)
	if err != nil {
		e.err, e.gone = err, true
	}
}

func (e *sse) data(b ...[]byte) {
	e.buf = e.buf[:0]
	for _, p := range b {
		e.buf = append(e.buf, "data: "...)
		e.buf = append(e.buf, p...)
		e.buf = append(e.buf, "\n\n"...)
	}
	e.write(e.buf)
}

func (e *sse) comment(text string) {
	e.buf = append(append(append(e.buf[:0], ": "...), text...), "\n\n"...)
	e.write(e.buf)
}

// errorFrame sends an error after the response has started, then ends it.
func (e *sse) errorFrame(err error) {
	e.data(streamErrorPayload(err), []byte("[DONE]"))
}

// streamErrorPayload is the error frame of a stream.
func streamErrorPayload(err error) []byte {
	b, _ := json.Marshal(map[string]any{"error": lateError(asAPIError(err, ""))})
	return b
}

// lateError is the error object of a failure after the response started
// (a stream's error frame, a kept-alive non-streaming reply): message,
// type and code, plus retry_after and queue_depth for a capacity 429.
func lateError(ae *api.Error) map[string]any {
	payload := map[string]any{"message": ae.Message, "type": ae.ErrorType(), "code": ae.Code, "status": ae.Status}
	if ae.Code == "" {
		payload["code"] = strconv.Itoa(ae.Status)
	}
	if ae.RetryAfter > 0 {
		payload["retry_after"] = int((ae.RetryAfter + time.Second - 1) / time.Second)
	}
	if ae.Capacity {
		payload["queue_depth"] = ae.QueueDepth
	}
	return payload
}

// pump relays the stream to the client until the worker's result, then
// writes the final chunks. A worker lost before any output is replaced.
// It returns what the client was answered with, nil on success.
func (r *relay) pump(out *sse, first firstOutput, pending <-chan error) error {
	every := r.s.timing.KeepAliveEvery
	if pending != nil {
		if err := r.await(out, pending, every); err != nil {
			return err
		}
	}
	wrote := false
	next := first
	for {
		typ, msg := next.typ, next.msg
		next = firstOutput{}
		if typ == 0 {
			var err error
			typ, msg, err = r.readMessage(every)
			switch {
			case errors.Is(err, errIdle):
				if out.comment("keep-alive"); out.gone {
					r.clientGone()
					return errClientGone
				}
				continue
			case err != nil && r.ctx.Err() != nil:
				r.clientGone()
				err = r.ctxError()
				out.errorFrame(err)
				return err
			case err != nil:
				cause := r.lostError(err)
				if wrote {
					r.lease.Release(fleet.Failed)
				} else if r.failed(fleet.Failed, cause) {
					if err := r.retry(); err != nil {
						out.errorFrame(err)
						return err
					}
					continue
				}
				out.errorFrame(cause)
				return cause
			}
		}
		if typ != link.TypeEnd {
			r.inspect(msg)
			out.data(msg)
			wrote = true
			if out.gone {
				r.clientGone()
				return errClientGone
			}
			continue
		}
		res := parseResult(msg)
		if !wrote && res.Status != http.StatusOK && retryable(res) && r.failed(outcome(res), resultError(res)) {
			if err := r.retry(); err != nil {
				out.errorFrame(err)
				return err
			}
			continue
		}
		if err := r.settle(res); err != nil {
			out.errorFrame(err)
			return err
		}
		finals := append(r.finalChunks(), []byte("[DONE]"))
		// The row is queued before the client can see the end, so a read
		// of the usage log that follows the stream finds it.
		r.done(nil)
		out.data(finals...)
		return nil
	}
}

// await waits in the stream for the worker the request is queued for,
// with keep-alive comments, then opens the request on it.
func (r *relay) await(out *sse, pending <-chan error, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case err := <-pending:
			if err == nil {
				err = r.openOrMove()
			}
			if err != nil {
				out.errorFrame(err)
			}
			return err
		case <-tick.C:
			if out.comment("keep-alive"); out.gone {
				// The acquisition sees the cancel and returns at once.
				r.cancel()
			}
		}
	}
}

// openOrMove opens the request on the leased worker, moving to another
// when that fails.
func (r *relay) openOrMove() error {
	for {
		err := r.open()
		if err == nil {
			return nil
		}
		if r.ctx.Err() != nil {
			// The client left (or time ran out); the worker is not to blame.
			r.clientGone()
			return r.ctxError()
		}
		if !r.failed(fleet.Failed, r.lostError(err)) {
			return r.lastErr
		}
		if err := r.acquire(); err != nil {
			return err
		}
	}
}

// retry moves a stream that has sent nothing yet to another worker.
func (r *relay) retry() error {
	if err := r.acquire(); err != nil {
		return err
	}
	return r.openOrMove()
}
