package server

import (
	"fmt"
	"net"
	"syscall"
)

// peerUID is the uid of the process at the other end of a unix socket,
// as the kernel recorded it when that process connected.
func peerUID(c net.Conn) (uid uint32, known bool, err error) {
	cred, err := peerCred(c)
	if cred == nil || err != nil {
		return 0, false, err
	}
	return cred.Uid, true, nil
}

// peerPID is the pid of the process at the other end of a unix socket,
// as the kernel recorded it when that process connected.
func peerPID(c net.Conn) (pid int, known bool) {
	cred, err := peerCred(c)
	if cred == nil || err != nil || cred.Pid <= 0 {
		return 0, false
	}
	return int(cred.Pid), true
}

// peerCred is the credentials of the other end of a unix socket; nil for
// another kind of connection.
func peerCred(c net.Conn) (*syscall.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return nil, fmt.Errorf("peer credentials: %w", credErr)
	}
	return cred, nil
}
