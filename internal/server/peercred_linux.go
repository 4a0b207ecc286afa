package server

import (
	"fmt"
	"net"
	"syscall"
)

// peerUID is the uid of the process at the other end of a unix socket,
// as the kernel recorded it when that process connected.
func peerUID(c net.Conn) (uid uint32, known bool, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, false, nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, false, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return 0, false, fmt.Errorf("peer credentials: %w", credErr)
	}
	return cred.Uid, true, nil
}
