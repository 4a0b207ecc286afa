package e2e

import "syscall"

// childAttr makes the kernel kill a child when the test binary dies, so a
// test run that is killed or times out leaves no gateway or worker behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
