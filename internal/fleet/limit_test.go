package fleet

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/limit"
)

// serveFor leases a slot for need, holds it for d and releases it with o.
func (h *harness) serveFor(need Need, d time.Duration, o Outcome) {
	h.t.Helper()
	l, err := h.f.Acquire(h.ctx, need)
	if err != nil {
		h.t.Fatal(err)
	}
	time.Sleep(d)
	l.Release(o)
}

// slots is how many requests for model worker id takes at once now.
func (h *harness) slots(org, id, model string) int {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	return h.f.orgs[org].workers[id].slots(model)
}

// A worker whose latency rises gets fewer requests at once than its
// max_concurrent; failed and cancelled requests teach the limit nothing,
// and its latency falling back restores its slots.
func TestAdaptiveLimitHoldsBackSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: 100 * time.Millisecond, FailuresBeforeUnhealthy: 100,
			Limit: limit.Config{Floor: 2, MinSamples: 1, Window: time.Nanosecond}})
		fw := h.worker("o", "w", 32, chat("m"), chat("other"))
		need := Need{OrgID: "o", Model: "m"}
		for range 3 {
			h.serveFor(need, 10*time.Millisecond, Succeeded)
		}
		if got := h.slots("o", fw.id, "m"); got != 32 {
			t.Fatalf("slots at the no-load latency = %d, want 32", got)
		}
		// Slow failures and cancels say nothing of the engine's latency.
		for range 10 {
			h.serveFor(need, time.Second, Failed)
			h.serveFor(need, time.Second, Neutral)
		}
		if got := h.slots("o", fw.id, "m"); got != 32 {
			t.Fatalf("slots after failures = %d, want 32", got)
		}
		// Windows (one request each here) four times slower halve the
		// limit down to the floor, where the engine's new latency will be
		// learnt.
		for range 4 {
			h.serveFor(need, 40*time.Millisecond, Succeeded)
		}
		if got := h.slots("o", fw.id, "m"); got != 2 {
			t.Fatalf("slots after latency quadrupled = %d, want the floor 2", got)
		}
		if got := h.slots("o", fw.id, "other"); got != 32 {
			t.Fatalf("another model's slots = %d, want 32", got)
		}
		limits := map[string]int{}
		for _, l := range h.f.ConcurrencyLimits() {
			if l.OrgID == "o" && l.WorkerID == fw.id && l.WorkerName == "w" {
				limits[l.Model] = l.Limit
			}
		}
		if len(limits) != 2 || limits["m"] != 2 || limits["other"] != 32 {
			t.Fatalf("ConcurrencyLimits: %v", limits)
		}
		// Two in flight fill the limit: a third waits out the hold.
		a, err := h.f.Acquire(h.ctx, need)
		if err != nil {
			t.Fatal(err)
		}
		b, err := h.f.Acquire(h.ctx, need)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = h.f.Acquire(h.ctx, need)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusTooManyRequests || time.Since(start) != 100*time.Millisecond {
			t.Fatalf("third request: %v after %v", err, time.Since(start))
		}
		a.Release(Neutral)
		b.Release(Neutral)
		for range 10 {
			h.serveFor(need, 10*time.Millisecond, Succeeded)
		}
		if got := h.slots("o", fw.id, "m"); got != 32 {
			t.Fatalf("slots after recovery = %d, want 32", got)
		}
	})
}

// A worker of few slots keeps them all, however slow it gets.
func TestAdaptiveLimitKeepsSmallWorkersWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Limit: limit.Config{MinSamples: 1, Window: time.Nanosecond}})
		fw := h.worker("o", "w", 4, chat("m"))
		need := Need{OrgID: "o", Model: "m"}
		h.serveFor(need, time.Millisecond, Succeeded)
		for range 10 {
			h.serveFor(need, time.Second, Succeeded)
		}
		if got := h.slots("o", fw.id, "m"); got != 4 {
			t.Fatalf("slots = %d, want 4", got)
		}
	})
}

