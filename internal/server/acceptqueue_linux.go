package server

import (
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// takeAcceptQueue accepts the connections queued on ln without waiting:
// the listening socket is non-blocking, so accept4 says EAGAIN once the
// queue is empty. Go's own Accept cannot do this: with a deadline already
// past it fails before it looks at the queue.
func takeAcceptQueue(ln net.Listener) []net.Conn {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var fds []int
	_ = rc.Control(func(fd uintptr) {
		for {
			nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			switch err {
			case nil:
				fds = append(fds, nfd)
			case unix.EINTR, unix.ECONNABORTED:
				// One given up before it was taken; the rest still wait.
			default:
				return
			}
		}
	})
	conns := make([]net.Conn, 0, len(fds))
	for _, fd := range fds {
		f := os.NewFile(uintptr(fd), "queued")
		c, err := net.FileConn(f) // a duplicate, registered with the poller
		_ = f.Close()
		if err == nil {
			conns = append(conns, c)
		}
	}
	return conns
}
