package link

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Role says which end of the link a session is.
type Role int

const (
	// Gateway opens streams and consumes results.
	Gateway Role = iota
	// Worker accepts streams and produces results.
	Worker
)

// Errors a stream can end with.
var (
	// ErrReset means the peer dropped the stream.
	ErrReset = errors.New("link: stream reset by peer")
	// ErrPeerStopping means the peer dropped the stream because it is
	// stopping (ResetStopping); it is an ErrReset.
	ErrPeerStopping = fmt.Errorf("%w: the peer is stopping", ErrReset)
	// ErrClosed means the session was closed for good.
	ErrClosed = errors.New("link: session closed")
	// ErrAttached means Attach was called on a session that has a connection.
	ErrAttached = errors.New("link: session already has a connection")
	// ErrOverrun means the peer sent a stream more than its window holds
	// unread; the stream was dropped at both ends.
	ErrOverrun = fmt.Errorf("%w: peer overran the stream's window", ErrInvalid)
)

// resetStopping is the payload of a reset frame sent by ResetStopping.
const resetStopping = "stopping"

// DefaultWindow is how many unacknowledged payload bytes one stream may
// have in flight in each direction.
const DefaultWindow = 256 << 10

// Options configure a session.
type Options struct {
	Role   Role
	Window int
	// Accept is called on the worker for every stream the gateway opens, in
	// its own goroutine. ctx ends when the stream is reset or the session
	// closes.
	Accept func(ctx context.Context, st *Stream)
	// Control receives frames that are not about a stream (heartbeats,
	// models, events, goaway, commands). It runs on the read loop and must
	// not block.
	Control func(Frame)
	// Detached is called when the connection fails; the session keeps its
	// streams until Attach is called again or Close ends it.
	Detached func(error)
	// Buffers, when set, lends the buffers frames are queued in for
	// writing, so that an idle session holds none.
	Buffers *Buffers
	// EndAckDelay, when set, holds back the gateway's acknowledgement of
	// a stream's END for up to this long, to go out with the next frames
	// the session sends: under load each costs no write of its own. The
	// worker keeps the stream (its memory, not a slot) until it arrives.
	EndAckDelay time.Duration
}

// Session is one end of a link. It outlives its connections: streams
// survive a reconnect.
//
// Locking: s.mu guards the stream table and the connection; each stream
// has its own mutex. When both are needed, s.mu is taken first, and s.mu
// is never taken while a stream's mutex is held.
type Session struct {
	opts Options

	mu       sync.Mutex
	streams  map[uint64]*Stream
	nextID   uint64
	att      *attachment
	closed   error
	handlers *handlers
	// endAcks are END acknowledgements held back (EndAckDelay), and
	// ackTimer sends them when nothing else has.
	endAcks  []Frame
	ackTimer *time.Timer
}

// NewSession returns a detached session.
func NewSession(opts Options) *Session {
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.Control == nil {
		opts.Control = func(Frame) {}
	}
	if opts.Detached == nil {
		opts.Detached = func(error) {}
	}
	return &Session{opts: opts, streams: map[uint64]*Stream{}, handlers: newHandlers()}
}

// RecvState reports how far each stream has been consumed, for the resume
// handshake: the peer sends again everything after it.
func (s *Session) RecvState() []api.StreamSeq {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]api.StreamSeq, 0, len(s.streams))
	for id, st := range s.streams {
		st.mu.Lock()
		out = append(out, api.StreamSeq{ID: id, RecvSeq: st.readSeq})
		st.mu.Unlock()
	}
	return out
}

// Streams reports how many streams are open.
func (s *Session) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// Attach gives the session a connection and starts reading and writing on
// it. peer is how far the other end has received each stream (from the
// handshake): acknowledged frames are dropped and the rest are sent again,
// in order, before anything new. On the worker, streams the gateway no
// longer knows are dropped; on the gateway, streams the worker does not
// know are sent again from their first unacknowledged frame. The returned
// channel is closed when this connection is done with.
func (s *Session) Attach(conn Conn, peer []api.StreamSeq) (<-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return nil, s.closed
	}
	if s.att != nil {
		return nil, ErrAttached
	}
	known := make(map[uint64]uint64, len(peer))
	for _, p := range peer {
		known[p.ID] = p.RecvSeq
	}
	a := newAttachment(conn, s.opts.Buffers)
	// The handshake tells the worker which streams are done with.
	s.endAcks = nil
	for id, st := range s.streams {
		recv, ok := known[id]
		if !ok && s.opts.Role == Worker {
			delete(s.streams, id)
			st.fail(ErrReset)
			continue
		}
		st.mu.Lock()
		st.ackedLocked(recv)
		for _, f := range st.unacked {
			a.enqueue(f, st.readSeq)
		}
		if len(st.unacked) == 0 && st.readSeq > 0 {
			// Tell the peer how far we got even when there is nothing to
			// resend, so it can release what it holds.
			a.enqueue(&Frame{Type: TypeAck, Stream: id}, st.readSeq)
		}
		st.ackSent = st.readSeq
		done := st.endAcked()
		st.mu.Unlock()
		if done {
			delete(s.streams, id)
		}
	}
	s.att = a
	a.run(func() { s.readLoop(a) }, func() { s.writeLoop(a) })
	return a.done, nil
}