// Behind a queue that would not drain within the hold a request is
// refused at once, with a Retry-After sized to the backlog; the first to
// queue still waits out a brief spike.
func TestBackedUpQueueRefusesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: time.Second})
		h.worker("o", "w", 1, chat("m"))
		need := Need{OrgID: "o", Model: "m"}
		h.serveFor(need, 1500*time.Millisecond, Succeeded)
		busy, err := h.f.Acquire(h.ctx, need)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := h.f.Acquire(h.ctx, need)
			if err == nil {
				l.Release(Succeeded)
			}
			got <- err
		}()
		synctest.Wait() // queued
		start := time.Now()
		_, err = h.f.Acquire(h.ctx, need)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Kind != api.KindCapacity || ae.QueueDepth != 1 || ae.RetryAfter != 3*time.Second {
			t.Fatalf("err = %#v", err)
		}
		// A stream's error event has no Retry-After: the message says it.
		if !strings.HasSuffix(ae.Message, "is busy; retry in 3 s") {
			t.Fatalf("message %q", ae.Message)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("refused after %v, want at once", waited)
		}
		// The queued request is served when the slot frees within its hold.
		time.Sleep(500 * time.Millisecond)
		busy.Release(Succeeded)
		if err := <-got; err != nil {
			t.Fatalf("queued request: %v", err)
		}
	})
}

// Admit answers a backed-up queue's 429 as Acquire does, queueing nothing,
// and lets through whatever the full path should judge.
func TestAdmitRefusesBehindABackedUpQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: time.Second})
		h.worker("o", "w", 1, chat("m"), embed("e"))
		need := Need{OrgID: "o", Model: "m", Capability: api.CapChat}
		if err := h.f.Admit(need); err != nil {
			t.Fatalf("idle fleet: %v", err)
		}
		h.serveFor(need, 1500*time.Millisecond, Succeeded)
		busy, err := h.f.Acquire(h.ctx, need)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.f.Admit(need); err != nil {
			t.Fatalf("busy slot, empty queue: %v", err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := h.f.Acquire(h.ctx, need)
			if err == nil {
				l.Release(Succeeded)
			}
			got <- err
		}()
		synctest.Wait() // queued
		_, want := h.f.Acquire(h.ctx, need)
		start := time.Now()
		err = h.f.Admit(need)
		var ae, wae *api.Error
		if !errors.As(err, &ae) || !errors.As(want, &wae) || !reflect.DeepEqual(ae, wae) {
			t.Fatalf("Admit = %#v, Acquire = %#v", err, want)
		}
		if ae.Kind != api.KindCapacity || ae.QueueDepth != 1 || ae.RetryAfter != 3*time.Second {
			t.Fatalf("err = %#v", ae)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("refused after %v, want at once", waited)
		}
		h.f.mu.Lock()
		depth := h.f.orgs["o"].queues["m"].l.Len()
		h.f.mu.Unlock()
		if depth != 1 {
			t.Fatalf("queue holds %d after Admit, want 1", depth)
		}
		// What only the full path answers is let through: another model,
		// the wrong endpoint, an unknown organisation or model, a pinned
		// request, one needing a moderator no worker has.
		for _, n := range []Need{
			{OrgID: "o", Model: "e", Capability: api.CapEmbeddings},
			{OrgID: "o", Model: "m", Capability: api.CapEmbeddings},
			{OrgID: "x", Model: "m", Capability: api.CapChat},
			{OrgID: "o", Model: "nope", Capability: api.CapChat},
			{OrgID: "o", Model: "m", Capability: api.CapChat, Pin: busy.Worker.ID},
			{OrgID: "o", Model: "m", Capability: api.CapChat, Moderator: "guard", Feature: api.FeatureModeration},
		} {
			if err := h.f.Admit(n); err != nil {
				t.Fatalf("Admit(%+v) = %v", n, err)
			}
		}
		time.Sleep(500 * time.Millisecond)
		busy.Release(Succeeded)
		if err := <-got; err != nil {
			t.Fatalf("queued request: %v", err)
		}
		if err := h.f.Admit(need); err != nil {
			t.Fatalf("drained queue: %v", err)
		}
	})
}

