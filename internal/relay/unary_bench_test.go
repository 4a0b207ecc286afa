package relay_test

import (
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/relay"
)

// discardRows is a usage recorder that keeps nothing, so that a long
// benchmark does not grow.
type discardRows struct{}

func (discardRows) Record(string, api.UsageRow) {}

// BenchmarkUnary is a non-streaming request's round trip through the
// relay: a slot, the request on an in-memory link to a worker that answers
// at once, the answer completed for the client, the usage row. The HTTP
// server and the sockets are not in it; the worker's side of the link is.
func BenchmarkUnary(b *testing.B) {
	h := newHarnessOf(b)
	h.rl = relay.New(relay.Config{Fleet: h.f, Usage: discardRows{}, InFlight: h.inflight, Timing: timing})
	h.worker("gpu-1", 64, answer("hello there", 0))
	req := chatRequest("req-1", false)
	// The fleet takes in the worker's hello on a goroutine of its own.
	for deadline := time.Now().Add(5 * time.Second); ; {
		_, err := h.rl.Start(req).Unary()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		rep, err := h.rl.Start(req).Unary()
		if err != nil || rep.Late != nil || len(rep.Body) == 0 {
			b.Fatalf("reply %+v, %v", rep, err)
		}
	}
}
