//go:build unix && !linux

package server

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

func probeable(conn net.Conn) bool {
	_, ok := conn.(syscall.Conn)
	return ok
}

// peerClosed peeks at the socket without consuming anything: a read of
// zero bytes means the client closed its end; no data yet (EAGAIN) or
// pipelined data both mean it is still there.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var buf [1]byte
	_ = raw.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == nil && n == 0:
			closed = true
		case err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR):
			closed = true // reset or otherwise broken
		}
		return true // never wait for readability
	})
	return closed
}
