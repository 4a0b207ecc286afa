package relay

import (
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
)

// EventWriter is where a stream's events go once its response has
// started. Each call writes at once; an error means the client is gone.
type EventWriter interface {
	// Data sends events, in order, as one write.
	Data(events ...[]byte) error
	// Comment sends a comment, which clients ignore (a keep-alive).
	Comment(text string) error
	// Fail sends the failure as the stream's last event and ends it.
	Fail(err error) error
}

// Stream is a streaming request whose response may start. The transport
// starts an event stream (naming Worker when set) and calls Write once, on
// the goroutine that writes the body, or Abandon if it never will.
type Stream struct {
	// Worker serves the stream; nil while it still waits for one, in the
	// stream itself.
	Worker *fleet.WorkerInfo

	c       *Call
	first   firstOutput
	pending <-chan error
	ran     bool
}

// firstOutput is what begin found: nothing yet, an event, or the end.
type firstOutput struct {
	typ link.Type
	msg []byte
}

// Stream begins a streaming request. Anything known up front (an unknown
// model, no worker, a pinned worker that cannot serve, an engine that
// refuses at once) is returned as the error, for a plain HTTP answer. When
// a worker is free within WorkerWait the stream names it; otherwise it
// starts without a worker and keeps waiting inside the stream, where a 429
// or 503 arrives as its failure.
func (c *Call) Stream() (*Stream, error) {
	acquired := make(chan error, 1)
	go func() { acquired <- c.acquire() }()
	s := &Stream{c: c, pending: acquired}
	wait := time.NewTimer(c.rl.timing.WorkerWait)
	defer wait.Stop()
	select {
	case err := <-acquired:
		s.pending = nil
		if err == nil {
			s.first, err = c.begin()
		}
		if err != nil {
			c.done(err)
			return nil, err
		}
		w := c.lease.Worker
		s.Worker = &w
	case <-wait.C:
	}
	return s, nil
}

// Write relays the stream to w until it ends.
func (s *Stream) Write(w EventWriter) {
	s.ran = true
	c := s.c
	defer func() {
		// A panic here would otherwise lose the request's record; it is
		// recorded, the bug logged, and the panic goes on to the transport.
		if p := recover(); p != nil {
			c.rl.log.Error("stream relay panicked", "panic", p, "stack", string(debug.Stack()))
			c.done(&api.Error{Kind: api.KindInternal, Message: "Internal error while streaming",
				Err: fmt.Errorf("panic: %v", p)})
			panic(p)
		}
	}()
	out := &events{w: w}
	out.receipts.d, _ = w.(Delivery)
	err := c.pump(out, s.first, s.pending)
	if err == ErrClientGone {
		// Billed for what the client received, not what it was sent.
		c.received = out.received()
		c.cutShort = true
	}
	c.done(err)
}

// Abandon ends a stream whose body was never written, because the
// connection failed or the server shut down first: the request is
// abandoned like one whose client went away.
func (s *Stream) Abandon() {
	if s.ran {
		return
	}
	s.ran = true
	c := s.c
	c.cancel()
	if s.pending != nil {
		<-s.pending // returns at once after the cancel
	}
	c.clientGone()
	c.done(ErrClientGone)
}

// events is an EventWriter that remembers a departed client, so the
// relay checks once where it matters rather than after every write, and
// what text its client received.
type events struct {
	w    EventWriter
	gone bool
	receipts
}

func (e *events) data(b ...[]byte) {
	if !e.gone && e.w.Data(b...) != nil {
		e.gone = true
	}
}

func (e *events) comment(text string) {
	if !e.gone && e.w.Comment(text) != nil {
		e.gone = true
	}
}

func (e *events) fail(err error) {
	if !e.gone && e.w.Fail(err) != nil {
		e.gone = true
	}
}

