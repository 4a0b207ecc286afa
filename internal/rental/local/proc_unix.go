//go:build unix

package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const supported = true

// How long a worker has to stop after SIGTERM (its drain), and to be
// gone after SIGKILL.
const (
	termGrace = 5 * time.Second
	killGrace = 5 * time.Second
)

// lockBoot takes the boot lock of the instance in dir, waiting while
// another process's boot holds it, until ctx ends. The lock is released
// by release, or with the process.
func lockBoot(ctx context.Context, dir string) (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the boot lock: %w", err)
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			_ = f.Close()
			return nil, fmt.Errorf("take the boot lock: %w", err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// ownGroup starts the worker in a process group of its own, which Destroy
// ends as a whole. There is deliberately no parent-death signal: workers
// outlive the gateway, as cloud machines do.
func ownGroup() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// probe says whether pid is still the worker running exe and, when it
// has ended as a child of this process, how (its exit status).
func probe(pid int, exe string) (alive bool, how string) {
	// A child that exited stays a zombie, which signal 0 still finds,
	// until it is reaped.
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	switch {
	case got == pid:
		return false, describe(ws)
	case err == nil:
		return true, "" // a child of this process, running
	}
	if err := syscall.Kill(pid, 0); err != nil {
		// ESRCH: gone; EPERM: the pid is someone else's now.
		return false, ""
	}
	return runs(pid, exe), ""
}

// runs checks that pid runs exe, so that a reused pid is not taken for
// the worker. Without /proc to ask, the signal has to do.
func runs(pid int, exe string) bool {
	link, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err == nil {
		return strings.TrimSuffix(link, " (deleted)") == exe
	}
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return false // a zombie, or gone since the signal
	}
	return true
}

func describe(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		// By its name (SIGKILL): the signal's String is its description
		// ("killed"), which reads twice.
		if name := unix.SignalName(ws.Signal()); name != "" {
			return "killed by " + name
		}
		return "killed by signal " + strconv.Itoa(int(ws.Signal()))
	}
	return ""
}

// terminate ends the worker's process group: SIGTERM, then SIGKILL, and
// returns nil once the worker is gone.
func terminate(ctx context.Context, pid int, exe string) error {
	if alive, _ := probe(pid, exe); !alive {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	if gone(ctx, pid, exe, termGrace) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if gone(ctx, pid, exe, killGrace) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("worker %d still runs after SIGKILL", pid)
}

// gone waits up to d for the worker to be gone.
func gone(ctx context.Context, pid int, exe string, d time.Duration) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	deadline := time.Now().Add(d)
	for {
		if alive, _ := probe(pid, exe); !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}
