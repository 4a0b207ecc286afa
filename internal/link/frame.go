// Package link is the protocol between the gateway and its workers: one
// websocket per worker carrying many concurrent request streams.
//
// Each stream is reliable and ordered in both directions: stream frames
// carry sequence numbers, receivers acknowledge what they have consumed,
// and senders keep unacknowledged frames. When the connection drops, both
// ends keep their streams; on reconnect they exchange how far each stream
// got and retransmit the rest, so nothing is lost or repeated. Flow control
// bounds the unacknowledged bytes per stream (the window), so a slow client
// stalls its own stream instead of making either side buffer without bound.
//
// See docs/link.md for the frame layout and the handshake.
package link

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Path is where the gateway accepts worker links, on its public port.
const Path = "/api/v1/workers/connect"

// SpliceParam, in the query of a dial of Path, asks a replica that is not
// the organisation's home to join the link through to the home rather
// than redirect the worker there: the worker could not reach it.
const SpliceParam = "splice"

// SplicedHeader marks a link request a replica joined through to the
// home; the home does not splice it on again.
const SplicedHeader = "X-Svc-Spliced"

// Protocol is the link protocol version, sent in the hello; the gateway
// refuses a worker that speaks another.
const Protocol = 1

// Type is a frame's type.
type Type uint8

// Stream frames are sequenced and retransmitted; the others are not.
const (
	TypeHello     Type = 1  // worker → gateway, first message: api.Hello
	TypeWelcome   Type = 2  // gateway → worker, answer: api.Welcome
	TypeOpen      Type = 3  // gateway → worker: a new stream (request header and body)
	TypeData      Type = 4  // either way: stream payload
	TypeEnd       Type = 5  // worker → gateway: the stream's result (api.Result)
	TypeAck       Type = 6  // either way: cumulative acknowledgement of a stream
	TypeReset     Type = 7  // either way: drop the stream at once
	TypeHeartbeat Type = 8  // worker → gateway: api.Heartbeat
	TypeModels    Type = 9  // worker → gateway: []api.Model
	TypeEvent     Type = 10 // worker → gateway: api.WorkerEventReport
	TypeGoAway    Type = 11 // either way: take no new streams
	TypeCommand   Type = 12 // gateway → worker: a control request
	TypePower     Type = 13 // worker → gateway: api.PowerReport
	maxType            = TypePower
)

func (t Type) String() string {
	names := [...]string{"", "hello", "welcome", "open", "data", "end", "ack", "reset", "heartbeat", "models", "event", "goaway", "command", "power"}
	if t == 0 || t > maxType {
		return fmt.Sprintf("type(%d)", uint8(t))
	}
	return names[t]
}

// sequenced reports whether frames of this type carry a sequence number and
// are retransmitted after a reconnect.
func (t Type) sequenced() bool { return t == TypeOpen || t == TypeData || t == TypeEnd }

// perStream reports whether frames of this type name a stream.
func (t Type) perStream() bool { return t.sequenced() || t == TypeAck || t == TypeReset }

// FlagMore marks a frame whose message continues in the next frame of the
// same stream: messages larger than MaxChunk are split.
const FlagMore uint8 = 1

const (
	// MaxPayload is the largest payload a decoder accepts.
	MaxPayload = 1 << 20
	// MaxChunk is the largest payload a sender puts in one frame.
	MaxChunk = 64 << 10
	// maxHeader bounds the encoded header: type, flags, four uvarints.
	maxHeader = 2 + 4*binary.MaxVarintLen64
)

// Frame is one unit of the protocol. On the wire:
//
//	type u8 | flags u8 | stream uvarint | seq uvarint | ack uvarint | len uvarint | payload
//
// A websocket message holds one or more frames back to back.
type Frame struct {
	Type    Type
	Flags   uint8
	Stream  uint64
	Seq     uint64 // position in the stream's direction, from 1; stream frames only
	Ack     uint64 // the sender has received the reverse direction up to here
	Payload []byte
}

// More reports whether the message continues in the next frame.
func (f *Frame) More() bool { return f.Flags&FlagMore != 0 }

// AppendFrame appends the encoding of f to dst.
func AppendFrame(dst []byte, f *Frame) []byte {
	dst = append(dst, byte(f.Type), f.Flags)
	dst = binary.AppendUvarint(dst, f.Stream)
	dst = binary.AppendUvarint(dst, f.Seq)
	dst = binary.AppendUvarint(dst, f.Ack)
	dst = binary.AppendUvarint(dst, uint64(len(f.Payload)))
	return append(dst, f.Payload...)
}

// Decoding errors.
var (
	ErrShort   = errors.New("link: truncated frame")
	ErrInvalid = errors.New("link: invalid frame")
)

// DecodeFrame reads one frame from the front of b and returns it with the
// number of bytes used. The payload aliases b.
func DecodeFrame(b []byte) (Frame, int, error) {
	var f Frame
	if len(b) < 2 {
		return f, 0, ErrShort
	}
	f.Type, f.Flags = Type(b[0]), b[1]
	if f.Type == 0 || f.Type > maxType {
		return f, 0, fmt.Errorf("%w: unknown type %d", ErrInvalid, b[0])
	}
	if f.Flags&^FlagMore != 0 {
		return f, 0, fmt.Errorf("%w: unknown flags %#x", ErrInvalid, f.Flags)
	}
	n := 2
	var fields [4]uint64
	for i := range fields {
		v, k := binary.Uvarint(b[n:])
		switch {
		case k == 0:
			return f, 0, ErrShort
		case k < 0:
			return f, 0, fmt.Errorf("%w: varint overflow", ErrInvalid)
		}
		fields[i] = v
		n += k
	}
	f.Stream, f.Seq, f.Ack = fields[0], fields[1], fields[2]
	size := fields[3]
	if size > MaxPayload {
		return f, 0, fmt.Errorf("%w: payload of %d bytes", ErrInvalid, size)
	}
	if uint64(len(b)-n) < size {
		return f, 0, ErrShort
	}
	f.Payload = b[n : n+int(size) : n+int(size)]
	n += int(size)
	if err := f.validate(); err != nil {
		return f, 0, err
	}
	return f, n, nil
}

// validate checks that the fields a type needs are there and no others.
func (f *Frame) validate() error {
	switch {
	case f.Type.perStream() && f.Stream == 0:
		return fmt.Errorf("%w: %s frame without a stream", ErrInvalid, f.Type)
	case !f.Type.perStream() && (f.Stream != 0 || f.Seq != 0 || f.Ack != 0):
		return fmt.Errorf("%w: %s frame names a stream", ErrInvalid, f.Type)
	case f.Type.sequenced() && f.Seq == 0:
		return fmt.Errorf("%w: %s frame without a sequence number", ErrInvalid, f.Type)
	case !f.Type.sequenced() && f.Seq != 0:
		return fmt.Errorf("%w: %s frame with a sequence number", ErrInvalid, f.Type)
	case f.Flags&FlagMore != 0 && f.Type != TypeOpen && f.Type != TypeData:
		return fmt.Errorf("%w: %s frame continues", ErrInvalid, f.Type)
	}
	return nil
}

// DecodeMessage splits a websocket message into its frames.
func DecodeMessage(msg []byte, fn func(Frame) error) error {
	for len(msg) > 0 {
		f, n, err := DecodeFrame(msg)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			return err
		}
		msg = msg[n:]
	}
	return nil
}
