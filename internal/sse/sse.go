// Package sse reads server-sent event streams: engines' chat streams on
// the worker, the gateway's streams in the client.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Event is one server-sent event.
type Event struct {
	// Type is the event: field, or "error" for llama.cpp's non-standard
	// "error: {...}" line; empty for plain data events.
	Type string
	// Data is the event's data lines joined by "\n". The caller owns it.
	Data []byte
}

// Reader reads server-sent events the way the WHATWG spec says, with
// the leniency streaming engines need:
//
//   - Lines end with LF, CRLF or CR.
//   - Comments (":...") and id/retry fields are ignored: the adapter never
//     reconnects.
//   - Older llama.cpp builds report a failed generation as an
//     "error: {...}" line rather than a data line. The spec would ignore
//     that field; the reader returns it as an event of type "error" so the
//     message reaches the client.
//   - An event the stream ends without a blank line after is still
//     delivered, but only if its last line was complete: a line cut off
//     by EOF is most likely a truncated JSON chunk and is dropped.
//
// A line or event longer than the limit fails the read rather than
// growing without bound.
type Reader struct {
	sc    *bufio.Scanner
	split lineSplitter
	max   int
	typ   string
	data  []byte
	dirty bool // a data or error field was seen since the last dispatch
}

func NewReader(r io.Reader, max int) *Reader {
	s := &Reader{max: max}
	s.sc = bufio.NewScanner(r)
	// The scanner's limit is the larger of max and the initial capacity.
	// Most events are a few hundred bytes and the buffer grows for the
	// rest; a small start matters to a worker holding thousands of streams.
	s.sc.Buffer(make([]byte, 0, min(1024, max)), max)
	s.sc.Split(s.split.split)
	return s
}

var errEventTooLarge = errors.New("server-sent event too large")

// Next returns the next event with data, or the read error; io.EOF when
// the stream ended cleanly.
func (s *Reader) Next() (Event, error) {
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if s.split.cut {
			// The stream ended in the middle of this line.
			break
		}
		if len(line) == 0 {
			if ev, ok := s.dispatch(); ok {
				return ev, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte{' '})
		}
		switch string(name) {
		case "data":
			if err := s.appendData(value); err != nil {
				return Event{}, err
			}
		case "event":
			s.typ = string(value)
		case "error":
			s.typ = "error"
			if err := s.appendData(value); err != nil {
				return Event{}, err
			}
		}
	}
	if err := s.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Event{}, fmt.Errorf("%w (over %d bytes)", errEventTooLarge, s.max)
		}
		return Event{}, err
	}
	if ev, ok := s.dispatch(); ok {
		return ev, nil
	}
	return Event{}, io.EOF
}

func (s *Reader) appendData(value []byte) error {
	if s.dirty {
		s.data = append(s.data, '\n')
	}
	if len(s.data)+len(value) > s.max {
		return fmt.Errorf("%w (over %d bytes)", errEventTooLarge, s.max)
	}
	s.data = append(s.data, value...)
	s.dirty = true
	return nil
}

// dispatch ends the current event. Events without data are dropped, as
// the spec says.
func (s *Reader) dispatch() (Event, bool) {
	if !s.dirty {
		s.typ = ""
		return Event{}, false
	}
	ev := Event{Type: s.typ, Data: bytes.Clone(s.data)}
	s.typ, s.data, s.dirty = "", s.data[:0], false
	return ev, true
}

// lineSplitter is a bufio.SplitFunc for LF, CRLF and CR line ends. It
// remembers how far it has searched, so a long line arriving in many small
// reads is scanned once rather than once per read.
type lineSplitter struct {
	searched int
	// cut is set when the last line returned had no line end.
	cut bool
}

func (l *lineSplitter) split(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if l.searched > len(data) {
		l.searched = 0
	}
	if i := bytes.IndexAny(data[l.searched:], "\r\n"); i >= 0 {
		i += l.searched
		switch {
		case data[i] == '\n':
			l.searched = 0
			return i + 1, data[:i], nil
		case i+1 < len(data):
			l.searched = 0
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		case atEOF:
			l.searched = 0
			return i + 1, data[:i], nil
		}
		// A CR at the end of what has arrived: wait to see whether an LF
		// follows, so CRLF is not read as two line ends.
		l.searched = i
		return 0, nil, nil
	}
	if atEOF && len(data) > 0 {
		l.searched, l.cut = 0, true
		return len(data), data, nil
	}
	l.searched = len(data)
	return 0, nil, nil
}