// begin opens the request on the leased worker and waits up to FirstWait
// for its first output, moving to another worker on failures before any.
func (c *Call) begin() (firstOutput, error) {
	err := c.openOrMove()
	for err == nil {
		typ, msg, rerr := c.readMessage(c.rl.timing.FirstWait, true)
		switch {
		case errors.Is(rerr, errIdle):
			return firstOutput{}, nil
		case errors.Is(rerr, errLate):
			if err = c.moveLate(); err != nil {
				return firstOutput{}, err
			}
			continue
		case rerr != nil && c.ctx.Err() != nil:
			c.clientGone()
			return firstOutput{}, c.ctxError()
		case rerr != nil:
			if !c.failed(fleet.Failed, c.lostError(rerr)) {
				return firstOutput{}, c.lastErr
			}
		case typ == link.TypeEnd:
			res := parseResult(msg)
			if res.Status == http.StatusOK {
				return firstOutput{typ: typ, msg: msg}, nil
			}
			if !retryable(res) || !c.failed(outcome(res), c.resultError(res)) {
				return firstOutput{}, c.settle(res)
			}
		default:
			c.lease.Streamed()
			return firstOutput{typ: typ, msg: msg}, nil
		}
		err = c.retry()
	}
	return firstOutput{}, err
}

// pump relays the stream to the client until the worker's result, then
// writes the final chunks. A worker lost before any output is replaced.
// It returns what the client was answered with, nil on success.
func (c *Call) pump(out *events, first firstOutput, pending <-chan error) error {
	every := c.rl.timing.KeepAliveEvery
	wait := every
	if first.typ == 0 {
		// Nothing to send yet (the request waits for a worker or for its
		// first output): a comment now puts the status and headers before
		// the client at once, not with the first keep-alive, which comes
		// a period after the request as ever.
		if out.comment("keep-alive"); out.gone {
			c.cancel()
		}
		wait = max(every-time.Since(c.started), time.Millisecond)
	}
	if pending != nil {
		if err := c.await(out, pending, wait); err != nil {
			return err
		}
		wait = every
	}
	wrote := false
	next := first
	for {
		typ, msg := next.typ, next.msg
		next = firstOutput{}
		if typ == 0 {
			var err error
			typ, msg, err = c.readMessage(wait, !wrote)
			wait = every
			switch {
			case errors.Is(err, errIdle):
				if out.comment("keep-alive"); out.gone {
					if c.sealedFinal && c.finishSealed() {
						return nil
					}
					c.clientGone()
					return ErrClientGone
				}
				continue
			case errors.Is(err, errLate):
				if err := c.moveLate(); err != nil {
					out.fail(err)
					return err
				}
				continue
			case err != nil && c.ctx.Err() != nil && c.sealedFinal && c.finishSealed():
				// The client had the whole sealed answer and left before
				// the worker's result came: not a departure mid-answer.
				return nil
			case err != nil && c.ctx.Err() != nil:
				c.clientGone()
				err = c.ctxError()
				out.fail(err)
				return err
			case err != nil:
				cause := c.lostError(err)
				if wrote {
					c.lease.Release(fleet.Failed)
				} else if c.failed(fleet.Failed, cause) {
					if err := c.retry(); err != nil {
						out.fail(err)
						return err
					}
					continue
				}
				out.fail(cause)
				return cause
			}
		}
		if typ != link.TypeEnd {
			if !wrote {
				c.lease.Streamed()
			}
			if !c.inspect(msg) {
				if err := c.garbled(wrote); err != nil {
					out.fail(err)
					return err
				}
				continue
			}
			batch, chars := append(c.batch[:0], msg), append(c.batchChars[:0], c.outChars)
			garbled := false
			// What arrived together leaves together: the chunks the link
			// delivered with this one go out in its write, which costs the
			// client no time and the gateway a system call a chunk.
			for len(batch) < maxBatch {
				f, ok := c.st.TryRecv()
				if !ok {
					break
				}
				if f.Type != link.TypeData {
					next = firstOutput{typ: f.Type, msg: f.Payload}
					break
				}
				if garbled = !c.inspect(f.Payload); garbled {
					break
				}
				batch, chars = append(batch, f.Payload), append(chars, c.outChars)
			}
			out.data(batch...)
			clear(batch)
			c.batch, c.batchChars = batch[:0], chars[:0]
			wrote = true
			if out.gone {
				c.clientGone()
				return ErrClientGone
			}
			out.wrote(chars)
			if garbled {
				err := c.garbled(true)
				out.fail(err)
				return err
			}
			continue
		}
		res := parseResult(msg)
		if !wrote && res.Status != http.StatusOK && retryable(res) && c.failed(outcome(res), c.resultError(res)) {
			if err := c.retry(); err != nil {
				out.fail(err)
				return err
			}
			continue
		}
		if err := c.settle(res); err != nil {
			out.fail(err)
			return err
		}
		finals := append(c.finalChunks(), []byte("[DONE]"))
		// The row is queued before the client can see the end, so a read
		// of the usage log that follows the stream finds it.
		c.done(nil)
		out.data(finals...)
		return nil
	}
}

