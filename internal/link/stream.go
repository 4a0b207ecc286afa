package link

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"
)

// Stream is one request on a link: the gateway's request goes one way, the
// worker's response the other, each reliable and in order.
type Stream struct {
	id uint64
	s  *Session
	// cancel ends the context the worker's handler runs with; on the
	// gateway, where no handler runs, it does nothing.
	cancel context.CancelFunc
	dead   chan struct{} // closed when the stream fails

	mu sync.Mutex
	// Sending.
	sendSeq uint64
	unacked []*Frame // sent, not yet acknowledged, in order
	// firstUnacked holds unacked at first: a request's one frame, or an
	// answer and its result, need no array of their own.
	firstUnacked [2]*Frame
	inflight     int    // payload bytes in unacked
	endSeq       uint64 // sequence number of our END frame, once sent
	// credit is signalled when acknowledgements make room in the window.
	// ended is closed when the worker's END arrives on the gateway, where
	// a request body still being sent is no longer wanted (answered says
	// so before then). Only a sender the window holds back waits on them,
	// so they are made for it; most streams never need them.
	credit   chan struct{}
	ended    chan struct{}
	answered bool
	// Receiving. Acknowledgements (and the resume handshake) report what
	// has been consumed, not merely received, so the window bounds the
	// inbox even across reconnects; frames received twice are dropped by
	// sequence number.
	recvSeq  uint64 // highest in-order sequence number received
	readSeq  uint64 // highest sequence number consumed by Recv
	inbox    []Frame
	queued   int // payload bytes in inbox
	empties  int // frames without payload in inbox
	ready    chan struct{}
	consumed int    // payload bytes consumed since the last acknowledgement
	ackSent  uint64 // highest sequence number acknowledged to the peer
	err      error
	// afterFail are the callbacks AfterFail registered and not stopped.
	afterFail []*func()
}

func newStream(s *Session, id uint64) *Stream {
	st := &Stream{
		id: id, s: s, cancel: func() {},
		dead:  make(chan struct{}),
		ready: make(chan struct{}, 1),
	}
	st.unacked = st.firstUnacked[:0]
	return st
}

// ID is the stream's number, unique within its session.
func (st *Stream) ID() uint64 { return st.id }

// Done is closed when the stream can no longer be used: reset by the peer,
// reset locally, or its session closed.
func (st *Stream) Done() <-chan struct{} { return st.dead }

// Err is why the stream failed, or nil.
func (st *Stream) Err() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err
}

// Send sends one message: an event or a body, split into frames when it is
// larger than MaxChunk. It blocks while the peer has a full window
// unacknowledged, which is how backpressure reaches the producer.
func (st *Stream) Send(ctx context.Context, msg []byte) error {
	return st.send(ctx, TypeData, msg, false)
}

// End sends the stream's result (worker only). The stream stays until the
// gateway acknowledges it, so a reconnect cannot lose it.
func (st *Stream) End(ctx context.Context, result []byte) error {
	if len(result) > MaxChunk {
		return fmt.Errorf("link: result of %d bytes is larger than a frame", len(result))
	}
	return st.send(ctx, TypeEnd, result, false)
}

// Reset abandons the stream: the peer is told to drop it and anything
// waiting on it here returns ErrReset.
func (st *Stream) Reset() { st.abandon(ErrReset) }

// ResetStopping abandons the stream as Reset does, telling the peer that
// this end is stopping: its drain ran out of time, and whoever it served
// the stream for was answered so. The peer's waiters get ErrPeerStopping.
func (st *Stream) ResetStopping() { st.abandonFor(ErrReset, resetStopping) }

// abandon drops the stream here and at the peer; what waits on it here
// returns err.
func (st *Stream) abandon(err error) { st.abandonFor(err, "") }

// abandonFor is abandon telling the peer why: a reset frame's payload
// (resetStopping), which peers that know no reasons ignore.
func (st *Stream) abandonFor(err error, why string) {
	st.s.remove(st.id)
	st.s.sendReset(st.id, why)
	st.fail(err)
	// Frames received but not read would otherwise come out of Recv first;
	// nobody wants them any more.
	st.mu.Lock()
	st.inbox, st.queued, st.empties = nil, 0, 0
	st.mu.Unlock()
}

