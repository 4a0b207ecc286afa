//go:build unix

package e2e

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/svc-dev/svc/internal/harness"
)

// TestPtyNoTerminalQueries runs svc commands on a pseudo-terminal that,
// like a pipe-backed CI terminal or `script` without a real terminal
// behind it, never answers a query. A command that asks the terminal
// something (its background colour, the cursor position) at start-up
// waits for an answer that never comes: bubbletea v1 did so from a
// package init, stalling every command, even `svc version`, for 5 s.
// Each command must send no query, and finish well before such a stall
// would end: the bound is far from both, since a loaded machine takes
// over a second to start a process on a pty.
func TestPtyNoTerminalQueries(t *testing.T) {
	for _, args := range [][]string{
		{"version"},
		{"workers", "--help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, took := runOnPty(t, args...)
			t.Logf("svc %s took %s on a silent pty", strings.Join(args, " "), took.Round(time.Millisecond))
			for _, q := range []string{"\x1b]11;?", "\x1b]10;?", "\x1b[6n", "\x1b[c"} {
				if i := strings.Index(out, q); i >= 0 {
					t.Errorf("svc %s queried the terminal with %q: %q…", strings.Join(args, " "), q, out[:min(len(out), i+80)])
				}
			}
			if took > 3*time.Second {
				t.Errorf("svc %s took %s on a terminal that does not answer queries, want under 3s", strings.Join(args, " "), took.Round(time.Millisecond))
			}
			if !strings.Contains(out, "svc") {
				t.Errorf("svc %s printed nothing recognisable:\n%q", strings.Join(args, " "), out)
			}
		})
	}
}

// runOnPty runs svc with args as the session leader of a new pseudo-terminal,
// which is its controlling terminal and its stdin, stdout and stderr, and
// returns everything it wrote and how long it ran. Nothing is ever written
// to the terminal's input.
func runOnPty(t *testing.T, args ...string) (string, time.Duration) {
	t.Helper()
	cmd := exec.Command("svc", args...)
	// A terminal that queries are sent to: not screen, tmux or dumb, whose
	// TERM some libraries take as a reason not to ask.
	cmd.Env = append(os.Environ(), "TERM=xterm-256color", "NO_COLOR=", "CLICOLOR_FORCE=")
	attrs := harness.SysProcAttr()
	if attrs == nil {
		attrs = &syscall.SysProcAttr{}
	}
	// Its own session, with the pty as controlling terminal and its
	// process group in the foreground: what a shell in a terminal gives it,
	// and the condition under which libraries dare to query.
	attrs.Setsid, attrs.Setctty, attrs.Ctty = true, true, 0
	start := time.Now()
	ptmx, err := pty.StartWithAttrs(cmd, &pty.Winsize{Rows: 24, Cols: 80}, attrs)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()

	// A hung child is killed rather than hanging the test.
	killer := time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Kill() })
	defer killer.Stop()

	var out bytes.Buffer
	copied := make(chan struct{})
	go func() {
		// Reading ends with EIO once the child and its descendants have
		// closed the terminal.
		_, _ = io.Copy(&out, ptmx)
		close(copied)
	}()
	err = cmd.Wait()
	took := time.Since(start)
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
		t.Fatal("the pty did not close after svc exited")
	}
	if err != nil {
		t.Fatalf("svc %s: %v\n%q", strings.Join(args, " "), err, out.String())
	}
	return out.String(), took
}
