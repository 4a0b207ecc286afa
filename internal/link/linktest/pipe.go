// Package linktest provides an in-memory connection for tests of the link
// and of what runs on it.
package linktest

import (
	"io"
	"sync"
)

// Conn is one end of an in-memory connection. Closing either end breaks
// both, like a TCP reset. It satisfies link.Conn.
type Conn struct {
	in, out chan []byte
	broken  chan struct{}
	once    *sync.Once
}

// Pipe returns the two ends of a new connection.
func Pipe() (*Conn, *Conn) {
	a, b := make(chan []byte, 64), make(chan []byte, 64)
	broken, once := make(chan struct{}), &sync.Once{}
	return &Conn{in: a, out: b, broken: broken, once: once}, &Conn{in: b, out: a, broken: broken, once: once}
}

// ReadMessage returns the next message, or an error once the pipe broke.
// Messages written before the break are still delivered, as TCP does.
func (c *Conn) ReadMessage() ([]byte, error) {
	select {
	case m := <-c.in:
		return m, nil
	default:
	}
	select {
	case m := <-c.in:
		return m, nil
	case <-c.broken:
		return nil, io.ErrClosedPipe
	}
}

// WriteMessage sends a copy of m.
func (c *Conn) WriteMessage(m []byte) error {
	cp := append([]byte(nil), m...)
	select {
	case c.out <- cp:
		return nil
	case <-c.broken:
		return io.ErrClosedPipe
	}
}

// Close breaks the pipe for both ends.
func (c *Conn) Close() error {
	c.once.Do(func() { close(c.broken) })
	return nil
}
