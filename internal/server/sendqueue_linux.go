package server

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// limitSendQueue sets how many bytes conn's socket may hold unsent
// (TCP_NOTSENT_LOWAT); 0 is the system's default.
func limitSendQueue(conn net.Conn, n int) {
	raw, ok := rawConn(conn)
	if !ok {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, n)
	})
}

// unacknowledged is how many bytes conn's socket holds that its peer has
// not acknowledged, sent or not (SIOCOUTQ).
func unacknowledged(conn net.Conn) (int, bool) {
	raw, ok := rawConn(conn)
	if !ok {
		return 0, false
	}
	n, err := -1, error(nil)
	if cerr := raw.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); cerr != nil || err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

func rawConn(conn net.Conn) (syscall.RawConn, bool) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil, false
	}
	raw, err := sc.SyscallConn()
	return raw, err == nil
}
