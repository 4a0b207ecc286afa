package relay

import (
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
)

// Live is a live transcription on its worker: the client's audio goes to
// the worker as it arrives, and the worker's events come back as it makes
// them, on one link stream. Audio and EndAudio are called by the
// goroutine reading the client, Events by the one writing to it.
type Live struct {
	c           *Call
	bytesPerSec float64
	received    atomic.Int64

	mu      sync.Mutex
	aborted error // why the gateway stopped the session, if it did
}

// Live acquires a worker and opens the session on it. Nothing has reached
// the client yet, so the error is a plain HTTP answer (the call has its
// row); an open that fails is tried on another worker, but once audio
// flows the session stays where it is: the audio is not kept to send
// again. bytesPerSec turns the audio received into the row's seconds.
func (c *Call) Live(bytesPerSec float64) (*Live, error) {
	err := c.acquire()
	for err == nil {
		if err = c.openDuplex(); err == nil {
			break
		}
		if c.ctx.Err() != nil {
			c.clientGone()
			err = c.ctxError()
			break
		}
		if !c.failed(fleet.Failed, c.lostError(err)) {
			err = c.lastErr
			break
		}
		err = c.acquire()
	}
	if err != nil {
		c.done(err)
		return nil, err
	}
	c.lease.Streamed()
	return &Live{c: c, bytesPerSec: bytesPerSec}, nil
}

func (c *Call) openDuplex() error {
	st, err := c.lease.OpenDuplex(c.ctx, c.header)
	if err != nil {
		return err
	}
	c.st = st
	c.openedAt = time.Now()
	return nil
}

// Worker is the worker serving the session.
func (l *Live) Worker() fleet.WorkerInfo { return l.c.lease.Worker }

// Received is the audio received so far, in bytes.
func (l *Live) Received() int64 { return l.received.Load() }

// Audio sends the next piece of the client's audio, blocking while the
// worker is behind. An error means the session is over (the worker
// answered, failed, or the session was stopped): stop sending.
func (l *Live) Audio(p []byte) error {
	l.received.Add(int64(len(p)))
	return l.c.st.SendBody(l.c.ctx, p)
}

// EndAudio tells the worker the audio is over: it sends its final.
func (l *Live) EndAudio() error { return l.c.st.EndBody(l.c.ctx) }

// Abort stops the session with err, the failure to report: the client
// broke the protocol or went over a limit. ErrClientGone is a client
// that went away.
func (l *Live) Abort(err error) {
	l.mu.Lock()
	if l.aborted == nil {
		l.aborted = err
	}
	l.mu.Unlock()
	l.c.cancel()
}

// Events relays the worker's events to send until the session ends, then
// records it, and returns the failure to report, nil when the final was
// sent. Only partial and final events pass, rewritten from what the
// gateway read of them: a worker cannot put anything else before the
// client.
func (l *Live) Events(send func(event []byte) error) error {
	err := l.relay(send)
	l.c.req.AudioSeconds = float64(l.received.Load()/2*2) / l.bytesPerSec
	l.c.done(err)
	return err
}

func (l *Live) relay(send func([]byte) error) error {
	c := l.c
	final := false
	for {
		typ, msg, err := c.readMessage(0, false)
		switch {
		case err != nil && c.ctx.Err() != nil:
			c.clientGone()
			l.mu.Lock()
			defer l.mu.Unlock()
			if final && errors.Is(l.aborted, ErrClientGone) {
				// The client had its final and closed before the
				// worker's result came: it was served.
				return nil
			}
			if l.aborted != nil {
				return l.aborted
			}
			return c.ctxError()
		case err != nil:
			c.lease.Release(fleet.Failed)
			return c.lostError(err)
		case typ == link.TypeEnd:
			res := parseResult(msg)
			if err := c.settle(res); err != nil {
				return err
			}
			if !final {
				return BadReply(c.lease.Worker, "a final transcript", errors.New("the session ended without one"))
			}
			return nil
		}
		var ev api.LiveEvent
		if err := json.Unmarshal(msg, &ev); err != nil || (ev.Type != api.LivePartial && ev.Type != api.LiveFinal) || ev.Text == nil {
			c.st.Reset()
			c.lease.Release(fleet.Failed)
			return BadReply(c.lease.Worker, "transcript events", err)
		}
		var data []byte
		if ev.Type == api.LivePartial {
			data, err = json.Marshal(api.LiveEvent{Type: ev.Type, Text: ev.Text, Start: ev.Start, End: ev.End})
		} else {
			final = true
			data, err = json.Marshal(finalOf(&ev))
		}
		if err != nil {
			return err
		}
		if c.firstToken.IsZero() {
			c.firstToken = time.Now()
		}
		if err := send(data); err != nil {
			c.cancel()
			c.clientGone()
			return ErrClientGone
		}
	}
}

// liveFinal is a final event as the client gets it: every member there,
// the silent session's too (no segments, language unknown).
type liveFinal struct {
	Type     string        `json:"type"`
	Text     string        `json:"text"`
	Segments []api.Segment `json:"segments"`
	Language string        `json:"language"`
	Duration float64       `json:"duration"`
}

func finalOf(ev *api.LiveEvent) liveFinal {
	f := liveFinal{Type: api.LiveFinal, Text: *ev.Text, Segments: ev.Segments, Language: ev.Language}
	if f.Segments == nil {
		f.Segments = []api.Segment{}
	}
	if ev.Duration != nil {
		f.Duration = *ev.Duration
	}
	return f
}