// finishSealed records a sealed stream whose client left once it had the
// final chunk with the worker's result, when that comes in time and is a
// success; false leaves it to be recorded as the client's departure.
func (c *Call) finishSealed() bool {
	msg := c.sealedEnd()
	if msg == nil {
		return false
	}
	res := parseResult(msg)
	if res.Status != http.StatusOK || c.settle(res) != nil {
		return false
	}
	c.done(nil)
	return true
}

// maxBatch bounds the chunks a stream writes to its client at once.
const maxBatch = 64

// await waits in the stream for the worker the request is queued for,
// with keep-alive comments, the first after first, then opens the request
// on it.
func (c *Call) await(out *events, pending <-chan error, first time.Duration) error {
	tick := time.NewTicker(first)
	defer tick.Stop()
	every := c.rl.timing.KeepAliveEvery
	for {
		select {
		case err := <-pending:
			if err == nil {
				err = c.openOrMove()
			}
			if err != nil {
				out.fail(err)
			}
			return err
		case <-tick.C:
			tick.Reset(every)
			if out.comment("keep-alive"); out.gone {
				// The acquisition sees the cancel and returns at once.
				c.cancel()
			}
		}
	}
}

// openOrMove opens the request on the leased worker, moving to another
// when that fails.
func (c *Call) openOrMove() error {
	for {
		err := c.open()
		if err == nil {
			return nil
		}
		if c.ctx.Err() != nil {
			// The client left (or time ran out); the worker is not to blame.
			c.clientGone()
			return c.ctxError()
		}
		if !c.failed(fleet.Failed, c.lostError(err)) {
			return c.lastErr
		}
		if err := c.acquire(); err != nil {
			return err
		}
	}
}

// garbled ends the worker's stream that sent a chunk that is not JSON, a
// chunk no client could read: moved to another worker when the client has
// seen nothing yet (nil once it is), failed as a response partly lost
// otherwise.
func (c *Call) garbled(wrote bool) error {
	if c.ctx.Err() != nil {
		// The client left (or time ran out) meanwhile: that is the end
		// the row records, not the worker's fault.
		c.clientGone()
		return c.ctxError()
	}
	c.st.Reset()
	cause := &api.Error{Kind: api.KindUpstream, Code: api.CodeBadWorkerReply, Message: "Worker " + c.lease.Worker.Name + " (" + c.lease.Worker.ID +
		") sent a chunk that is not JSON; part of the response was lost in transit, retry"}
	if wrote {
		c.lease.Release(fleet.Failed)
		return cause
	}
	if !c.failed(fleet.Failed, cause) {
		return cause
	}
	return c.retry()
}

// retry moves a stream that has sent nothing yet to another worker.
func (c *Call) retry() error {
	if err := c.acquire(); err != nil {
		return err
	}
	return c.openOrMove()
}