// Streams are judged against other streams: long streams after short
// unstreamed answers are not queueing, and streams that slow down are.
func TestAdaptiveLimitJudgesStreamsAmongStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: 100 * time.Millisecond, FailuresBeforeUnhealthy: 100,
			Limit: limit.Config{Floor: 2, MinSamples: 1, Window: time.Nanosecond}})
		fw := h.worker("o", "w", 32, chat("m"))
		need := Need{OrgID: "o", Model: "m"}
		stream := func(d time.Duration) {
			l, err := h.f.Acquire(h.ctx, need)
			if err != nil {
				t.Fatal(err)
			}
			l.Streamed()
			time.Sleep(d)
			l.Release(Succeeded)
		}
		for range 5 {
			h.serveFor(need, time.Millisecond, Succeeded)
		}
		for range 10 {
			stream(200 * time.Millisecond)
		}
		if got := h.slots("o", fw.id, "m"); got != 32 {
			t.Fatalf("slots after long streams = %d, want 32", got)
		}
		for range 4 {
			stream(800 * time.Millisecond)
		}
		if got := h.slots("o", fw.id, "m"); got != 2 {
			t.Fatalf("slots after the streams slowed fourfold = %d, want the floor 2", got)
		}
	})
}

// The requests waiting for a model show in the queue_depth of the workers
// that may serve them: all of them on a model's only worker, shared by
// slots among several, and a pinned one on its worker alone.
func TestQueueDepthPerWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: time.Hour})
		only := h.worker("o", "only", 1, chat("solo"))
		small := h.worker("o", "small", 1, chat("shared"))
		big := h.worker("o", "big", 3, chat("shared"))
		depth := func() map[string]int {
			out := map[string]int{}
			for _, w := range h.f.Workers("o") {
				out[w.WorkerID] = w.QueueDepth
			}
			return out
		}
		var leases []*Lease
		take := func(need Need) {
			l, err := h.f.Acquire(h.ctx, need)
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, l)
		}
		// Every slot busy.
		take(Need{OrgID: "o", Model: "solo"})
		for range 4 {
			take(Need{OrgID: "o", Model: "shared"})
		}
		wait := func(need Need, n int) {
			for range n {
				go func() {
					if l, err := h.f.Acquire(h.ctx, need); err == nil {
						l.Release(Neutral)
					}
				}()
			}
		}
		wait(Need{OrgID: "o", Model: "solo"}, 3)
		wait(Need{OrgID: "o", Model: "shared"}, 4)
		wait(Need{OrgID: "o", Model: "shared", Pin: small.id}, 1)
		synctest.Wait()
		got := depth()
		if got[only.id] != 3 || got[small.id] != 1+1 || got[big.id] != 3 {
			t.Fatalf("queue depths: only %d, small %d, big %d; want 3, 2, 3", got[only.id], got[small.id], got[big.id])
		}
		for _, l := range leases {
			l.Release(Neutral)
		}
		synctest.Wait()
		if got := depth(); got[only.id]+got[small.id]+got[big.id] != 0 {
			t.Fatalf("queue depths after the queue drained: %v", got)
		}
	})
}

