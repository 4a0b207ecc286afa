//go:build !linux

package harness

import "syscall"

// SysProcAttr is nil where the kernel cannot kill a child with its parent.
func SysProcAttr() *syscall.SysProcAttr { return nil }
