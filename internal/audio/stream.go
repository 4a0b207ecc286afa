package audio

import (
	"bufio"
	"errors"
	"io"
	"math"
)

// bufSize is all the memory Probe holds for the file, whatever its size.
// It must exceed the longest peek: the sniffing window, and an MPEG frame
// (2881 bytes at most) with the next frame's header.
const bufSize = 32 << 10

// stream is a forward-only reader that can look ahead within bufSize bytes
// and counts what it consumed. End of file is not an error for its
// methods: they return short instead, as the parsers expect truncated files.
type stream struct {
	br  *bufio.Reader
	off int64 // bytes consumed so far
}

func newStream(r io.Reader) *stream {
	return &stream{br: bufio.NewReaderSize(r, bufSize)}
}

// peek returns the next n bytes without consuming them; fewer at the end
// of the file.
func (s *stream) peek(n int) ([]byte, error) {
	b, err := s.br.Peek(n)
	if err != nil && !errors.Is(err, io.EOF) {
		return b, &readError{err}
	}
	return b, nil
}

// skip consumes n bytes, or up to the end of the file, and reports how many
// it consumed.
func (s *stream) skip(n int64) (int64, error) {
	var done int64
	for done < n {
		k, err := s.br.Discard(int(min(n-done, bufSize)))
		done += int64(k)
		if err != nil {
			s.off += done
			if errors.Is(err, io.EOF) {
				return done, nil
			}
			return done, &readError{err}
		}
	}
	s.off += done
	return done, nil
}

// drain consumes the rest of the file.
func (s *stream) drain() error {
	_, err := s.skip(math.MaxInt64)
	return err
}

// window returns the buffered rest of the file, and the length of its head
// in which each position has need bytes after it; all of it when the end
// of the file is in view. Scanning loops look for patterns in the head,
// consume it and call again: in memory, one byte at a time costs little.
func (s *stream) window(need int) ([]byte, int, error) {
	b, err := s.peek(bufSize)
	if err != nil {
		return nil, 0, err
	}
	if len(b) < bufSize {
		return b, len(b), nil
	}
	return b, len(b) - need, nil
}

// Read hands the rest of the file to the decoder libraries.
func (s *stream) Read(p []byte) (int, error) {
	n, err := s.br.Read(p)
	s.off += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		err = &readError{err}
	}
	return n, err
}

// skipID3v2 consumes the ID3v2 tags at the current position and reports
// whether there was any. Some taggers stack several.
func (s *stream) skipID3v2() (bool, error) {
	tagged := false
	for {
		b, err := s.peek(id3v2HeaderLen)
		if err != nil {
			return tagged, err
		}
		n := id3v2Len(b)
		if n == 0 {
			return tagged, nil
		}
		tagged = true
		if _, err := s.skip(n); err != nil {
			return tagged, err
		}
	}
}

// sniff consumes the ID3v2 tags at the start of the file and names the
// format of what follows, leaving the stream at the first byte after them.
func (s *stream) sniff() (string, error) {
	tagged, err := s.skipID3v2()
	if err != nil {
		return "", err
	}
	head, err := s.peek(sniffWindow)
	if err != nil {
		return "", err
	}
	// peek comes back short only at the end of the file.
	return classify(head, tagged, len(head) < sniffWindow), nil
}

// readError marks an error of the caller's reader, so that it is not
// taken for damage when it comes back through a decoder library.
type readError struct{ err error }

func (e *readError) Error() string { return "read audio: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

func isReadError(err error) bool {
	var re *readError
	return errors.As(err, &re)
}