// Drop closes the current connection, if any, without reporting it to
// Detached: for a caller that already knows a newer connection is coming.
func (s *Session) Drop() { s.Release()() }

// Release lets go of the current connection at once, without reporting it
// to Detached, and returns what closes it. Closing may wait for a close
// frame to go out on a congested socket, so a caller holding a lock
// releases under it and closes after.
func (s *Session) Release() (closeConn func()) {
	s.mu.Lock()
	a := s.att
	s.att = nil
	s.mu.Unlock()
	if a == nil {
		return func() {}
	}
	return a.close
}

// Close ends the session for good: every stream fails with err (or
// ErrClosed), and the connection, if any, is closed. It waits for the
// worker's stream handlers to return.
func (s *Session) Close(err error) {
	if err == nil {
		err = ErrClosed
	}
	s.mu.Lock()
	if s.closed != nil {
		s.mu.Unlock()
		s.handlers.close()
		return
	}
	s.closed = err
	a := s.att
	s.att = nil
	streams := s.streams
	s.streams = map[uint64]*Stream{}
	s.endAcks = nil
	if s.ackTimer != nil {
		s.ackTimer.Stop()
	}
	s.mu.Unlock()
	for _, st := range streams {
		st.fail(err)
	}
	if a != nil {
		a.close()
	}
	s.handlers.close()
}

// Err is the error the session was closed with, or nil.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// SendControl sends a frame that is not part of a stream. It reports false
// when there is no connection to send it on; control frames are not kept.
func (s *Session) SendControl(typ Type, payload []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.att == nil {
		return false
	}
	s.att.enqueue(&Frame{Type: typ, Payload: payload}, 0)
	return true
}

// Flush waits until the frames queued so far are written, or ctx ends,
// and reports whether they were: for a last word before a close, which
// drops what is still queued. It polls, as it is for that moment alone.
func (s *Session) Flush(ctx context.Context) bool {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		s.mu.Lock()
		a := s.att
		s.mu.Unlock()
		if a == nil {
			return false
		}
		if a.idle() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// Open starts a stream (gateway only) carrying header and body. It blocks
// only if the body is larger than the window and the worker is slow to
// take it.
func (s *Session) Open(ctx context.Context, header, body []byte) (*Stream, error) {
	if err := checkHeader(header); err != nil {
		return nil, err
	}
	st, err := s.newOutgoing()
	if err != nil {
		return nil, &unsentError{err}
	}
	msg := make([]byte, 0, binary.MaxVarintLen64+len(header)+len(body))
	msg = binary.AppendUvarint(msg, uint64(len(header)))
	msg = append(msg, header...)
	msg = append(msg, body...)
	return st.opened(st.send(ctx, TypeOpen, msg, true))
}

// OpenReader starts a stream (gateway only) whose body is read from body
// as the window allows, so a large upload is never held whole: at most a
// window of it is in flight. It returns once the body is sent, or early
// when the worker has already answered (the answer waits in the stream).
func (s *Session) OpenReader(ctx context.Context, header []byte, body io.Reader) (*Stream, error) {
	if err := checkHeader(header); err != nil {
		return nil, err
	}
	st, err := s.newOutgoing()
	if err != nil {
		return nil, &unsentError{err}
	}
	prefix := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(header)), uint64(len(header)))
	prefix = append(prefix, header...)
	return st.opened(st.sendReader(ctx, prefix, body))
}

// checkHeader refuses a request header larger than a worker takes, before
// anything is sent.
func checkHeader(header []byte) error {
	if len(header) > maxRequestHeader {
		return &unsentError{fmt.Errorf("link: request header of %d bytes is larger than a worker takes", len(header))}
	}
	return nil
}

// Unsent reports whether err, from Open, OpenReader or OpenDuplex, came
// before anything of the stream was queued to go out: the peer cannot
// have learnt of the request. Any other failure of theirs may come after
// the peer had it.
func Unsent(err error) bool {
	var u *unsentError
	return errors.As(err, &u)
}

// unsentError is an open's failure before its first frame was queued. It
// reads as the failure it wraps.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }

// newOutgoing registers a new stream of the gateway's.
func (s *Session) newOutgoing() (*Stream, error) {
	if s.opts.Role != Gateway {
		return nil, errors.New("link: only the gateway opens streams")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return nil, s.closed
	}
	s.nextID++
	st := newStream(s, s.nextID)
	s.streams[st.id] = st
	return st, nil
}

