package e2e

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/harness"
	"github.com/svc-dev/svc/internal/tui"
)

// lockedBuffer is the dashboard's terminal: the program writes while the
// test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestTopShowsTheFleet runs the dashboard against a real gateway and
// worker: the worker and a streaming request in flight must appear, drawn
// from the gateway's real answers, and q must end it.
func TestTopShowsTheFleet(t *testing.T) {
	s, key := gateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A request that runs for a while, to be seen in flight.
	go func() {
		body := `{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"sim: tokens=4000 tps=100"}]}`
		r := s.async("POST", "/v1/chat/completions", body, bearer(key))
		select {
		case <-r:
		case <-ctx.Done():
		}
	}()

	in, typeKeys := io.Pipe()
	var out lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- tui.Run(ctx, client.New(s.URL, key), tui.Options{Interval: 200 * time.Millisecond, Target: s.URL}, in, &out)
	}()
	if !harness.Eventually(15*time.Second, func() bool {
		return containsAll(out.String(), "sim-box", "sim-chat", "running", "1/1 workers healthy")
	}) {
		t.Fatalf("the dashboard never showed the worker and the request:\n%s", out.String())
	}
	// A model name typed in the first pane filters it: its q quits nothing.
	if _, err := typeKeys.Write([]byte("qwen")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("typing qwen ended the dashboard (%v)", err)
	case <-time.After(time.Second):
	}
	// Two tabs keep the filter and reach the Traffic pane, where q quits.
	if _, err := typeKeys.Write([]byte("\t\tq")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("q did not end the dashboard")
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
