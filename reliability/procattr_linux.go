package main

import "syscall"

// childAttr makes the kernel kill a child when the harness dies, so an
// interrupted run leaves no gateway, worker or nginx behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