// send sends msg in frames of at most MaxChunk. owned says msg is the
// stream's to keep, never written again, so frames hold it rather than a
// copy until the peer acknowledges them.
func (st *Stream) send(ctx context.Context, typ Type, msg []byte, owned bool) error {
	first := true
	for {
		n := min(len(msg), MaxChunk)
		chunk := msg[:n]
		msg = msg[n:]
		t := typ
		if typ == TypeOpen && !first {
			t = TypeData
		}
		var flags uint8
		if len(msg) > 0 {
			flags = FlagMore
		}
		if err := st.sendFrame(ctx, t, flags, chunk, owned); err != nil {
			if first && typ == TypeOpen {
				return &unsentError{err}
			}
			return err
		}
		first = false
		if len(msg) == 0 {
			return nil
		}
	}
}

func (st *Stream) sendFrame(ctx context.Context, t Type, flags uint8, payload []byte, owned bool) error {
	window := st.s.opts.Window
	for {
		st.s.mu.Lock()
		st.mu.Lock()
		if st.err != nil {
			err := st.err
			st.mu.Unlock()
			st.s.mu.Unlock()
			return err
		}
		// One frame may always be in flight, however large, so a message
		// bigger than the window still gets through.
		if st.inflight == 0 || st.inflight+len(payload) <= window {
			st.sendSeq++
			if !owned {
				payload = append([]byte(nil), payload...)
			}
			f := &Frame{Type: t, Flags: flags, Stream: st.id, Seq: st.sendSeq, Payload: payload}
			st.unacked = append(st.unacked, f)
			st.inflight += len(payload)
			if t == TypeEnd {
				st.endSeq = f.Seq
			}
			if st.s.att != nil {
				st.s.att.enqueue(f, st.readSeq)
				st.ackSent = st.readSeq
				st.consumed = 0
				if len(st.s.endAcks) > 0 {
					// In the same write.
					st.s.queueEndAcksLocked()
				}
			}
			st.mu.Unlock()
			st.s.mu.Unlock()
			return nil
		}
		if st.answered {
			st.mu.Unlock()
			st.s.mu.Unlock()
			return ErrAnswered
		}
		if st.credit == nil {
			st.credit = make(chan struct{}, 1)
		}
		if st.ended == nil && st.s.opts.Role == Gateway {
			// Only the gateway receives an END; a worker's stream waits
			// on a nil channel, which never fires.
			st.ended = make(chan struct{})
		}
		credit, ended := st.credit, st.ended
		st.mu.Unlock()
		st.s.mu.Unlock()
		select {
		case <-credit:
		case <-st.dead:
		case <-ended:
			return ErrAnswered
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Recv returns the next frame the peer sent on this stream: OPEN (the
// request, worker side), DATA, or END (the result, gateway side, after
// which the stream is finished). Frames with More set continue the same
// message. The payload stays valid after the next call.
func (st *Stream) Recv(ctx context.Context) (Frame, error) { return st.RecvUntil(ctx, nil) }

// RecvUntil is Recv, also ended by stop closing, with ErrInterrupted: a
// wait that more than the caller's context may end costs no context or
// goroutine of its own. A frame already there is returned first.
func (st *Stream) RecvUntil(ctx context.Context, stop <-chan struct{}) (Frame, error) {
	return st.RecvWithin(ctx, stop, nil)
}

// RecvWithin is RecvUntil, also ended by a value on expire (a timer's
// channel), with ErrExpired. A relay that waits a bounded time for each of
// a stream's chunks resets one timer for each rather than deriving a
// context for each.
func (st *Stream) RecvWithin(ctx context.Context, stop <-chan struct{}, expire <-chan time.Time) (Frame, error) {
	f, err := st.recv(ctx.Done(), stop, expire)
	switch {
	case err != errStopped:
		return f, err
	case ctx.Err() != nil:
		return f, ctx.Err()
	}
	return f, ErrInterrupted
}

// recv is Recv until done or stop is closed or expire fires; a nil done
// waits for as long as the stream lives.
func (st *Stream) recv(done, stop <-chan struct{}, expire <-chan time.Time) (Frame, error) {
	for {
		st.mu.Lock()
		if len(st.inbox) > 0 {
			return st.pop(), nil
		}
		err := st.err
		st.mu.Unlock()
		if err != nil {
			return Frame{}, err
		}
		select {
		case <-st.ready:
		case <-st.dead:
		case <-done:
			return Frame{}, errStopped
		case <-stop:
			return Frame{}, errStopped
		case <-expire:
			return Frame{}, ErrExpired
		}
	}
}

// TryRecv is Recv of a frame already here, that is a whole message: it
// returns false at once, taking nothing, when the next frame is still to
// come or continues in frames after it. A relay that writes what arrived
// together in one write drains the stream with it.
func (st *Stream) TryRecv() (Frame, bool) {
	st.mu.Lock()
	if len(st.inbox) == 0 || st.inbox[0].More() {
		st.mu.Unlock()
		return Frame{}, false
	}
	return st.pop(), true
}

// pop takes the first frame of the inbox, with st.mu held, which it
// releases before it acknowledges what was consumed.
func (st *Stream) pop() Frame {
	f := st.inbox[0]
	st.inbox[0] = Frame{}
	st.inbox = st.inbox[1:]
	st.queued -= len(f.Payload)
	if len(f.Payload) == 0 {
		st.empties--
	}
	st.consumed += len(f.Payload)
	st.readSeq = f.Seq
	var ack uint64
	end := f.Type == TypeEnd
	// Acknowledge every quarter window, and the end at once so the
	// worker can let the stream go.
	if st.readSeq > st.ackSent && (end || st.consumed >= st.s.opts.Window/4) {
		ack, st.ackSent, st.consumed = st.readSeq, st.readSeq, 0
	}
	st.mu.Unlock()
	switch {
	case ack > 0 && end:
		st.s.sendEndAck(st.id, ack)
	case ack > 0:
		st.s.sendAck(st.id, ack)
	}
	if end {
		st.s.remove(st.id)
		st.cancel()
	}
	return f
}

// ReadMessage receives frames until a message is complete and returns it
// with the type of its first frame.
func (st *Stream) ReadMessage(ctx context.Context) (Type, []byte, error) {
	f, err := st.Recv(ctx)
	if err != nil {
		return 0, nil, err
	}
	if !f.More() {
		return f.Type, f.Payload, nil
	}
	typ := f.Type
	msg := append([]byte(nil), f.Payload...)
	for f.More() {
		if f, err = st.Recv(ctx); err != nil {
			return 0, nil, err
		}
		msg = append(msg, f.Payload...)
	}
	return typ, msg, nil
}

// ReadRequest reads the request a stream was opened with, whole (worker
// side).
func (st *Stream) ReadRequest(ctx context.Context) (header, body []byte, err error) {
	header, b, err := st.OpenRequest(ctx)
	if err != nil {
		return nil, nil, err
	}
	if body, err = b.Bytes(); err != nil {
		return nil, nil, err
	}
	return header, body, nil
}

// deliver takes a frame from the read loop.
func (st *Stream) deliver(f Frame) error {
	st.mu.Lock()
	done := st.ackedLocked(f.Ack)
	var overrun error
	switch {
	case f.Seq <= st.recvSeq:
		// Sent again after a reconnect, and already here.
	case f.Seq != st.recvSeq+1:
		st.mu.Unlock()
		return fmt.Errorf("%w: stream %d expected frame %d, got %d", ErrInvalid, st.id, st.recvSeq+1, f.Seq)
	case st.err != nil:
	default:
		if overrun = st.overrunLocked(len(f.Payload)); overrun == nil {
			st.queueLocked(f)
		}
	}
	st.mu.Unlock()
	if done {
		st.finishSend()
	}
	if overrun != nil {
		// The stream is the peer's fault, not the link's: the other
		// streams carry on. Dropping the connection instead, as for a
		// malformed frame, would stall them all and gain nothing, since
		// the stream would survive it and the peer resend the same.
		st.abandon(overrun)
	}
	return nil
}

// queueLocked adds the next frame in order to the inbox.
func (st *Stream) queueLocked(f Frame) {
	st.recvSeq = f.Seq
	if len(st.inbox) > 0 {
		// A frame behind another may wait here for as long as the reader
		// stalls: it keeps its own bytes, not the whole message it came
		// in, or a byte of window could hold a megabyte.
		f.Payload = bytes.Clone(f.Payload)
	}
	st.inbox = append(st.inbox, f)
	st.queued += len(f.Payload)
	if len(f.Payload) == 0 {
		st.empties++
	}
	signal(st.ready)
	if f.Type == TypeEnd && !st.answered {
		st.answered = true
		if st.ended != nil {
			close(st.ended)
		}
	}
}

// maxEmpties bounds the frames without payload a stream holds unread.
// The window counts payload only, so it bounds every other frame (one per
// byte at most) but not these; no sender here makes more than a few (an
// END, a body's end, the odd empty event) before it is read.
const maxEmpties = 1024

// overrunLocked says why a frame carrying n bytes of payload, next in
// order, breaks the peer's flow control, or nil. The peer keeps the
// window as sendFrame does: a frame goes out when it fits in the window
// with the bytes unacknowledged, or when there are none. Acknowledgements
// and the resume handshake report only what was read here, so the bytes
// waiting unread were unacknowledged when the peer sent the frame; with
// some waiting, the frame must fit beside them. Both ends use the
// protocol's window.
func (st *Stream) overrunLocked(n int) error {
	window := st.s.opts.Window
	switch {
	case st.queued > 0 && st.queued+n > window:
		return fmt.Errorf("%w: stream %d: %d bytes unread and a frame of %d (window %d)", ErrOverrun, st.id, st.queued, n, window)
	case n == 0 && st.empties >= maxEmpties:
		return fmt.Errorf("%w: stream %d: %d empty frames unread", ErrOverrun, st.id, st.empties)
	}
	return nil
}

// acked takes an acknowledgement from an ACK frame.
func (st *Stream) acked(seq uint64) {
	st.mu.Lock()
	done := st.ackedLocked(seq)
	st.mu.Unlock()
	if done {
		st.finishSend()
	}
}

// ackedLocked drops frames the peer has acknowledged and reports whether
// our END is among them.
func (st *Stream) ackedLocked(seq uint64) bool {
	if seq == 0 || len(st.unacked) == 0 || seq < st.unacked[0].Seq {
		return false
	}
	i := 0
	for i < len(st.unacked) && st.unacked[i].Seq <= seq {
		st.inflight -= len(st.unacked[i].Payload)
		st.unacked[i] = nil
		i++
	}
	st.unacked = st.unacked[i:]
	if st.credit != nil {
		signal(st.credit)
	}
	return st.endAcked()
}

// endAcked reports whether our END has been acknowledged.
func (st *Stream) endAcked() bool { return st.endSeq != 0 && len(st.unacked) == 0 }

// finishSend retires a worker stream whose result the gateway has.
func (st *Stream) finishSend() {
	st.s.remove(st.id)
	st.cancel()
}

// fail ends the stream with err; waiters wake up.
func (st *Stream) fail(err error) {
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		return
	}
	st.err = err
	st.unacked, st.inflight = nil, 0
	close(st.dead)
	after := st.afterFail
	st.afterFail = nil
	st.mu.Unlock()
	st.cancel()
	for _, f := range after {
		go (*f)()
	}
}

// AfterFail arranges for f to run, in its own goroutine, once the stream
// fails: reset by either end or its session closed. A stream that ends
// normally never runs it. stop unregisters f and reports whether it did
// so before f was started, as context.AfterFunc's stop does. Unlike a
// goroutine waiting on Done, a registration costs nothing while it waits.
func (st *Stream) AfterFail(f func()) (stop func() bool) {
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	p := &f
	st.afterFail = append(st.afterFail, p)
	st.mu.Unlock()
	return func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		for i, q := range st.afterFail {
			if q == p {
				st.afterFail = append(st.afterFail[:i], st.afterFail[i+1:]...)
				return true
			}
		}
		return false
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
