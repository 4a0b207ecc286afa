package fleet

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

// heartbeat sends the worker's report as the agent does.
func (fw *fakeWorker) heartbeat(hb api.Heartbeat) {
	b, _ := json.Marshal(hb)
	fw.sess.SendControl(link.TypeHeartbeat, b)
	synctest.Wait()
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A worker whose heartbeats are late (frozen, say) is sent nothing new
// while a punctual worker can take the request, even a busy one: the
// request waits for the punctual worker rather than go where it may
// never start.
func TestLateWorkerIsPassedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Heartbeat: 5 * time.Second, Hold: 2 * time.Second})
		frozen := h.worker("o", "frozen", 4, chat("m"))
		alive := h.worker("o", "alive", 1, chat("m"))
		time.Sleep(6 * time.Second)
		alive.heartbeat(api.Heartbeat{})
		time.Sleep(5 * time.Second) // frozen: 11 s without a heartbeat, two beats missed
		alive.heartbeat(api.Heartbeat{})
		h.expect(frozen.id, "o", api.StatusStale)

		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		if err != nil || l.Worker.ID != alive.id {
			t.Fatalf("with a punctual worker free: %+v %v", l, err)
		}
		// The punctual worker is busy now: the next request waits for it
		// and, when its slot stays taken, is refused rather than sent to
		// the late worker.
		if l2, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"}); status(err) != 429 {
			t.Fatalf("with the punctual worker busy: %+v %v, want 429", l2, err)
		}
		l.Release(Succeeded)

		// Its heartbeats back, the worker takes requests again.
		frozen.heartbeat(api.Heartbeat{})
		h.expect(frozen.id, "o", api.StatusHealthy)
		l, err = h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		if err != nil || l.Worker.ID != frozen.id {
			t.Fatalf("after its heartbeat: %+v %v", l, err)
		}
		l.Release(Succeeded)
	})
}

// The leases on a worker learn when its heartbeats go late, within a
// sweep, so that requests without output can move; a lease granted after
// the heartbeats resumed does not.
func TestLeasesLearnTheirWorkerIsLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Heartbeat: 5 * time.Second})
		w := h.worker("o", "w", 2, chat("m"))
		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(Neutral)
		start := time.Now()
		h.conns.Go(func() { _ = h.f.Run(h.ctx) })
		<-l.Late()
		if d := time.Since(start); d <= 10*time.Second || d > 11*time.Second {
			t.Fatalf("the lease learnt its worker was late after %v, want within a second of 10s", d)
		}
		w.heartbeat(api.Heartbeat{})
		l2, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		defer l2.Release(Neutral)
		if closed(l2.Late()) {
			t.Fatal("a lease granted after the heartbeat resumed says its worker is late")
		}
	})
}

// A worker whose engine stopped answering says so in its heartbeat: the
// models of that engine go to other workers, or get a 503 when none has
// them, and its other models are served as before. The stall and the
// recovery are worker events.
func TestStalledEngineHoldsBackItsModels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: time.Second})
		a := h.worker("o", "a", 2, chat("m"), embed("e"), chat("solo"))
		b := h.worker("o", "b", 2, chat("m"))
		a.heartbeat(api.Heartbeat{Stalled: []string{"m", "solo"}})
		h.expect(a.id, "o", api.StatusUnhealthy)
		ev := h.ev.find(api.EventEngineStalled, false)
		if ev == nil || !slices.Equal(ev.Metadata["models"].([]string), []string{"m", "solo"}) {
			t.Fatalf("engine_stalled event %+v", ev)
		}

		for range 2 {
			l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
			if err != nil || l.Worker.ID != b.id {
				t.Fatalf("m while a's engine stalls: %+v %v", l, err)
			}
			defer l.Release(Succeeded)
		}
		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "e"})
		if err != nil || l.Worker.ID != a.id {
			t.Fatalf("a model of another engine: %+v %v", l, err)
		}
		l.Release(Succeeded)
		start := time.Now()
		var ae *api.Error
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "solo"}); !errors.As(err, &ae) ||
			ae.Code != api.CodeWorkersUnhealthy || ae.RetryAfter <= 0 || time.Since(start) != 0 {
			t.Fatalf("a model only the stalled engine has: %v after %v", err, time.Since(start))
		}
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "solo", Pin: a.id}); !errors.As(err, &ae) || ae.Code != api.CodeWorkersUnhealthy {
			t.Fatalf("pinned to the stalled engine: %v", err)
		}

		a.heartbeat(api.Heartbeat{})
		h.expect(a.id, "o", api.StatusHealthy)
		if ev := h.ev.find(api.EventEngineRecovered, false); ev == nil || !slices.Equal(ev.Metadata["models"].([]string), []string{"m", "solo"}) {
			t.Fatalf("engine_recovered event %+v", ev)
		}
		l, err = h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "solo"})
		if err != nil || l.Worker.ID != a.id {
			t.Fatalf("after the engine answered again: %+v %v", l, err)
		}
		l.Release(Succeeded)
	})
}
