package sock

import (
	"io"
	"syscall"
	"unsafe"
)

const supported = true

// readNow is one raw read into c.rbuf; false asks the poller to wait until
// the socket is readable and call again.
func (c *Conn) readNow(fd uintptr) bool {
	for {
		c.reads++
		n, e := call(c.reads, syscall.SYS_READ, fd, c.rbuf)
		switch e {
		case 0:
			c.rn = int(n)
			if n == 0 {
				c.rerr = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rerr = e
		return true
	}
}

// writeNow writes what it can of the rest of c.wbuf; false asks the poller
// to wait until the socket is writable and call again.
func (c *Conn) writeNow(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		c.writes++
		n, e := call(c.writes, syscall.SYS_WRITE, fd, c.wbuf[c.wn:])
		switch e {
		case 0:
			c.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.werr = e
			return true
		}
	}
	return true
}

// call makes a read or write of p, the nth of its kind on the connection:
// raw, but for every cookedEvery-th through the scheduler.
func call(n uint32, trap, fd uintptr, p []byte) (uintptr, syscall.Errno) {
	if n%cookedEvery == 0 {
		r, _, e := syscall.Syscall(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		return r, e
	}
	r, _, e := syscall.RawSyscall(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return r, e
}