// opened settles the sending of a request: a worker that answered before
// taking the whole body has a result to read; any other failure drops
// the stream.
func (st *Stream) opened(err error) (*Stream, error) {
	if err != nil && !errors.Is(err, ErrAnswered) {
		st.Reset()
		return nil, err
	}
	return st, nil
}

// remove forgets a stream.
func (s *Session) remove(id uint64) {
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
}

// sendAck acknowledges a stream up to seq, if there is a connection; after
// a reconnect the handshake carries the same information.
func (s *Session) sendAck(id, seq uint64) {
	s.mu.Lock()
	if s.att != nil {
		s.att.enqueue(&Frame{Type: TypeAck, Stream: id}, seq)
	}
	s.mu.Unlock()
}

// sendEndAck acknowledges a stream's END: at once, or with the session's
// next frames within EndAckDelay.
func (s *Session) sendEndAck(id, seq uint64) {
	if s.opts.EndAckDelay <= 0 {
		s.sendAck(id, seq)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.att == nil || s.closed != nil {
		return
	}
	s.endAcks = append(s.endAcks, Frame{Type: TypeAck, Stream: id, Ack: seq})
	if len(s.endAcks) > 1 {
		return
	}
	if s.ackTimer == nil {
		s.ackTimer = time.AfterFunc(s.opts.EndAckDelay, s.flushEndAcks)
	} else {
		s.ackTimer.Reset(s.opts.EndAckDelay)
	}
}

// flushEndAcks sends the END acknowledgements held back.
func (s *Session) flushEndAcks() {
	s.mu.Lock()
	s.queueEndAcksLocked()
	s.mu.Unlock()
}

// queueEndAcksLocked queues the END acknowledgements held back; s.mu is
// held.
func (s *Session) queueEndAcksLocked() {
	if s.att != nil {
		for i := range s.endAcks {
			s.att.enqueue(&s.endAcks[i], s.endAcks[i].Ack)
		}
	}
	s.endAcks = s.endAcks[:0]
}

// sendReset tells the peer to drop a stream, and why when why is set.
func (s *Session) sendReset(id uint64, why string) {
	f := &Frame{Type: TypeReset, Stream: id}
	if why != "" {
		f.Payload = []byte(why)
	}
	s.mu.Lock()
	if s.att != nil {
		s.att.enqueue(f, 0)
	}
	s.mu.Unlock()
}

func (s *Session) readLoop(a *attachment) {
	for {
		msg, err := a.conn.ReadMessage()
		if err == nil {
			err = DecodeMessage(msg, func(f Frame) error { return s.dispatch(a, f) })
		}
		if err != nil {
			s.detach(a, err)
			return
		}
	}
}

func (s *Session) writeLoop(a *attachment) {
	for {
		buf, ok := a.next()
		if !ok {
			return
		}
		if err := a.conn.WriteMessage(buf); err != nil {
			s.detach(a, err)
			return
		}
		a.recycle(buf)
	}
}

// detach drops a failed connection; the streams stay.
func (s *Session) detach(a *attachment, err error) {
	s.mu.Lock()
	current := s.att == a
	if current {
		s.att = nil
	}
	s.mu.Unlock()
	a.close()
	if current {
		s.opts.Detached(err)
	}
}

// dispatch handles one received frame.
func (s *Session) dispatch(a *attachment, f Frame) error {
	if !f.Type.perStream() {
		s.opts.Control(f)
		return nil
	}
	s.mu.Lock()
	st := s.streams[f.Stream]
	if st == nil && f.Type == TypeOpen && f.Seq == 1 && s.opts.Role == Worker && s.closed == nil {
		st = newStream(s, f.Stream)
		ctx, cancel := context.WithCancel(context.Background())
		st.cancel = cancel
		s.streams[f.Stream] = st
		s.handlers.run(func() { s.opts.Accept(ctx, st) })
	}
	s.mu.Unlock()
	if st == nil {
		if f.Type.sequenced() {
			// The stream is gone here (finished or abandoned): tell the peer
			// to drop it too.
			s.mu.Lock()
			if s.att == a {
				a.enqueue(&Frame{Type: TypeReset, Stream: f.Stream}, 0)
			}
			s.mu.Unlock()
		}
		return nil
	}
	switch f.Type {
	case TypeReset:
		s.remove(f.Stream)
		if string(f.Payload) == resetStopping {
			st.fail(ErrPeerStopping)
		} else {
			st.fail(ErrReset)
		}
		return nil
	case TypeAck:
		st.acked(f.Ack)
		return nil
	}
	if (f.Type == TypeOpen && s.opts.Role != Worker) || (f.Type == TypeEnd && s.opts.Role != Gateway) {
		return fmt.Errorf("%w: %s frame sent to the wrong end", ErrInvalid, f.Type)
	}
	return st.deliver(f)
}
