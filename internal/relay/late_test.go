package relay_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/relay"
)

// The fleet's heartbeat is 5 s, so a worker is late 10 s after its last
// heartbeat, and the fleet's sweep notices within a second more.
const lateBy = 11 * time.Second

// sweep runs the fleet's time-driven changes until the test ends.
func (h *harness) sweep() {
	h.conns.Go(func() { _ = h.f.Run(h.ctx) })
}

// beat sends heartbeats every 5 s, as a live worker does, until the test
// ends.
func (w *worker) beat() {
	hb, _ := json.Marshal(api.Heartbeat{})
	w.h.conns.Go(func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-w.h.ctx.Done():
				return
			case <-t.C:
				w.sess.SendControl(link.TypeHeartbeat, hb)
			}
		}
	})
}

// frozen is a worker that takes a request and never answers: its process
// stopped.
func frozen(ctx context.Context, _ *link.Stream, _ api.LinkRequest, _ []byte) { <-ctx.Done() }

// A stream on a worker that froze before any output moves to another
// worker once the frozen one's heartbeats are late, not when its link
// gives up.
func TestStreamMovesOffAFrozenWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.sweep()
		stuck := h.worker("stuck", 4, frozen)
		start := time.Now()
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil || st.Worker == nil || st.Worker.ID != stuck.id {
			t.Fatalf("stream %+v %v", st, err)
		}
		live := h.worker("live", 4, answer("moved along", 0))
		live.beat()
		client := &events{}
		st.Write(client)
		if d := time.Since(start); d != lateBy {
			t.Errorf("the stream moved after %v, want %v", d, lateBy)
		}
		if !strings.Contains(strings.Join(client.got, ""), "moved") || !strings.HasSuffix(client.got[len(client.got)-1], "[DONE]") {
			t.Fatalf("events %q", client.got)
		}
		if row := h.only(); row.StatusCode != 200 || string(row.WorkerID) != live.id || row.Attempts != 2 {
			t.Fatalf("row %+v", row)
		}
	})
}

// A non-streaming request moves the same way.
func TestUnaryMovesOffAFrozenWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.sweep()
		h.worker("stuck", 4, frozen)
		done := make(chan error, 1)
		start := time.Now()
		var rep *relay.Reply
		go func() {
			var err error
			rep, err = h.rl.Start(chatRequest("req-1", false)).Unary()
			done <- err
		}()
		synctest.Wait()
		live := h.worker("live", 4, answer("moved along", 0))
		live.beat()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != lateBy {
			t.Errorf("the request moved after %v, want %v", d, lateBy)
		}
		if rep.Worker.ID != live.id || !strings.Contains(string(rep.Body), "moved along") {
			t.Fatalf("reply %+v", rep)
		}
		if row := h.only(); row.StatusCode != 200 || string(row.WorkerID) != live.id || row.Attempts != 2 {
			t.Fatalf("row %+v", row)
		}
	})
}

// With no other worker to take it, a request stays on the late worker:
// one that is only slow to report still answers it.
func TestLateWorkerWithNoOtherKeepsItsRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.sweep()
		h.worker("slow", 4, answer("slowly", 20*time.Second))
		rep, err := h.rl.Start(chatRequest("req-1", false)).Unary()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(rep.Body), "slowly") {
			t.Fatalf("reply %s", rep.Body)
		}
		if row := h.only(); row.StatusCode != 200 || row.Attempts != 1 {
			t.Fatalf("row %+v", row)
		}
	})
}

// A stream that has had output stays on its worker when the heartbeats
// go late: moving it would repeat what the client has.
func TestStreamWithOutputStaysOnALateWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.sweep()
		h.worker("pausing", 4, func(ctx context.Context, st *link.Stream, req api.LinkRequest, _ []byte) {
			_ = st.Send(ctx, chunk("before ", ""))
			if !sleep(ctx, 20*time.Second) {
				return
			}
			_ = st.Send(ctx, chunk("after", "stop"))
			end(ctx, st, api.Result{Status: 200, Usage: usageOf(7, 2)})
		})
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		live := h.worker("live", 4, answer("elsewhere", 0))
		live.beat()
		client := &events{}
		st.Write(client)
		got := strings.Join(client.got, "")
		if !strings.Contains(got, "before") || !strings.Contains(got, "after") || strings.Contains(got, "elsewhere") {
			t.Fatalf("events %q", client.got)
		}
		if row := h.only(); row.StatusCode != 200 || string(row.WorkerID) == live.id || row.Attempts != 1 {
			t.Fatalf("row %+v", row)
		}
	})
}
