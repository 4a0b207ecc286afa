package cli

import (
	"os"
	"slices"
	"syscall"
	"testing"
)

// A process started ignoring SIGHUP (nohup) keeps ignoring it: watching
// it would undo what its starter asked for.
func TestStopSignalsLeaveAnIgnoredHangupAlone(t *testing.T) {
	none := func(os.Signal) bool { return false }
	if got := stopSignals(none); !slices.Contains(got, os.Signal(syscall.SIGHUP)) {
		t.Fatalf("stop signals %v of a process that does not ignore SIGHUP", got)
	}
	hangup := func(s os.Signal) bool { return s == syscall.SIGHUP }
	if got := stopSignals(hangup); slices.Contains(got, os.Signal(syscall.SIGHUP)) || len(got) != 2 {
		t.Fatalf("stop signals %v of a process started under nohup", got)
	}
}
