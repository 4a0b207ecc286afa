package cli

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"

	"charm.land/lipgloss/v2"
	"github.com/creack/pty"
)

// On a terminal narrower than the default, the workers and models lists
// still fit: their least needed columns give way, and worker names, which
// the other commands take, are kept whole.
func TestListsFitANarrowTerminal(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/workers":                {body: "workers.json"},
		"GET /api/v1/workers/latest-version": {body: `{"version": "v1.4.0"}`},
		"GET /v1/models":                     {body: "models.json"},
	})
	for _, args := range [][]string{{"workers"}, {"models"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			ptmx, tty, err := pty.Open()
			if err != nil {
				t.Skipf("no pseudo-terminal: %v", err)
			}
			defer ptmx.Close()
			if err := pty.Setsize(tty, &pty.Winsize{Rows: 30, Cols: 60}); err != nil {
				t.Fatal(err)
			}
			var screen bytes.Buffer
			var wg sync.WaitGroup
			wg.Go(func() { _, _ = io.Copy(&screen, ptmx) })
			r := cliRun{env: map[string]string{"SVC_BASE_URL": g.URL, "SVC_API_KEY": "svc_k_test", "NO_COLOR": "1"}, tty: true, out: tty}.run(t, args...)
			_ = tty.Close()
			wg.Wait()
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			out := strings.ReplaceAll(screen.String(), "\r", "")
			if !strings.Contains(out, "NAME") && !strings.Contains(out, "ID") {
				t.Fatalf("no table:\n%s", out)
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if w := lipgloss.Width(ansi.ReplaceAllString(line, "")); w > 60 {
					t.Errorf("line of %d cells on a terminal of 60:\n%s", w, out)
				}
			}
			if args[0] == "workers" && strings.Contains(out, "…") && !strings.Contains(out, "gpu-box-1") {
				t.Errorf("a worker's name was cut:\n%s", out)
			}
		})
	}
}
