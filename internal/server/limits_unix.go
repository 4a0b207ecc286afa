//go:build unix

package server

import (
	"fmt"
	"syscall"
)

// raiseOpenFiles raises the soft limit on open files to the hard one (Go
// does it too on Linux, but not everywhere, and not for every runtime
// setting) and returns both.
func raiseOpenFiles() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("read the open-file limit: %w", err)
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return uint64(lim.Cur), uint64(lim.Max), fmt.Errorf("raise the open-file limit: %w", err)
		}
		lim = raised
	}
	return uint64(lim.Cur), uint64(lim.Max), nil
}
