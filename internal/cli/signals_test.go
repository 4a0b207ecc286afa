package cli

import (
	"os"
	"os/signal"
	"slices"
	"syscall"
	"testing"
)

// A process started ignoring SIGHUP (nohup) keeps ignoring it: watching
// it would undo what its starter asked for.
func TestStopSignalsLeaveAnIgnoredHangupAlone(t *testing.T) {
	if !slices.Contains(stopSignals(), os.Signal(syscall.SIGHUP)) {
		t.Fatal("SIGHUP is not a stop signal of a process that does not ignore it")
	}
	signal.Ignore(syscall.SIGHUP)
	defer signal.Reset(syscall.SIGHUP)
	if slices.Contains(stopSignals(), os.Signal(syscall.SIGHUP)) {
		t.Fatal("SIGHUP is watched although the process was told to ignore it")
	}
}
