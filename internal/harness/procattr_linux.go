package harness

import "syscall"

// SysProcAttr makes the kernel kill a child when the process that started
// it dies, so a run that is killed or times out leaves no gateway, worker
// or engine behind. It is a fresh value each call, for the caller to add
// to.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
