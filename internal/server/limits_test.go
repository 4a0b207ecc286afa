//go:build unix

package server

import (
	"bytes"
	"log/slog"
	"strings"
	"syscall"
	"testing"
)

// The soft limit is raised to the hard one, and a hard limit below what
// the connections need is reported with the numbers.
func TestCheckOpenFiles(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
	if lim.Max > 512 {
		lowered := syscall.Rlimit{Cur: 512, Max: lim.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
			t.Skip(err)
		}
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	checkOpenFiles(log, 100)
	var now syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now)
	if now.Cur != lim.Max {
		t.Fatalf("soft limit %d, want the hard %d", now.Cur, lim.Max)
	}
	if strings.Contains(buf.String(), "level=WARN") {
		t.Fatalf("warned with room to spare: %s", buf.String())
	}
	buf.Reset()
	checkOpenFiles(log, int(lim.Max))
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "need=") || !strings.Contains(out, "hard=") {
		t.Fatalf("no warning with the numbers: %s", out)
	}
}
