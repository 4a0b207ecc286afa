package relay

import (
	"errors"
	"net/http"
	"time"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
)

// Reply is a non-streaming reply: complete, or started before its answer
// to keep the connection alive (Late set).
type Reply struct {
	// Worker served the reply; for a late one, the worker serving it when
	// it started, nil while the request still waits for one.
	Worker *fleet.WorkerInfo
	// ServerTiming is the Server-Timing header of a complete reply.
	ServerTiming string
	ContentType  string
	Body         []byte
	// Late, when set, is the rest of a reply whose answer is not there
	// yet: the transport starts a 200 JSON reply and hands its body to it.
	Late *Late
}

// LateWriter is where the rest of a reply that started before its answer
// goes. Each call writes at once; an error means the client is gone.
type LateWriter interface {
	// KeepAlive sends something JSON ignores, such as a newline.
	KeepAlive() error
	// Answer sends the answer and ends the reply.
	Answer(body []byte) error
	// Fail sends the failure as the reply's body and ends it.
	Fail(err error) error
}

// Late is the rest of a reply that started before its answer.
type Late struct {
	c    *Call
	done <-chan unaryResult
}

// unaryResult is a non-streaming answer: the body and its content type,
// or the error to answer with.
type unaryResult struct {
	contentType string
	body        []byte
	err         error
	// late is instead the word that the answer is late (see Unary).
	late bool
}

// Unary runs a non-streaming request. Nothing reaches the client until the
// answer is complete, so every failure another worker may not share is
// retried there. An answer still missing after KeepAliveAfter starts the
// reply anyway (Reply.Late): the connection is kept alive with whitespace,
// which JSON allows before a value, and a late failure arrives as a 200
// whose body is the error object.
//
// A reply that may not begin before the answer does (raw audio, subtitle
// files: Request.NoKeepAlive) waits for it however long it takes instead.
// The error is the failure to answer with when nothing was sent.
func (c *Call) Unary() (*Reply, error) {
	// One channel brings the answer and, first if the answer is late, a
	// timer's word that the reply must start without it: a receive costs
	// a request less than a select on the answer and a timer's channel,
	// whose timer enters the heap and leaves it each time the select
	// blocks. Room for both, so that neither sender waits.
	done := make(chan unaryResult, 2)
	go func() {
		a := c.exchange()
		if a.err != nil && c.req.Shape != nil {
			a.err = c.req.Shape(a.err)
		}
		done <- a
	}()
	if !c.req.NoKeepAlive {
		timer := time.AfterFunc(c.rl.timing.KeepAliveAfter, func() { done <- unaryResult{late: true} })
		defer timer.Stop()
	}
	if a := <-done; !a.late {
		c.done(a.err)
		if a.err != nil {
			return nil, a.err
		}
		w := c.lease.Worker
		return &Reply{Worker: &w, ServerTiming: c.serverTiming(), ContentType: a.contentType, Body: a.body}, nil
	}
	// The timer's word came first, and it comes once: what the late reply
	// receives next is the answer.
	return &Reply{Worker: c.Worker(), ContentType: "application/json", Late: &Late{c: c, done: done}}, nil
}

// Write keeps the connection alive until the answer comes, then writes
// it. The transport calls it once, on the goroutine that writes the body.
// The first keep-alive goes at once: the reply's status and headers go out
// with it, when the client was told to expect them (KeepAliveAfter), not a
// period later.
func (l *Late) Write(w LateWriter) {
	c := l.c
	tick := time.NewTicker(c.rl.timing.KeepAliveEvery)
	defer tick.Stop()
	gone := false
	if w.KeepAlive() != nil {
		gone = true
		c.cancel()
	}
	for {
		select {
		case a := <-l.done:
			c.done(a.err)
			if gone {
				return
			}
			if a.err != nil {
				_ = w.Fail(a.err)
			} else {
				_ = w.Answer(a.body)
			}
			return
		case <-tick.C:
			if gone {
				continue
			}
			if w.KeepAlive() != nil {
				gone = true
				c.cancel() // the exchange stops and reports 499
			}
		}
	}
}

// Abandon ends a late reply whose body will never be written, because the
// connection failed or the server shut down first.
func (l *Late) Abandon() {
	l.c.cancel()
	<-l.done
	l.c.done(ErrClientGone)
}

// exchange runs the request on workers until one answers or none is left,
// and returns the reply to send.
func (c *Call) exchange() unaryResult {
	err := c.acquire()
	if err == nil {
		err = c.openOrMove()
	}
	for err == nil {
		res, body, rerr := c.collect()
		switch {
		case c.ctx.Err() != nil:
			c.clientGone()
			return unaryResult{err: c.ctxError()}
		case errors.Is(rerr, errLate):
			err = c.moveLate()
			continue
		case rerr != nil:
			if c.failed(fleet.Failed, c.lostError(rerr)) {
				err = c.retry()
				continue
			}
			return unaryResult{err: c.lastErr}
		case res.Status != http.StatusOK && retryable(res) && c.failed(outcome(res), c.resultError(res)):
			err = c.retry()
			continue
		}
		if err := c.settle(res); err != nil {
			return unaryResult{err: err}
		}
		if c.req.Render != nil {
			out, err := c.req.Render(Answer{Body: body, Worker: c.lease.Worker, Svc: c.svcIdentity()})
			c.out = out
			return unaryResult{contentType: out.ContentType, body: out.Body, err: err}
		}
		if c.req.E2E {
			out, err := c.sealedReply(body)
			return unaryResult{contentType: e2ee.ContentType, body: out, err: err}
		}
		out, err := c.completeBody(body)
		if err == nil && c.req.Translate != nil {
			if out, err = c.req.Translate(out); err != nil {
				err = &api.Error{Kind: api.KindUpstream, Code: api.CodeBadWorkerReply,
					Message: "the worker's answer could not be translated", Err: err}
			}
		}
		return unaryResult{contentType: "application/json", body: out, err: err}
	}
	return unaryResult{err: err}
}

// collect gathers the answer of the request opened on the leased worker.
func (c *Call) collect() (*api.Result, []byte, error) {
	var body []byte
	for {
		typ, msg, err := c.readMessage(0, len(body) == 0)
		if err != nil {
			return nil, nil, err
		}
		if typ == link.TypeEnd {
			return parseResult(msg), body, nil
		}
		if body = append(body, msg...); len(body) > maxResponse {
			c.st.Reset()
			return &api.Result{Status: http.StatusBadGateway, Error: &api.ResultError{Message: errTooLarge.Error(), Type: api.TypeUpstream}}, nil, nil
		}
	}
}
