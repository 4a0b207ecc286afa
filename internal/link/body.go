package link

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

var (
	// ErrAnswered stops a sender whose peer has already ended the
	// stream: the worker answered before the request was sent, and its
	// answer waits to be read.
	ErrAnswered = errors.New("link: the worker answered before the request was sent")
	// ErrInterrupted is RecvUntil's answer when its channel closed
	// first.
	ErrInterrupted = errors.New("link: receive interrupted")
	// ErrExpired is RecvWithin's answer when its timer fired first.
	ErrExpired = errors.New("link: receive expired")
	// errStopped is recv's answer when its done or stop channel closes.
	errStopped = errors.New("link: receive stopped")
)

// sendReader sends an OPEN message made of prefix and then everything body
// yields, a frame at a time. A frame is flagged More unless it is the
// last, so one chunk is read ahead of the one being sent.
func (st *Stream) sendReader(ctx context.Context, prefix []byte, body io.Reader) error {
	r := io.MultiReader(bytes.NewReader(prefix), body)
	cur, next := make([]byte, MaxChunk), make([]byte, MaxChunk)
	n, err := readChunk(r, cur)
	if err != nil {
		return fmt.Errorf("read request body: %w", err)
	}
	t := TypeOpen
	for {
		m, err := readChunk(r, next)
		if err != nil {
			return fmt.Errorf("read request body: %w", err)
		}
		var flags uint8
		if m > 0 {
			flags = FlagMore
		}
		// sendFrame copies the payload, so cur is free again once it returns.
		if err := st.sendFrame(ctx, t, flags, cur[:n], false); err != nil {
			if t == TypeOpen {
				return &unsentError{err}
			}
			return err
		}
		if m == 0 {
			return nil
		}
		t = TypeData
		cur, next, n = next, cur, m
	}
}

// readChunk fills buf as far as r allows; 0 means r is done.
func readChunk(r io.Reader, buf []byte) (int, error) {
	n, err := io.ReadFull(r, buf)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	return n, err
}

// Body is the body of a request as it arrives (worker side): what follows
// the header in the OPEN message, frame by frame. Reading it acknowledges
// what was read, so the gateway sends the rest only as fast as it is
// consumed.
type Body struct {
	st   *Stream
	buf  []byte // unread rest of the current frame
	more bool   // further frames of the message follow
}

// maxRequestHeader bounds the header of a request, which the worker
// gathers whole before it reads the body. The gateway's is small JSON, a
// long transcription prompt the most of it; the bound is the largest
// payload a decoder takes in one frame, where any header fits.
const maxRequestHeader = MaxPayload

// OpenRequest reads the header of the request a stream was opened with
// and returns it with the body still to come (worker side).
func (st *Stream) OpenRequest(ctx context.Context) ([]byte, *Body, error) {
	f, err := st.Recv(ctx)
	if err != nil {
		return nil, nil, err
	}
	if f.Type != TypeOpen {
		return nil, nil, fmt.Errorf("%w: stream began with %s", ErrInvalid, f.Type)
	}
	msg, more := f.Payload, f.More()
	gathered := false
	// The header normally fits the first frame; gather frames until it is
	// whole when it does not.
	for {
		n, k := binary.Uvarint(msg)
		switch {
		case k > 0 && n > maxRequestHeader:
			// Refused as soon as its length is known, not once gathered:
			// frames read are acknowledged, so the window does not bound
			// what a header may claim.
			return nil, nil, fmt.Errorf("%w: request header of %d bytes", ErrInvalid, n)
		case k > 0 && n <= uint64(len(msg)-k):
			return msg[k : k+int(n)], &Body{st: st, buf: msg[k+int(n):], more: more}, nil
		case k < 0 || !more:
			return nil, nil, fmt.Errorf("%w: bad request header length", ErrInvalid)
		}
		if f, err = st.Recv(ctx); err != nil {
			return nil, nil, err
		}
		if f.Type != TypeData {
			return nil, nil, fmt.Errorf("%w: request continued with %s", ErrInvalid, f.Type)
		}
		if !gathered {
			// Copied once and then appended to, so a header in many small
			// frames costs no more than in a few.
			msg, gathered = append([]byte(nil), msg...), true
		}
		msg, more = append(msg, f.Payload...), f.More()
	}
}

// Read reads the body. It fails when the stream does (reset by the
// gateway, or the session closed), so an abandoned request stops its reader.
func (b *Body) Read(p []byte) (int, error) {
	for len(b.buf) == 0 {
		if !b.more {
			return 0, io.EOF
		}
		if err := b.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

// Bytes reads the whole body. A body that came in one frame is returned
// without a copy.
func (b *Body) Bytes() ([]byte, error) {
	if !b.more {
		out := b.buf
		b.buf = nil
		return out, nil
	}
	out := append([]byte(nil), b.buf...)
	for b.more {
		if err := b.next(); err != nil {
			return nil, err
		}
		out = append(out, b.buf...)
	}
	b.buf = nil
	return out, nil
}

func (b *Body) next() error {
	f, err := b.st.recv(nil, nil, nil)
	if err != nil {
		return err
	}
	if f.Type != TypeData {
		return fmt.Errorf("%w: request continued with %s", ErrInvalid, f.Type)
	}
	b.buf, b.more = f.Payload, f.More()
	return nil
}

// OpenDuplex starts a stream (gateway only) whose body the caller sends
// afterwards with SendBody, a piece at a time as it comes, and ends with
// EndBody, while it reads the answer from the same stream: a live
// request's answer flows while its body still arrives, so neither may
// wait for the other. Every frame of the body is flagged More, since
// none knows it is the last; EndBody sends an empty frame without it.
func (s *Session) OpenDuplex(ctx context.Context, header []byte) (*Stream, error) {
	st, err := s.newOutgoing()
	if err != nil {
		return nil, &unsentError{err}
	}
	prefix := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(header)), uint64(len(header)))
	prefix = append(prefix, header...)
	if len(prefix) > MaxChunk {
		st.Reset()
		return nil, fmt.Errorf("link: request header of %d bytes is larger than a frame", len(header))
	}
	if err := st.sendFrame(ctx, TypeOpen, FlagMore, prefix, false); err != nil {
		st.Reset()
		return nil, &unsentError{err}
	}
	return st, nil
}

// SendBody sends the next piece of a duplex stream's body. It blocks
// while the worker has a window unread; ErrAnswered means the worker has
// ended the stream and wants no more.
func (st *Stream) SendBody(ctx context.Context, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), MaxChunk)
		if err := st.sendFrame(ctx, TypeData, FlagMore, p[:n], false); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// EndBody ends a duplex stream's body.
func (st *Stream) EndBody(ctx context.Context) error {
	return st.sendFrame(ctx, TypeData, 0, nil, false)
}
