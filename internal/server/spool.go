package server

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sync"
)

// spool is an upload on disk: written once as it arrives from the client,
// read from the start for each worker it is sent to.
type spool struct {
	f    *os.File
	w    *bufio.Writer
	size int64
	// unlinked: the file has no name left, and goes with its last
	// descriptor, even if the gateway does not live to close it.
	unlinked bool
	once     sync.Once
}

// spoolBuffer batches the small writes of a multipart reader.
const spoolBuffer = 64 << 10

func newSpool(dir string) (*spool, error) {
	f, err := os.CreateTemp(dir, "upload-*")
	if err != nil {
		return nil, fmt.Errorf("spool an upload: %w", err)
	}
	// Where an open file can be removed (not on Windows) it is, at once.
	unlinked := os.Remove(f.Name()) == nil
	return &spool{f: f, w: bufio.NewWriterSize(f, spoolBuffer), unlinked: unlinked}, nil
}

func (s *spool) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.size += int64(n)
	return n, err
}

// done ends the writing.
func (s *spool) done() error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("spool an upload: %w", err)
	}
	s.w = nil
	return nil
}

// reader is the upload from its start; readers are independent of each
// other.
func (s *spool) reader() (io.Reader, error) { return io.NewSectionReader(s.f, 0, s.size), nil }

// close removes the file; a reader still open then fails.
func (s *spool) close() {
	s.once.Do(func() {
		_ = s.f.Close()
		if !s.unlinked {
			_ = os.Remove(s.f.Name())
		}
	})
}