// A queue that has outgrown its hold is in overload: for refusedMemory
// after its refusal it lets a new request wait only as long as two slots
// take to free up, where a spike may fill the whole hold. A queue that is
// merely long, as a fixed number of clients keeps it, is not refused.
func TestOverloadedQueueShortensTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: 100 * time.Millisecond, Limit: limit.Config{Floor: 4}})
		h.worker("o", "w", 4, chat("m"))
		need := Need{OrgID: "o", Model: "m"}
		h.serveFor(need, 40*time.Millisecond, Succeeded) // 10 ms a slot
		var busy []*Lease
		for range 4 {
			l, err := h.f.Acquire(h.ctx, need)
			if err != nil {
				t.Fatal(err)
			}
			busy = append(busy, l)
		}
		// Waiters keep their slots until done closes, and give them back
		// as Neutral, so the model's service time stays 40 ms.
		done := make(chan struct{})
		got := make(chan error, 64)
		queue := func(n int) {
			for range n {
				go func() {
					l, err := h.f.Acquire(h.ctx, need)
					if err == nil {
						<-done
						l.Release(Neutral)
					}
					got <- err
				}()
			}
			synctest.Wait()
		}
		depth := func() int {
			h.f.mu.Lock()
			defer h.f.mu.Unlock()
			return h.f.orgs["o"].queues["m"].l.Len()
		}
		refusedAtOnce := func(wantDepth int) {
			t.Helper()
			start := time.Now()
			_, err := h.f.Acquire(h.ctx, need)
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Kind != api.KindCapacity || ae.QueueDepth != wantDepth {
				t.Fatalf("err = %#v, want the capacity 429 at depth %d", err, wantDepth)
			}
			if waited := time.Since(start); waited != 0 {
				t.Fatalf("refused after %v, want at once", waited)
			}
		}
		// A long queue that still drains within the hold is served, however
		// long it has stood.
		queue(5)
		time.Sleep(60 * time.Millisecond)
		queue(1)
		if d := depth(); d != 6 {
			t.Fatalf("%d queued, want 6", d)
		}
		// Eleven waiting are more than the hold's work: the next is refused.
		queue(5)
		refusedAtOnce(11)
		// Two slots free up and two waiters take them. Nine waiting (90 ms)
		// would let a spike in, but the queue is in overload now: 20 ms, two
		// slots' time, is what it lets a new request wait.
		busy[0].Release(Neutral)
		busy[1].Release(Neutral)
		synctest.Wait()
		if d := depth(); d != 9 {
			t.Fatalf("%d queued after two slots freed, want 9", d)
		}
		refusedAtOnce(9)
		if err := h.f.Admit(need); err == nil {
			t.Fatal("Admit let a request in behind a queue in overload")
		}
		// The waiters' holds run out; refusedMemory after the last refusal
		// a spike has the whole hold again.
		time.Sleep(refusedMemory + 200*time.Millisecond)
		if d := depth(); d != 0 {
			t.Fatalf("%d still queued after their holds", d)
		}
		queue(9)
		if d := depth(); d != 9 {
			t.Fatalf("later spike: %d queued, want 9", d)
		}
		close(done)
		busy[2].Release(Neutral)
		busy[3].Release(Neutral)
		served, refused := 0, 0
		for range 5 + 1 + 5 + 9 {
			var ae *api.Error
			switch err := <-got; {
			case err == nil:
				served++
			case errors.As(err, &ae) && ae.Kind == api.KindCapacity:
				refused++
			default:
				t.Fatalf("queued request: %v", err)
			}
		}
		// The two that took the freed slots, and the later spike.
		if served != 2+9 || refused != 9 {
			t.Fatalf("served %d and refused %d, want 11 and 9", served, refused)
		}
	})
}

// A fixed number of clients, each sending its next request when the last
// is answered, keeps a queue as long as it runs; it is not overload, and
// none of them is refused.
func TestClosedLoopIsNotOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: 2 * time.Second, Limit: limit.Config{Floor: 4}})
		h.worker("o", "w", 4, chat("m"))
		need := Need{OrgID: "o", Model: "m"}
		h.serveFor(need, 40*time.Millisecond, Succeeded)
		errs := make(chan error, 16)
		for range 16 {
			go func() {
				for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
					l, err := h.f.Acquire(h.ctx, need)
					if err != nil {
						errs <- err
						return
					}
					time.Sleep(40 * time.Millisecond)
					l.Release(Neutral)
				}
				errs <- nil
			}()
		}
		for range 16 {
			if err := <-errs; err != nil {
				t.Fatalf("a client of the closed loop: %v", err)
			}
		}
	})
}

// While the only worker's link is down within its grace, requests wait for
// it as for busy slots; the queue's backlog is not judged against the
// slots of no worker, which would refuse every request after the first.
func TestBacklogWaitsForAWorkerInGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Four waiting are 1.5 s of work on four slots, within the hold;
		// on one, 6 s.
		h := newHarness(t, Config{Grace: 5 * time.Second, Hold: 2 * time.Second})
		w := h.worker("o", "w", 4, chat("m"))
		need := Need{OrgID: "o", Model: "m"}
		h.serveFor(need, 1500*time.Millisecond, Succeeded)
		_ = w.conn.Close()
		h.expect(w.id, "o", api.StatusStale)
		got := make(chan error, 4)
		for range 4 {
			go func() {
				l, err := h.f.Acquire(h.ctx, need)
				if err == nil {
					l.Release(Succeeded)
				}
				got <- err
			}()
		}
		synctest.Wait() // all four wait
		w.connect("o")
		for range 4 {
			if err := <-got; err != nil {
				t.Fatalf("request during a brief drop: %v", err)
			}
		}
	})
}
