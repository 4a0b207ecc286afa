package server

import (
	"bufio"
	"net/http"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/e2ee"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
)

// unary runs a non-streaming request. Nothing reaches the client until
// the answer is complete, so every failure another worker may not share is
// retried there. An answer still missing after KeepAliveAfter starts the
// reply anyway (200) and keeps the connection alive with whitespace, which
// JSON allows before a value; a late failure then arrives as a 200 whose
// body is the error object.
//
// A reply that may not begin before the answer does (raw audio, subtitle
// files: r.noKeepAlive) waits for it however long it takes instead.
func (r *relay) unary(c *call) error {
	done := make(chan reply, 1)
	go func() {
		a := r.exchange()
		if a.err != nil && r.shape != nil {
			a.err = r.shape(a.err)
		}
		done <- a
	}()
	var keepAlive <-chan time.Time
	if !r.noKeepAlive {
		timer := time.NewTimer(r.s.timing.KeepAliveAfter)
		defer timer.Stop()
		keepAlive = timer.C
	}
	select {
	case a := <-done:
		r.done(a.err)
		if a.err != nil {
			return a.err
		}
		h := &c.ctx.Response.Header
		workerHeaders(h, r.lease.Worker)
		if st := r.serverTiming(); st != "" {
			h.Set("Server-Timing", st)
		}
		c.ctx.SetStatusCode(http.StatusOK)
		c.ctx.SetContentType(a.contentType)
		c.ctx.SetBody(a.body)
		return nil
	case <-keepAlive:
	}
	c.ctx.SetStatusCode(http.StatusOK)
	c.ctx.SetContentType("application/json")
	if w := r.current.Load(); w != nil {
		workerHeaders(&c.ctx.Response.Header, *w)
	}
	every := r.s.timing.KeepAliveEvery
	c.ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		tick := time.NewTicker(every)
		defer tick.Stop()
		gone := false
		for {
			select {
			case a := <-done:
				r.done(a.err)
				if !gone {
					if a.err != nil {
						late := lateErrorBody
						if r.lateBody != nil {
							late = r.lateBody
						}
						_, _ = w.Write(late(a.err))
					} else {
						_, _ = w.Write(a.body)
					}
					_ = w.Flush()
				}
				return
			case <-tick.C:
				if gone {
					continue
				}
				_, _ = w.WriteString("\n")
				if w.Flush() != nil {
					gone = true
					r.cancel() // the exchange stops and reports 499
				}
			}
		}
	})
	return nil
}

// reply is a non-streaming answer: the body and its content type, or the
// error to answer with.
type reply struct {
	contentType string
	body        []byte
	err         error
}

// exchange runs the request on workers until one answers or none is left,
// and returns the reply to send.
func (r *relay) exchange() reply {
	for {
		if err := r.acquire(); err != nil {
			return reply{err: err}
		}
		res, body, err := r.collect()
		switch {
		case r.ctx.Err() != nil:
			r.clientGone()
			return reply{err: r.ctxError()}
		case err != nil:
			if r.failed(fleet.Failed, r.lostError(err)) {
				continue
			}
			return reply{err: r.lastErr}
		case res.Status != http.StatusOK && retryable(res) && r.failed(outcome(res), resultError(res)):
			continue
		}
		if err := r.settle(res); err != nil {
			return reply{err: err}
		}
		if r.render != nil {
			ctype, out, err := r.render(body)
			return reply{contentType: ctype, body: out, err: err}
		}
		if r.e2e {
			out, err := r.sealedReply(body)
			return reply{contentType: e2ee.ContentType, body: out, err: err}
		}
		out, err := r.completeBody(body)
		return reply{contentType: "application/json", body: out, err: err}
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
			return &api.Result{Status: http.StatusBadGateway, Error: &api.ResultError{Message: errTooLarge.Error(), Type: api.TypeUpstream}}, nil, nil
		}
	}
}
