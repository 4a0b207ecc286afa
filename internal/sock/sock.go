// Package sock reads and writes TCP connections with system calls the Go
// scheduler is not told of.
//
// The runtime's sysmon thread sleeps once every P is idle, and the next
// system call made through the scheduler (entersyscall) wakes it; it then
// polls every 20 µs before it sleeps again. A relay whose work comes in
// separate wakeups (a stream's chunks, requests at a moderate rate) paid
// that at each one: a futex wake, sysmon's polls and its sleep, about three
// system calls and two context switches, a fifth of the CPU of a request at
// 1,000 a second. A read or write of a non-blocking socket never blocks, so
// it needs none of what entersyscall is for (handing the P to another
// thread while the call waits); Conn makes those calls raw, and waits for
// the socket through the runtime's poller as net.Conn does, deadlines
// included.
//
// sysmon also preempts a goroutine that has run for 10 ms and polls the
// network while every P is busy. So that it does not sleep through a busy
// stretch whose only system calls are raw, a socket call goes through the
// scheduler, which wakes it, once in cookedEvery at most (see cook).
package sock

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// Conn is a net.Conn whose Read and Write make their system calls raw.
// Everything else is the connection's own.
type Conn struct {
	net.Conn
	raw syscall.RawConn

	rmu    sync.Mutex // one Read at a time owns the fields below
	rbuf   []byte
	rn     int
	rerr   error
	reads  uint32 // system calls made, for checkEvery
	readFn func(uintptr) bool

	wmu     sync.Mutex // one Write at a time owns the fields below
	wbuf    []byte
	wn      int
	werr    error
	writes  uint32
	writeFn func(uintptr) bool
}

// Wrap returns c with raw reads and writes where the platform has them
// and c is a socket, and c itself otherwise.
//
// Under the race detector it is c itself: the detector orders goroutines
// through the net package's own reads and writes (one goroutine reading
// what another wrote), which raw calls cannot tell it of, and it would
// report races the socket rules out.
func Wrap(c net.Conn) net.Conn {
	if raceEnabled {
		return c
	}
	return wrap(c)
}

// wrap is Wrap whether or not the race detector runs. Only the net
// package's TCP connections are taken: their sockets are non-blocking, which
// a raw call relies on not to hold its thread.
func wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !supported || !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	w := &Conn{Conn: c, raw: raw}
	// Bound once: a method value made per call would be allocated per call.
	w.readFn, w.writeFn = w.readNow, w.writeNow
	return w
}

// Dial is d's DialContext with the connection it makes wrapped.
func Dial(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Wrap(c), nil
	}
}

// SyscallConn reaches the socket, as the connection under it does.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }

func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rbuf, c.rn, c.rerr = p, 0, nil
	err := c.raw.Read(c.readFn)
	c.rbuf = nil
	if err != nil {
		return 0, c.opError("read", err)
	}
	if c.rerr != nil {
		return c.rn, c.opError("read", c.rerr)
	}
	return c.rn, nil
}

func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf, c.wn, c.werr = p, 0, nil
	var err error
	if len(p) > 0 {
		err = c.raw.Write(c.writeFn)
	}
	c.wbuf = nil
	switch {
	case err != nil:
		return c.wn, c.opError("write", err)
	case c.werr != nil:
		return c.wn, c.opError("write", c.werr)
	}
	return c.wn, nil
}

// opError dresses err as the connection's own Read and Write would: an
// *net.OpError, which says Timeout for a passed deadline and unwraps to
// io.EOF, os.ErrDeadlineExceeded or net.ErrClosed as theirs do.
func (c *Conn) opError(op string, err error) error {
	if err == io.EOF {
		return err
	}
	if oe, ok := err.(*net.OpError); ok {
		// The poller's own errors come dressed for "raw-read".
		err = oe.Err
	}
	if errno, ok := err.(syscall.Errno); ok {
		err = os.NewSyscallError(op, errno)
	}
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// SetLinger and CloseWrite are the TCP connection's own.
func (c *Conn) SetLinger(sec int) error {
	if l, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
		return l.SetLinger(sec)
	}
	return errNotTCP
}

func (c *Conn) CloseWrite() error {
	if w, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return w.CloseWrite()
	}
	return errNotTCP
}

var errNotTCP = errors.New("sock: not a TCP connection")
