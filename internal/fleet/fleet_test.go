package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/link/linktest"
)

type events struct {
	mu  sync.Mutex
	evs []api.WorkerEvent
}

func (e *events) RecordEvent(_ string, ev api.WorkerEvent) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

// ofType is a copy of the events of type typ, in the order recorded.
func (e *events) ofType(typ string) []api.WorkerEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []api.WorkerEvent
	for _, ev := range e.evs {
		if ev.EventType == typ {
			out = append(out, ev)
		}
	}
	return out
}

func (e *events) find(typ string, transient bool) *api.WorkerEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.evs {
		if e.evs[i].EventType == typ && e.evs[i].Transient == transient {
			return &e.evs[i]
		}
	}
	return nil
}

// harness is a fleet and its fake workers in a synctest bubble: time
// moves only when every goroutine waits, so a test sleeps through a grace
// or a hold in no time and reads the fleet once it has settled.
type harness struct {
	t     *testing.T
	f     *Fleet
	ev    *events
	ctx   context.Context
	conns sync.WaitGroup // Connect calls, waited for at cleanup
}

func newHarness(t *testing.T, cfg Config) *harness {
	h := &harness{t: t, ev: &events{}}
	cfg.Events = h.ev
	if cfg.Hold == 0 {
		cfg.Hold = 50 * time.Millisecond
	}
	if cfg.Grace == 0 {
		cfg.Grace = 200 * time.Millisecond
	}
	h.f = New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		h.conns.Wait()
	})
	h.ctx = ctx
	return h
}

// fakeWorker is a worker agent in miniature: a link session that answers
// every request with "ok from <name>".
type fakeWorker struct {
	h       *harness
	hello   api.Hello
	sess    *link.Session
	conn    *linktest.Conn
	id      string
	release chan struct{} // when set, requests wait for it
	// wrap, when set, wraps the gateway's end of each connection.
	wrap func(link.Conn) link.Conn
}

func (h *harness) worker(org, name string, maxConc int, models ...api.Model) *fakeWorker {
	fw := &fakeWorker{h: h, hello: api.Hello{Protocol: link.Protocol, Name: name, Version: "v1", MaxConcurrent: maxConc,
		SessionID: uuid.NewString(), Models: models}}
	fw.sess = link.NewSession(link.Options{Role: link.Worker, Accept: fw.serve})
	h.t.Cleanup(func() { fw.sess.Close(nil) })
	fw.connect(org)
	return fw
}

func (fw *fakeWorker) serve(ctx context.Context, st *link.Stream) {
	if _, _, err := st.ReadRequest(ctx); err != nil {
		return
	}
	if fw.release != nil {
		select {
		case <-fw.release:
		case <-ctx.Done():
			return
		}
	}
	_ = st.Send(ctx, []byte("ok from "+fw.hello.Name))
	res, _ := json.Marshal(api.Result{Status: 200})
	_ = st.End(ctx, res)
}

func (fw *fakeWorker) connect(org string) {
	gc, wc := linktest.Pipe()
	fw.conn = wc
	hello := fw.hello
	hello.Streams = fw.sess.RecvState()
	var g link.Conn = gc
	if fw.wrap != nil {
		g = fw.wrap(gc)
	}
	fw.h.conns.Go(func() { _ = fw.h.f.Connect(fw.h.ctx, org, hello, g) })
	msg, err := wc.ReadMessage()
	if err != nil {
		fw.h.t.Fatal(err)
	}
	f, _, err := link.DecodeFrame(msg)
	if err != nil {
		fw.h.t.Fatal(err)
	}
	var w api.Welcome
	if err := json.Unmarshal(f.Payload, &w); err != nil || w.Error != "" {
		fw.h.t.Fatalf("welcome %+v %v", w, err)
	}
	fw.id = w.WorkerID
	if _, err := fw.sess.Attach(wc, w.Streams); err != nil {
		fw.h.t.Fatal(err)
	}
	fw.h.expect(fw.id, org, api.StatusHealthy)
}

// fail runs n requests of model in organisation org that fail, each
// half a second after the last: n = 3 holds its worker back from it by
// default (three failures over failureSpan), as do n = 2 then n = 1.
func (h *harness) fail(org, model string, n int) {
	h.t.Helper()
	for range n {
		time.Sleep(failureSpan / 2)
		l, err := h.f.Acquire(h.ctx, Need{OrgID: org, Model: model})
		if err != nil {
			h.t.Fatal(err)
		}
		l.Release(Failed)
	}
}

// welcome connects hello to organisation org over a new pipe, and returns
// the gateway's welcome and the worker's end of the pipe.
func (h *harness) welcome(org string, hello api.Hello) (api.Welcome, *linktest.Conn) {
	h.t.Helper()
	gc, wc := linktest.Pipe()
	h.conns.Go(func() { _ = h.f.Connect(h.ctx, org, hello, gc) })
	msg, err := wc.ReadMessage()
	if err != nil {
		h.t.Fatal(err)
	}
	f, _, err := link.DecodeFrame(msg)
	if err != nil {
		h.t.Fatal(err)
	}
	var w api.Welcome
	if err := json.Unmarshal(f.Payload, &w); err != nil {
		h.t.Fatalf("welcome %s: %v", f.Payload, err)
	}
	return w, wc
}

// settled is the listing of worker id once everything in the bubble has
// run as far as it can without time passing.
func (h *harness) settled(id, org string) api.Worker {
	h.t.Helper()
	synctest.Wait()
	for _, w := range h.f.Workers(org) {
		if w.WorkerID == id {
			return w
		}
	}
	h.t.Fatalf("worker %s is not listed: %+v", id, h.f.Workers(org))
	return api.Worker{}
}

// expect fails the test unless worker id has settled in status.
func (h *harness) expect(id, org, status string) api.Worker {
	h.t.Helper()
	w := h.settled(id, org)
	if w.Status != status {
		h.t.Fatalf("worker %s is %s, want %s", id, w.Status, status)
	}
	return w
}

func chat(id string) api.Model {
	return api.Model{ID: id, Capabilities: []string{api.CapChat}, Engine: "sim"}
}

func embed(id string) api.Model {
	return api.Model{ID: id, Capabilities: []string{api.CapEmbeddings}, Engine: "sim"}
}

// run sends one request through a lease and returns what came back.
func run(t *testing.T, l *Lease) string {
	t.Helper()
	st, err := l.Open(context.Background(), []byte(`{}`), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var out string
	for {
		typ, msg, err := st.ReadMessage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if typ == link.TypeEnd {
			return out
		}
		out += string(msg)
	}
}

func status(err error) int {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.HTTPStatus()
	}
	return 0
}

func TestRoutesToAWorkerOfTheOrg(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.worker("org-a", "a1", 1, chat("m"))
		h.worker("org-b", "b1", 1, chat("m"))
		for range 5 {
			l, err := h.f.Acquire(h.ctx, Need{OrgID: "org-a", Model: "m", Capability: api.CapChat})
			if err != nil {
				t.Fatal(err)
			}
			if got := run(t, l); got != "ok from a1" {
				t.Fatalf("org-a request answered by %q", got)
			}
			l.Release(Succeeded)
		}
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "org-c", Model: "m"}); status(err) != 503 {
			t.Fatalf("org without workers: %v", err)
		}
	})
}

func TestUpFrontErrors(t *testing.T) {
	const pinned = "the worker" // stands for its id
	tests := []struct {
		name   string
		need   Need
		status int
		code   string
	}{
		{"unknown model", Need{Model: "nope", Capability: api.CapChat}, 404, "model_not_found"},
		{"embeddings model on chat", Need{Model: "e", Capability: api.CapChat}, 404, "wrong_endpoint"},
		{"chat model on embeddings", Need{Model: "m", Capability: api.CapEmbeddings}, 404, "wrong_endpoint"},
		{"pin unknown worker", Need{Model: "m", Pin: "wk_nope"}, 404, "worker_not_found"},
		{"pin worker without model", Need{Model: "zz", Pin: pinned}, 404, "model_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, Config{})
				w := h.worker("o", "w1", 1, chat("m"), embed("e"))
				tt.need.OrgID = "o"
				if tt.need.Pin == pinned {
					tt.need.Pin = w.id
				}
				_, err := h.f.Acquire(h.ctx, tt.need)
				var ae *api.Error
				if !errors.As(err, &ae) || ae.HTTPStatus() != tt.status || ae.Code != tt.code {
					t.Fatalf("err = %v", err)
				}
			})
		})
	}
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.worker("o", "w1", 1, chat("m"), embed("e"))
		var ae *api.Error
		_, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "e", Capability: api.CapChat})
		if errors.As(err, &ae); ae == nil || ae.Message != "Model e does not do chat; it is an embeddings model: use /v1/embeddings" {
			t.Fatalf("wrong-endpoint message: %v", err)
		}
	})
}

func TestLeastLoadedAndAffinity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.worker("o", "a", 4, chat("m"))
		h.worker("o", "b", 4, chat("m"))
		l1, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		l2, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		if l1.Worker.ID == l2.Worker.ID {
			t.Fatalf("two requests on one worker while the other is idle")
		}
		l1.Release(Succeeded)
		l2.Release(Succeeded)
		first, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Affinity: "conv-1"})
		for range 3 {
			l, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Affinity: "conv-1"})
			if l.Worker.ID != first.Worker.ID {
				t.Fatalf("follow-up turn went to %s, not %s", l.Worker.ID, first.Worker.ID)
			}
			defer l.Release(Succeeded)
		}
		first.Release(Succeeded)
	})
}

func TestQueueHoldThen429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: 100 * time.Millisecond})
		h.worker("o", "w", 1, chat("m"))
		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		// A second request waits, and gets the slot when it frees.
		got := make(chan *Lease, 1)
		go func() {
			l2, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Hold: 5 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- l2
		}()
		synctest.Wait() // the second request is queued
		l.Release(Succeeded)
		l2 := <-got
		if l2 == nil || l2.QueueWait < 0 {
			t.Fatal("queued request did not get the freed slot")
		}
		// With the slot held, two more wait the hold out and get 429s.
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
			})
		}
		wg.Wait()
		for _, err := range errs {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusTooManyRequests || ae.Kind != api.KindCapacity || ae.RetryAfter < time.Second {
				t.Fatalf("err = %#v", err)
			}
		}
		l2.Release(Succeeded)
	})
}

// A request waiting for a slot whose workers all go offline gets the 503
// a new request would, not a capacity 429.
func TestWaiterWhoseWorkersLeaveGets503(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Grace: 20 * time.Millisecond})
		w := h.worker("o", "w", 1, chat("m"))
		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Hold: 500 * time.Millisecond})
			done <- err
		}()
		_ = w.conn.Close()
		time.Sleep(20 * time.Millisecond) // the grace
		h.expect(w.id, "o", api.StatusOffline)
		l.Release(Failed)
		var ae *api.Error
		if err := <-done; !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusServiceUnavailable || ae.Kind == api.KindCapacity {
			t.Fatalf("err = %#v", err)
		}
	})
}

func TestCancelledWaiterLeavesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: 5 * time.Second})
		h.worker("o", "w", 1, chat("m"))
		l, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		ctx, cancel := context.WithCancel(h.ctx)
		done := make(chan error, 1)
		go func() {
			_, err := h.f.Acquire(ctx, Need{OrgID: "o", Model: "m"})
			done <- err
		}()
		synctest.Wait() // the second request is queued
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		l.Release(Succeeded)
		// The slot is free again, not lost to the cancelled waiter.
		l2, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Hold: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		l2.Release(Succeeded)
	})
}

func TestPinning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.worker("o", "a", 2, chat("m"))
		b := h.worker("o", "b", 2, chat("m"))
		for range 4 {
			l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Pin: b.id})
			if err != nil || l.Worker.ID != b.id {
				t.Fatalf("pinned lease on %v: %v", l, err)
			}
			if got := run(t, l); got != "ok from b" {
				t.Fatalf("pinned request answered by %q", got)
			}
			l.Release(Succeeded)
		}
	})
}

func TestUnhealthyHeldBackThenTriedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{HoldBack: time.Minute})
		w := h.worker("o", "w", 1, chat("m"))
		h.fail("o", "m", 3)
		h.expect(w.id, "o", api.StatusUnhealthy)
		var ae *api.Error
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"}); !errors.As(err, &ae) || ae.Code != "workers_unhealthy" || ae.RetryAfter <= 0 {
			t.Fatalf("request to an unhealthy-only model: %v", err)
		}
		if h.ev.find(api.EventHealthChanged, false) == nil {
			t.Fatal("no health_changed event")
		}
		time.Sleep(time.Minute + time.Second)
		h.f.sweep()
		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		if err != nil {
			t.Fatalf("after the hold-back: %v", err)
		}
		l.Release(Failed) // one more failure holds it back again
		h.expect(w.id, "o", api.StatusUnhealthy)
	})
}

// A hold-back is a model's: a worker that keeps failing one model (an
// engine's fault, or requests that make it fail) serves its others
// meanwhile, and is listed unhealthy; its requests of the failing model
// go to another worker that has it.
func TestHoldBackIsAModels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{HoldBack: time.Minute})
		w := h.worker("o", "w", 1, chat("bad"), chat("good"), embed("e"))
		h.fail("o", "bad", 3)
		h.expect(w.id, "o", api.StatusUnhealthy)
		var ae *api.Error
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "bad"}); !errors.As(err, &ae) || ae.Code != "workers_unhealthy" {
			t.Fatalf("the failing model: %v", err)
		}
		for _, m := range []string{"good", "e"} {
			l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: m})
			if err != nil {
				t.Fatalf("%s while another model is held back: %v", m, err)
			}
			if got := run(t, l); got != "ok from w" {
				t.Fatalf("%s: %q", m, got)
			}
			l.Release(Succeeded)
		}
		// Successes of other models do not clear the failing one's count.
		h.worker("o", "other", 1, chat("bad"))
		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "bad"})
		if err != nil || l.Worker.Name != "other" {
			t.Fatalf("the failing model with another worker that has it: %v %v", l, err)
		}
		l.Release(Succeeded)
		time.Sleep(time.Minute + time.Second)
		h.f.sweep()
		if st := h.settled(w.id, "o").Status; st == api.StatusUnhealthy {
			t.Fatal("still unhealthy after the hold-back")
		}
		l, err = h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "bad", Pin: w.id})
		if err != nil {
			t.Fatalf("the failing model after the hold-back: %v", err)
		}
		l.Release(Succeeded)
	})
}

// Requests that fail at once between successes that take a while hold
// nothing back, however many fail in a row: a worker is held back only
// when its failures go on for failureSpan with no success between.
func TestQuickFailuresBetweenSuccessesHoldNothingBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{HoldBack: time.Minute})
		w := h.worker("o", "w", 8, chat("m"))
		for range 20 {
			ok, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
				if err != nil {
					t.Fatalf("held back by quick failures between successes: %v", err)
				}
				l.Release(Failed)
				time.Sleep(100 * time.Millisecond)
			}
			ok.Release(Succeeded)
		}
		h.expect(w.id, "o", api.StatusHealthy)
		// Five failing at once are not a failing engine either; the
		// same failures going on for a second are.
		for range 5 {
			l, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
			l.Release(Failed)
		}
		h.expect(w.id, "o", api.StatusHealthy)
		time.Sleep(failureSpan)
		l, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		l.Release(Failed)
		h.expect(w.id, "o", api.StatusUnhealthy)
	})
}

// One failure soon after a hold-back holds the worker back again; one
// long after starts the count over.
func TestFailuresLongApartHoldNothingBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{HoldBack: time.Minute})
		w := h.worker("o", "w", 1, chat("m"))
		h.fail("o", "m", 3)
		h.expect(w.id, "o", api.StatusUnhealthy)
		time.Sleep(time.Minute + time.Second)
		h.f.sweep()
		h.fail("o", "m", 1)
		h.expect(w.id, "o", api.StatusUnhealthy)
		time.Sleep(failureMemory*time.Minute + time.Second)
		h.f.sweep()
		h.fail("o", "m", 2)
		if st := h.settled(w.id, "o").Status; st == api.StatusUnhealthy {
			t.Fatal("held back by two failures long after the last")
		}
		h.fail("o", "m", 1)
		h.expect(w.id, "o", api.StatusUnhealthy)
	})
}

// A request pinned to a worker that is held back, or that already failed
// it, is answered at once with why, not after the queue hold as if the
// worker were busy.
func TestPinnedToAHeldBackWorkerFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{HoldBack: time.Minute, Hold: 10 * time.Second})
		w := h.worker("o", "w", 1, chat("m"))
		h.fail("o", "m", 3)
		start := time.Now()
		var ae *api.Error
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Pin: w.id}); !errors.As(err, &ae) || ae.Code != "workers_unhealthy" || ae.RetryAfter <= 0 {
			t.Fatalf("pinned to a held-back worker: %v", err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("the refusal of a held-back worker waited %v", d)
		}
		time.Sleep(time.Minute + time.Second)
		h.f.sweep()
		start = time.Now()
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Pin: w.id, Exclude: []string{w.id}}); !errors.Is(err, ErrTriedAll) {
			t.Fatalf("pinned to a worker that already failed the request: %v", err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("the refusal of a worker already tried waited %v", d)
		}
	})
}

func TestStaleStillServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{StaleAfter: 10 * time.Second})
		w := h.worker("o", "w", 1, chat("m"))
		time.Sleep(11 * time.Second)
		h.f.sweep()
		h.expect(w.id, "o", api.StatusStale)
		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		if err != nil {
			t.Fatalf("stale worker refused: %v", err)
		}
		l.Release(Succeeded)
		hb, _ := json.Marshal(api.Heartbeat{ActiveTasks: 0})
		w.sess.SendControl(link.TypeHeartbeat, hb)
		h.expect(w.id, "o", api.StatusHealthy)
	})
}

func TestBriefDropResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Grace: 5 * time.Second})
		w := h.worker("o", "w", 1, chat("m"))
		w.release = make(chan struct{})
		l, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		st, err := l.Open(h.ctx, []byte(`{}`), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		dropped := time.Now()
		_ = w.conn.Close()
		// In its grace the worker is not offline; when its link dropped
		// is known, for a rental whose machine went with it.
		if v := h.expect(w.id, "o", api.StatusStale); v.OfflineSince != nil || v.LinkDownSince == nil || !v.LinkDownSince.Equal(dropped) {
			t.Fatalf("in its grace: offline since %v, link down since %v, want %v", v.OfflineSince, v.LinkDownSince, dropped)
		}
		w.connect("o")
		if v := h.expect(w.id, "o", api.StatusHealthy); v.LinkDownSince != nil {
			t.Fatalf("resumed, its link down since %v", v.LinkDownSince)
		}
		close(w.release)
		_, msg, err := st.ReadMessage(h.ctx)
		if err != nil || string(msg) != "ok from w" {
			t.Fatalf("after resume: %q %v", msg, err)
		}
		if ev := h.ev.find(api.EventDisconnected, true); ev == nil {
			t.Fatal("no transient disconnected event")
		}
		// The drop and the recovery are both health changes.
		var moves []string
		h.ev.mu.Lock()
		for _, ev := range h.ev.evs {
			if ev.EventType == api.EventHealthChanged {
				moves = append(moves, fmt.Sprint(ev.Metadata["from"], " -> ", ev.Metadata["to"]))
			}
		}
		h.ev.mu.Unlock()
		if !slices.Equal(moves, []string{"healthy -> stale", "stale -> healthy"}) {
			t.Fatalf("health events %q", moves)
		}
		l.Release(Succeeded)
	})
}

// A request that arrives while its only worker's link is down for a
// moment waits for the worker to come back, pinned or not; one whose
// worker is still away when its hold runs out gets the 503, not a 429.
func TestNewRequestWaitsThroughBriefDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Grace: 5 * time.Second, Hold: 5 * time.Second})
		w := h.worker("o", "w", 2, chat("m"))
		_ = w.conn.Close()
		h.expect(w.id, "o", api.StatusStale)
		type got struct {
			l   *Lease
			err error
		}
		res := make(chan got, 2)
		for _, pin := range []string{"", w.id} {
			go func() {
				l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Pin: pin})
				res <- got{l, err}
			}()
		}
		synctest.Wait() // both requests wait
		w.connect("o")
		for range 2 {
			r := <-res
			if r.err != nil {
				t.Fatalf("request during a brief drop: %v", r.err)
			}
			if out := run(t, r.l); out != "ok from w" {
				t.Fatalf("answered %q", out)
			}
			r.l.Release(Succeeded)
		}

		_ = w.conn.Close()
		h.expect(w.id, "o", api.StatusStale)
		for _, pin := range []string{"", w.id} {
			var ae *api.Error
			_, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Pin: pin, Hold: 30 * time.Millisecond})
			if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusServiceUnavailable || ae.Kind == api.KindCapacity {
				t.Fatalf("pin %q: worker still away after the hold: %#v", pin, err)
			}
		}
	})
}

// A worker may come back before the gateway has noticed its old
// connection is dead: the resume is still a brief drop in the events, not
// a fresh connection.
func TestResumeOverUnnoticedDropIsTransient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Grace: 5 * time.Second})
		w := h.worker("o", "w", 1, chat("m"))
		hello := w.hello
		hello.Streams = w.sess.RecvState()
		welcome, wc := h.welcome("o", hello)
		if !welcome.Resumed {
			t.Fatalf("welcome %+v", welcome)
		}
		// The gateway dropped the old connection; the worker hears of it and
		// takes the new one.
		synctest.Wait()
		if _, err := w.sess.Attach(wc, welcome.Streams); err != nil {
			t.Fatalf("attach the new connection: %v", err)
		}
		w.conn = wc
		h.expect(w.id, "o", api.StatusHealthy)
		if h.ev.find(api.EventDisconnected, true) == nil {
			t.Fatal("no transient disconnected event for the resume")
		}
		h.ev.mu.Lock()
		defer h.ev.mu.Unlock()
		connected := 0
		for _, ev := range h.ev.evs {
			if ev.EventType == api.EventConnected {
				connected++
			}
		}
		if connected != 1 {
			t.Fatalf("%d connected events, want only the first connection's", connected)
		}
	})
}

// stuckConn is a connection whose writes hang until release closes, then
// fail: a link cut while the gateway sends its welcome.
type stuckConn struct{ release chan struct{} }

func (c *stuckConn) ReadMessage() ([]byte, error) { <-c.release; return nil, io.ErrClosedPipe }
func (c *stuckConn) WriteMessage([]byte) error    { <-c.release; return io.ErrClosedPipe }
func (c *stuckConn) Close() error                 { return nil }

// A reconnect that overtakes one still being let in must not be undone by
// it: the older connection's failure is not a drop of the newer, and the
// streams resumed on the newer outlive the grace.
// slowClose is a connection whose Close waits, as closing a websocket
// does while its close frame cannot get out.
type slowClose struct {
	link.Conn
	closing chan struct{} // closed when Close is called
	release chan struct{}
	once    sync.Once
}

func (c *slowClose) Close() error {
	c.once.Do(func() { close(c.closing) })
	<-c.release
	return c.Conn.Close()
}

// A resume over a connection the gateway had not seen die closes that
// connection without holding the fleet: however long the close takes,
// the rest of the fleet goes on.
func TestResumeClosesTheOldConnectionOutsideTheFleetLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Grace: 5 * time.Second})
		old := &slowClose{closing: make(chan struct{}), release: make(chan struct{})}
		defer close(old.release)
		fw := &fakeWorker{h: h, hello: api.Hello{Protocol: link.Protocol, Name: "w", Version: "v1", MaxConcurrent: 1,
			SessionID: uuid.NewString(), Models: []api.Model{chat("m")}}}
		fw.wrap = func(c link.Conn) link.Conn {
			old.Conn = c
			return old
		}
		fw.sess = link.NewSession(link.Options{Role: link.Worker, Accept: fw.serve})
		t.Cleanup(func() { fw.sess.Close(nil) })
		fw.connect("o")
		fw.wrap = nil

		gc, _ := linktest.Pipe()
		hello := fw.hello
		hello.Streams = fw.sess.RecvState()
		h.conns.Go(func() { _ = h.f.Connect(h.ctx, "o", hello, gc) })
		synctest.Wait()
		select {
		case <-old.closing:
		default:
			t.Fatal("the resume did not close the old connection")
		}
		// The old connection's close hangs: whoever waits on it must not
		// hold the fleet.
		if !h.f.mu.TryLock() {
			t.Fatal("the fleet is locked while the old connection closes")
		}
		h.f.mu.Unlock()
	})
}

func TestOvertakenHandshakeDoesNotUndoTheNewConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Grace: 100 * time.Millisecond})
		w := h.worker("o", "w", 1, chat("m"))
		w.release = make(chan struct{})
		l, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		st, err := l.Open(h.ctx, []byte(`{}`), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = w.conn.Close()
		h.expect(w.id, "o", api.StatusStale)
		stuck := &stuckConn{release: make(chan struct{})}
		hello := w.hello
		hello.Streams = w.sess.RecvState()
		h.conns.Go(func() { _ = h.f.Connect(h.ctx, "o", hello, stuck) })
		h.expect(w.id, "o", api.StatusHealthy)
		go func() {
			time.Sleep(50 * time.Millisecond)
			close(stuck.release)
		}()
		w.connect("o")
		time.Sleep(300 * time.Millisecond) // past the grace
		h.expect(w.id, "o", api.StatusHealthy)
		close(w.release)
		if _, msg, err := st.ReadMessage(h.ctx); err != nil || string(msg) != "ok from w" {
			t.Fatalf("stream across the overtaken handshake: %q %v", msg, err)
		}
		l.Release(Succeeded)
	})
}

func TestGraceExpiryFailsStreamsAndGoesOffline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Grace: 100 * time.Millisecond})
		w := h.worker("o", "w", 1, chat("m"))
		w.release = make(chan struct{})
		l, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		st, _ := l.Open(h.ctx, []byte(`{}`), []byte(`{}`))
		_ = w.conn.Close()
		_, err := st.Recv(h.ctx)
		var lost *LostError
		if !errors.As(err, &lost) || lost.WorkerName != "w" {
			t.Fatalf("stream error = %v", err)
		}
		v := h.expect(w.id, "o", api.StatusOffline)
		if v.OfflineSince == nil {
			t.Fatal("offline worker without offline_since")
		}
		if ev := h.ev.find(api.EventDisconnected, false); ev == nil {
			t.Fatal("no disconnected event")
		}
		l.Release(Failed)
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"}); status(err) != 503 {
			t.Fatalf("model of an offline worker: %v", err)
		}
	})
}

func TestNewSessionReplacesOld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		w := h.worker("o", "w", 1, chat("m"))
		w.release = make(chan struct{})
		l, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
		st, _ := l.Open(h.ctx, []byte(`{}`), []byte(`{}`))
		restarted := h.worker("o", "w", 1, chat("m")) // same name, new session: a restart
		var lost *LostError
		if _, err := st.Recv(h.ctx); !errors.As(err, &lost) || !strings.Contains(lost.Reason, "cannot resume the old one's requests") {
			t.Fatalf("old stream = %v", err)
		}
		if restarted.id != w.id {
			t.Fatalf("restart changed the worker id: %s -> %s", w.id, restarted.id)
		}
		if h.ev.find(api.EventReplaced, false) == nil {
			t.Fatal("no replaced event")
		}
		l.Release(Neutral)
		if n := len(h.f.Workers("o")); n != 1 {
			t.Fatalf("%d workers listed after a restart", n)
		}
	})
}

// Requests lost with a worker that restarted fail after the new process
// has connected; they are the old process's failures and do not hold
// back the new one.
func TestLostSessionFailuresDoNotHoldBackItsReplacement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{HoldBack: time.Minute})
		h.worker("o", "w", 4, chat("m"))
		var old []*Lease
		for range 3 {
			l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			old = append(old, l)
		}
		restarted := h.worker("o", "w", 4, chat("m"))
		for _, l := range old {
			l.Release(Failed)
		}
		if got := h.settled(restarted.id, "o"); got.Status != api.StatusHealthy || got.ActiveTasks != 0 {
			t.Fatalf("the restarted worker after its predecessor's requests failed: %s with %d active", got.Status, got.ActiveTasks)
		}
		if l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"}); err != nil {
			t.Fatalf("a request to the restarted worker: %v", err)
		} else {
			l.Release(Succeeded)
		}
	})
}

func TestDrainingTakesNothingNew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		w := h.worker("o", "w", 1, chat("m"))
		w.sess.SendControl(link.TypeGoAway, nil)
		synctest.Wait()
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"}); status(err) != 503 {
			t.Fatalf("draining worker still takes requests: %v", err)
		}
		if v := h.settled(w.id, "o"); !v.Draining {
			t.Fatalf("a draining worker is listed %+v", v)
		}
		_ = w.conn.Close()
		// Gone, it drains nothing: listed offline, not draining.
		if v := h.expect(w.id, "o", api.StatusOffline); v.Draining {
			t.Fatalf("an offline worker is listed draining: %+v", v)
		}
	})
}

// A draining worker whose drain was cut short says so before it goes:
// the requests it abandons fail at once, naming why (its drain ran out,
// or its operator stopped it at once), not after the grace a reconnect
// that could not resume them would have had.
func TestAbandonedDrainFailsAtOnce(t *testing.T) {
	for _, tc := range []struct{ reason, want string }{
		{api.AbandonDrainTimeout, "stopped before it was done: its drain ran out of time"},
		{api.AbandonStopped, "stopped before it was done: its operator stopped it at once"},
		{"", "stopped before it was done"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, Config{Grace: time.Hour})
				w := h.worker("o", "w", 1, chat("m"))
				w.release = make(chan struct{})
				l, _ := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"})
				defer l.Release(Neutral)
				st, _ := l.Open(h.ctx, []byte(`{}`), []byte(`{}`))
				w.sess.SendControl(link.TypeGoAway, nil)
				abandon, _ := json.Marshal(api.GoAway{Abandon: true, Reason: tc.reason})
				w.sess.SendControl(link.TypeGoAway, abandon)
				synctest.Wait()
				start := time.Now()
				_ = w.conn.Close()
				_, err := st.Recv(h.ctx)
				var lost *LostError
				if !errors.As(err, &lost) || !strings.HasSuffix(lost.Reason, tc.want) {
					t.Fatalf("stream error = %v, want one ending %q", err, tc.want)
				}
				if d := time.Since(start); d > time.Second {
					t.Fatalf("failed after %v, want at once", d)
				}
				h.expect(w.id, "o", api.StatusOffline)
			})
		})
	}
}

func TestWorkerIDIsStable(t *testing.T) {
	// The id is pinned: a worker keeps it across gateway releases and
	// restarts, and it differs between organisations.
	if id := WorkerID("o", "gpu-1"); id != "wk_32dec6d960564e50" || id == WorkerID("p", "gpu-1") {
		t.Fatalf("worker id %s", id)
	}
}

func TestRefusesBadHello(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		tests := []api.Hello{
			{Protocol: 99, Name: "w", SessionID: "s", MaxConcurrent: 1},
			{Protocol: link.Protocol, Name: "", SessionID: "s", MaxConcurrent: 1},
			{Protocol: link.Protocol, Name: "w", SessionID: "", MaxConcurrent: 1},
			{Protocol: link.Protocol, Name: "w", SessionID: "s", MaxConcurrent: 0},
			{Protocol: link.Protocol, Name: "w", SessionID: "s", MaxConcurrent: 65537},
			{Protocol: link.Protocol, Name: strings.Repeat("ü", 129), SessionID: "s", MaxConcurrent: 1},
			{Protocol: link.Protocol, Name: "w", SessionID: "s", MaxConcurrent: 1, Models: make([]api.Model, maxModels+1)},
		}
		for _, hello := range tests {
			gc, wc := linktest.Pipe()
			if err := h.f.Connect(h.ctx, "o", hello, gc); err == nil {
				t.Errorf("hello %+v accepted", hello)
			}
			msg, _ := wc.ReadMessage()
			f, _, _ := link.DecodeFrame(msg)
			var w api.Welcome
			if json.Unmarshal(f.Payload, &w) != nil || w.Error == "" {
				t.Errorf("refusal carries no reason: %s", f.Payload)
			}
		}
		// The limits themselves are allowed.
		h.worker("o", strings.Repeat("ü", 128), 65536, chat("m"))
	})
}

func TestTriedAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: 5 * time.Second})
		a := h.worker("o", "a", 1, chat("m"))
		b := h.worker("o", "b", 1, chat("m"))
		start := time.Now()
		_, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Exclude: []string{a.id, b.id}})
		if !errors.Is(err, ErrTriedAll) || time.Since(start) != 0 {
			t.Fatalf("err = %v after %v", err, time.Since(start))
		}
		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Exclude: []string{a.id}})
		if err != nil || l.Worker.ID != b.id {
			t.Fatalf("with one untried worker: %v %v", l, err)
		}
		l.Release(Succeeded)
	})
}

func guard(id string) api.Model {
	return api.Model{ID: id, Capabilities: []string{api.CapChat, api.CapModeration}, Engine: "sim"}
}

// A moderation check goes only to a worker whose release moderates, and a
// content-filtered chat only to a worker that has the chat model and the
// moderation model both; when none does, the answer is 409
// moderation_unavailable, pinned or not.
func TestFeaturesAndModerator(t *testing.T) {
	const pinOld = "old" // stands for the old worker's id
	tests := []struct {
		name   string
		need   Need
		worker string // who serves it, or "" for the 409
	}{
		{"check on an up-to-date worker", Need{Model: "g2", Capability: api.CapModeration, Feature: api.FeatureModeration}, "current"},
		{"check only old workers have", Need{Model: "g", Capability: api.CapModeration, Feature: api.FeatureModeration}, ""},
		{"filtered chat with both models", Need{Model: "m2", Capability: api.CapChat, Feature: api.FeatureModeration, Moderator: "g2"}, "current"},
		{"filtered chat, moderator elsewhere", Need{Model: "m", Capability: api.CapChat, Feature: api.FeatureModeration, Moderator: "g2"}, ""},
		{"filtered chat on a worker too old", Need{Model: "m", Capability: api.CapChat, Feature: api.FeatureModeration, Moderator: "g"}, ""},
		{"pinned to a worker without the moderator", Need{Model: "m", Capability: api.CapChat, Moderator: "g2", Pin: pinOld}, ""},
		{"unfiltered chat anywhere", Need{Model: "m", Capability: api.CapChat}, "old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, Config{})
				old := h.worker("o", "old", 2, chat("m"), guard("g"))
				cur := &fakeWorker{h: h, hello: api.Hello{Protocol: link.Protocol, Name: "current", Version: "v2", MaxConcurrent: 2,
					SessionID: uuid.NewString(), Models: []api.Model{chat("m2"), guard("g2")}, Features: []string{api.FeatureModeration}}}
				cur.sess = link.NewSession(link.Options{Role: link.Worker, Accept: cur.serve})
				t.Cleanup(func() { cur.sess.Close(nil) })
				cur.connect("o")
				tt.need.OrgID = "o"
				if tt.need.Pin == pinOld {
					tt.need.Pin = old.id
				}
				l, err := h.f.Acquire(h.ctx, tt.need)
				if tt.worker == "" {
					var ae *api.Error
					if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusConflict || ae.Code != api.CodeModerationUnavailable || !ae.CodeHeader {
						t.Fatalf("err = %v, want 409 moderation_unavailable", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(Succeeded)
				if got := run(t, l); got != "ok from "+tt.worker {
					t.Fatalf("served by %q", got)
				}
			})
		})
	}
}

// The 404 of a model sent to an endpoint it does not serve names the
// endpoint it does, in a sentence.
func TestWrongEndpointNamesTheRightOne(t *testing.T) {
	for _, tc := range []struct {
		caps []string
		want string
		msg  string
	}{
		{[]string{api.CapEmbeddings}, api.CapChat, "Model x does not do chat; it is an embeddings model: use /v1/embeddings"},
		{[]string{api.CapChat, api.CapVision}, api.CapEmbeddings, "Model x does not do embeddings; it is a chat model: use /v1/chat/completions"},
		{[]string{api.CapTranscription}, api.CapSpeech, "Model x does not do speech; it is a transcription model: use /v1/audio/transcriptions"},
		{[]string{api.CapSpeech}, api.CapTranscription, "Model x does not do transcription; it is a speech model: use /v1/audio/speech"},
		{[]string{api.CapModeration}, api.CapChat, "Model x does not do chat; it is a moderation model: use /v1/moderations"},
		// A guard chats, but it is a moderation model.
		{[]string{api.CapChat, api.CapModeration, api.CapVision}, api.CapEmbeddings, "Model x does not do embeddings; it is a moderation model: use /v1/moderations"},
		{[]string{api.CapVision}, api.CapChat, "Model x does not do chat"},
		{[]string{api.CapRerank}, api.CapChat, "Model x does not do chat; it is a reranking model: use /v1/rerank"},
		{[]string{api.CapImageGeneration}, api.CapChat, "Model x does not do chat; it is an image generation model: use /v1/images/generations"},
		{[]string{api.CapChat, api.CapTools}, api.CapRerank, "Model x does not do reranking; it is a chat model: use /v1/chat/completions"},
		{[]string{api.CapEmbeddings}, api.CapImageGeneration, "Model x does not do image generation; it is an embeddings model: use /v1/embeddings"},
		{[]string{api.CapImageGeneration}, api.CapRerank, "Model x does not do reranking; it is an image generation model: use /v1/images/generations"},
	} {
		var ae *api.Error
		err := WrongEndpoint(&api.Model{ID: "x", Capabilities: tc.caps}, tc.want)
		if !errors.As(err, &ae) || ae.Message != tc.msg || ae.HTTPStatus() != 404 || ae.Code != api.CodeWrongEndpoint {
			t.Errorf("%v on %s: %v, want %q", tc.caps, tc.want, err, tc.msg)
		}
	}
}

func image(id string, incomplete *api.Incomplete) api.Model {
	return api.Model{ID: id, Capabilities: []string{api.CapImageGeneration}, Engine: "sim", Incomplete: incomplete}
}

// A request that needs the whole model goes only to a worker that has it
// whole; when only workers with part of it could serve, it is the spec's
// 409 naming what is missing, pinned or not. Requests that do not need the
// whole model are served by any.
func TestIncompleteModel(t *testing.T) {
	missing := &api.Incomplete{Missing: []string{"vae.safetensors"}}
	downloading := &api.Incomplete{Total: 4 << 30, Completed: 1 << 30}
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		a := h.worker("o", "a", 1, image("img", missing), chat("m"))
		b := h.worker("o", "b", 1, image("img", downloading))
		for _, need := range []Need{
			{OrgID: "o", Model: "img", Capability: api.CapImageGeneration, Whole: true},
			{OrgID: "o", Model: "img", Capability: api.CapImageGeneration, Whole: true, Pin: a.id},
			{OrgID: "o", Model: "img", Capability: api.CapImageGeneration, Whole: true, Pin: b.id},
		} {
			var ae *api.Error
			_, err := h.f.Acquire(h.ctx, need)
			if !errors.As(err, &ae) || ae.HTTPStatus() != 409 || ae.Code != api.CodeModelIncomplete || ae.Type != api.TypeConflict {
				t.Fatalf("%+v: %v", need, err)
			}
			if need.Pin == b.id && ae.Message != "Model img is not fully installed on worker b ("+b.id+"): downloading, 25% of 4.0 GiB; retry once the install finishes" {
				t.Fatalf("message %q", ae.Message)
			}
			if need.Pin == a.id && !strings.Contains(ae.Message, "vae.safetensors missing") {
				t.Fatalf("message %q", ae.Message)
			}
		}
		// What does not need every file is served by a partial install.
		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "img", Capability: api.CapImageGeneration})
		if err != nil {
			t.Fatal(err)
		}
		l.Release(Succeeded)
		if ms := h.f.Models("o"); ms[0].ID != "img" || ms[0].Incomplete == nil {
			t.Fatalf("models list %+v", ms)
		}

		c := h.worker("o", "c", 1, image("img", nil))
		h.settled(c.id, "o")
		for range 3 {
			l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "img", Capability: api.CapImageGeneration, Whole: true})
			if err != nil || l.Worker.ID != c.id {
				t.Fatalf("lease %v, %v", l, err)
			}
			l.Release(Succeeded)
		}
		if ms := h.f.Models("o"); ms[0].Incomplete != nil {
			t.Fatalf("a model whole on one worker is listed incomplete: %+v", ms[0])
		}
	})
}

// A worker back with other settings than its last connection's is a
// settings_changed event with each change and its operator as the actor;
// one back as it was, or seen for the first time, is none.
func TestSettingsChangedEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		w := h.worker("o", "w", 4, chat("m"))
		count := func() (n int, last *api.WorkerEvent) {
			h.ev.mu.Lock()
			defer h.ev.mu.Unlock()
			for i := range h.ev.evs {
				if h.ev.evs[i].EventType == api.EventSettingsChanged {
					n, last = n+1, &h.ev.evs[i]
				}
			}
			return n, last
		}
		// The same settings, by a new process. Its session lets the old
		// connection go before it takes the new one.
		_ = w.conn.Close()
		synctest.Wait()
		w.hello.SessionID = uuid.NewString()
		w.connect("o")
		synctest.Wait()
		if n, _ := count(); n != 0 {
			t.Fatalf("%d settings events for a worker back as it was", n)
		}
		_ = w.conn.Close()
		synctest.Wait()
		w.hello.SessionID = uuid.NewString()
		w.hello.MaxConcurrent = 16
		w.hello.Engines = []api.EngineInfo{{Kind: "openai", URL: "http://127.0.0.1:8000"}}
		w.connect("o")
		synctest.Wait()
		n, ev := count()
		if n != 1 || ev.Actor == nil || *ev.Actor != "svc worker" {
			t.Fatalf("%d settings events, last %+v", n, ev)
		}
		mc, _ := ev.Metadata["max_concurrent"].(map[string]any)
		if mc["from"] != 4 || mc["to"] != 16 || ev.Metadata["engines"] == nil || ev.Metadata["features"] != nil {
			t.Fatalf("metadata %v", ev.Metadata)
		}
	})
}

// The power field is the live reading: a connected worker's latest, stale
// or not (the reading says when it was taken), and null once the worker
// is offline, as it reports nothing.
func TestOfflineWorkerReportsNoPower(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{StaleAfter: 10 * time.Second, Grace: 100 * time.Millisecond})
		fw := &fakeWorker{h: h, hello: api.Hello{Protocol: link.Protocol, Name: "w", Version: "v1", MaxConcurrent: 1,
			SessionID: uuid.NewString(), Models: []api.Model{chat("m")},
			Heartbeat: &api.Heartbeat{Power: &api.LivePower{At: time.Now(), Watts: map[string]float64{api.ScopeSystem: 250},
				Channels: []api.PowerChannel{{Key: api.ScopeSystem, Scope: api.ScopeSystem, Source: "ipmi", Method: api.MethodMeasured}},
				Machine:  api.MethodMeasured}}}}
		fw.sess = link.NewSession(link.Options{Role: link.Worker, Accept: fw.serve})
		t.Cleanup(func() { fw.sess.Close(nil) })
		fw.connect("o")
		for _, tc := range []struct {
			name, status string
			live         bool
			step         func()
		}{
			{"connected", api.StatusHealthy, true, func() {}},
			{"late", api.StatusStale, true, func() { time.Sleep(11 * time.Second); h.f.sweep() }},
			{"gone", api.StatusOffline, false, func() { _ = fw.conn.Close(); synctest.Wait(); time.Sleep(time.Second) }},
		} {
			tc.step()
			v := h.expect(fw.id, "o", tc.status)
			if got := v.Power != nil && v.Power.Watts[api.ScopeSystem] == 250; got != tc.live {
				t.Errorf("%s (%s): power %+v, want live %v", tc.name, tc.status, v.Power, tc.live)
			}
			if !tc.live && v.Power != nil {
				t.Errorf("%s: power %+v, want null", tc.name, v.Power)
			}
		}
		if lp := h.f.LivePower(); len(lp) != 0 {
			t.Errorf("LivePower lists an offline worker: %+v", lp)
		}
	})
}

// A model's listing is dated when a worker of the organisation first
// listed it, so polling GET /v1/models twice gives the same entries; a
// second worker listing it later does not move the date.
func TestModelsAreDatedWhenFirstListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		first := time.Now()
		a := h.worker("o", "a", 1, chat("m"))
		h.settled(a.id, "o")
		time.Sleep(time.Hour)
		b := h.worker("o", "b", 1, chat("m"), chat("n"))
		h.settled(b.id, "o")
		want := map[string]time.Time{"m": first, "n": first.Add(time.Hour)}
		time.Sleep(time.Minute)
		ms := h.f.Models("o")
		if len(ms) != 2 {
			t.Fatalf("models %+v", ms)
		}
		for _, m := range ms {
			if !m.Since.Equal(want[m.ID]) {
				t.Errorf("%s dated %v, want %v", m.ID, m.Since, want[m.ID])
			}
			if one := h.f.Model("o", m.ID); one == nil || !one.Since.Equal(want[m.ID]) {
				t.Errorf("Model(%s) = %+v, want dated %v", m.ID, one, want[m.ID])
			}
		}
	})
}

// The workers a gateway listed as it stopped are listed by the gateway
// replacing it: offline (a connected one since the stop), with what they
// serve, until they reconnect, which is a plain connect with no change of
// settings; one offline longer than KeepOffline is not.
func TestRememberedWorkersAreListedOffline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		before := newHarness(t, Config{Grace: 100 * time.Millisecond})
		a := before.worker("o", "a", 2, chat("m"))
		b := before.worker("o", "b", 1, chat("n"))
		_ = b.conn.Close()
		synctest.Wait()
		time.Sleep(time.Second) // past the grace
		bOffline := *before.expect(b.id, "o", api.StatusOffline).OfflineSince
		time.Sleep(time.Hour)
		stopped := time.Now()
		rem := before.f.Remember(false)
		rem["o"] = append(rem["o"], Remembered{ID: "wk_old", Name: "old", OfflineSince: stopped.Add(-25 * time.Hour)})

		after := newHarness(t, Config{Remembered: rem})
		ws := after.f.Workers("o")
		if len(ws) != 2 {
			t.Fatalf("listed %+v", ws)
		}
		for _, w := range ws {
			want := map[string]time.Time{a.id: stopped, b.id: bOffline}[w.WorkerID]
			if w.Status != api.StatusOffline || w.OfflineSince == nil || !w.OfflineSince.Equal(want.UTC()) || len(w.Models) != 1 || w.Power != nil {
				t.Errorf("%s listed %+v, want offline since %v", w.WorkerName, w, want)
			}
		}
		if _, err := after.f.Acquire(after.ctx, Need{OrgID: "o", Model: "m"}); status(err) != 503 {
			t.Fatalf("the model of a remembered worker: %v, want 503", err)
		}
		back := after.worker("o", "a", 2, chat("m"))
		if back.id != a.id {
			t.Fatalf("reconnected as %s, want %s", back.id, a.id)
		}
		if ev := after.ev.find(api.EventSettingsChanged, false); ev != nil {
			t.Errorf("a remembered worker's reconnect changed its settings: %+v", ev)
		}
		if ev := after.ev.find(api.EventConnected, false); ev == nil {
			t.Error("no connected event")
		}
		l, err := after.f.Acquire(after.ctx, Need{OrgID: "o", Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		l.Release(Succeeded)
	})
}

// lastOf reads e as a store that outlives the fleet: a worker's newest
// event, the last recorded among those of one instant.
func (e *events) lastOf(_ context.Context, _, workerID string) (api.WorkerEvent, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var last *api.WorkerEvent
	for i := range e.evs {
		if e.evs[i].WorkerID == workerID && (last == nil || !e.evs[i].CreatedAt.Before(last.CreatedAt)) {
			last = &e.evs[i]
		}
	}
	if last == nil {
		return api.WorkerEvent{}, false, nil
	}
	return *last, true, nil
}

// A worker that last linked to another gateway process, whose newest
// event is not a disconnect, gets the disconnect that process could not
// record, before its connect: dated when the worker says its link
// dropped, else at the stop of a gateway that listed it, else now. One
// already recorded, a first connection and a store that cannot answer add
// none, nor does a worker the gateway it left sent away, which that
// gateway recorded.
func TestUnrecordedEndIsRecorded(t *testing.T) {
	for _, tc := range []struct {
		name       string
		offline    bool // the worker went offline before the stop
		remembered bool // the old gateway stopped cleanly, listing it
		checkpoint bool // it listed it in a checkpoint, then crashed
		downMS     int64
		sentAway   bool
		storeErr   error
		first      bool // no event of the worker before
		want       string
		ago        time.Duration // the disconnect's age at the reconnect
	}{
		{name: "gateway crashed", downMS: 5000, want: "the link ended with the gateway process", ago: 5 * time.Second},
		{name: "gateway stopped", remembered: true, downMS: 3000, want: "the link ended when the gateway it was on stopped", ago: 3 * time.Second},
		{name: "gateway stopped, worker restarted", remembered: true, want: "the link ended when the gateway it was on stopped", ago: time.Hour},
		{name: "gateway crashed after a checkpoint", remembered: true, checkpoint: true, downMS: 3000,
			want: "the link ended when the gateway it was on went down without stopping", ago: 3 * time.Second},
		{name: "worker restarted too", want: "connected again as a new process"},
		{name: "down longer than the events", downMS: 1 << 50, want: "the link ended with the gateway process", ago: 2 * time.Hour},
		{name: "disconnect recorded", offline: true, downMS: 5000},
		{name: "sent away, the end recorded by the gateway that sent it", sentAway: true},
		{name: "first connection", first: true, downMS: 5000},
		{name: "store silent", storeErr: errors.New("timeout"), downMS: 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				before := newHarness(t, Config{Grace: 100 * time.Millisecond})
				a := before.worker("o", "a", 1, chat("m"))
				if tc.offline {
					_ = a.conn.Close()
					synctest.Wait()
					time.Sleep(time.Second) // past the grace
					before.expect(a.id, "o", api.StatusOffline)
				}
				time.Sleep(time.Hour)
				var rem map[string][]Remembered
				if tc.remembered {
					rem = before.f.Remember(tc.checkpoint)
				}
				stopped := time.Now()
				time.Sleep(time.Hour)
				old := before.ev
				if tc.first {
					old = &events{}
				}
				last := old.lastOf
				if tc.storeErr != nil {
					last = func(context.Context, string, string) (api.WorkerEvent, bool, error) {
						return api.WorkerEvent{}, false, tc.storeErr
					}
				}
				after := newHarness(t, Config{Remembered: rem, LastEvent: last})
				fw := &fakeWorker{h: after, hello: api.Hello{Protocol: link.Protocol, Name: "a", Version: "v1", MaxConcurrent: 1,
					SessionID: uuid.NewString(), Models: []api.Model{chat("m")}, DownMS: tc.downMS, SentAway: tc.sentAway}}
				fw.sess = link.NewSession(link.Options{Role: link.Worker, Accept: fw.serve})
				t.Cleanup(func() { fw.sess.Close(nil) })
				back := time.Now()
				fw.connect("o")
				synctest.Wait()

				after.ev.mu.Lock()
				evs := slices.Clone(after.ev.evs)
				after.ev.mu.Unlock()
				if len(evs) == 0 || evs[len(evs)-1].EventType != api.EventConnected {
					t.Fatalf("events %+v, want the connect last", evs)
				}
				evs = evs[:len(evs)-1]
				if tc.want == "" {
					if len(evs) != 0 {
						t.Fatalf("events before the connect: %+v", evs)
					}
					return
				}
				if len(evs) != 1 || evs[0].EventType != api.EventDisconnected || evs[0].Transient ||
					evs[0].WorkerID != a.id || evs[0].Detail == nil || !strings.Contains(*evs[0].Detail, tc.want) {
					t.Fatalf("events before the connect: %+v, want one disconnect saying %q", evs, tc.want)
				}
				at := back.Add(-tc.ago)
				if tc.remembered && tc.downMS == 0 && !at.Equal(stopped) {
					t.Fatalf("the test's stop is at %v, not %v before the reconnect", stopped, tc.ago)
				}
				if !evs[0].CreatedAt.Equal(at.UTC()) {
					t.Fatalf("the disconnect is dated %v, want %v", evs[0].CreatedAt, at.UTC())
				}
			})
		})
	}
}

// Once the start grace ends, each worker the gateway this one replaced had
// connected that has not come back gets its disconnect, dated at that
// gateway's stop, once, a worker draining at the stop included: not one
// back already, not one whose disconnect is recorded, and none again when
// it returns later.
func TestUnreturnedWorkersGetTheirDisconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		before := newHarness(t, Config{Grace: 100 * time.Millisecond})
		a := before.worker("o", "a", 1, chat("m"))
		b := before.worker("o", "b", 1, chat("m"))
		c := before.worker("o", "c", 1, chat("m"))
		// d drains as the gateway stops: listed, but not expected back.
		d := before.worker("o2", "d", 1, chat("m"))
		before.f.SendAwayOrg("o2", "stopping")
		_ = c.conn.Close()
		synctest.Wait()
		time.Sleep(time.Second) // past c's grace
		before.expect(c.id, "o", api.StatusOffline)
		time.Sleep(time.Hour)
		rem, ret := before.f.Remember(false), before.f.Connected()
		if slices.Contains(ret["o2"], d.id) {
			t.Fatalf("a draining worker is expected back: %v", ret)
		}
		stopped := time.Now()
		time.Sleep(time.Minute)

		after := newHarness(t, Config{Remembered: rem, Returning: ret, StartGrace: 10 * time.Second, LastEvent: before.ev.lastOf})
		ctx := context.Background()
		disconnects := func() map[string]api.WorkerEvent {
			synctest.Wait()
			out := map[string]api.WorkerEvent{}
			for _, ev := range after.ev.ofType(api.EventDisconnected) {
				if _, twice := out[ev.WorkerID]; twice {
					t.Fatalf("two disconnects of %s", ev.WorkerName)
				}
				out[ev.WorkerID] = ev
			}
			return out
		}
		time.Sleep(time.Second)
		after.worker("o", "a", 1, chat("m"))
		time.Sleep(4 * time.Second)
		settleReturning(ctx, after.f)
		if got := disconnects(); len(got) != 1 || got[a.id].WorkerID == "" {
			t.Fatalf("within the grace, disconnects %+v; want a's alone, recorded as it came back", got)
		}
		time.Sleep(6 * time.Second)
		settleReturning(ctx, after.f)
		settleReturning(ctx, after.f)
		got := disconnects()
		for _, id := range []string{b.id, d.id} {
			if ev, ok := got[id]; len(got) != 3 || !ok || !ev.CreatedAt.Equal(stopped.UTC()) || ev.Transient ||
				ev.Detail == nil || !strings.Contains(*ev.Detail, "has not reconnected") {
				t.Fatalf("after the grace, disconnects %+v; want a's, b's and d's, b's and d's dated %v", got, stopped.UTC())
			}
		}
		after.worker("o", "b", 1, chat("m"))
		after.worker("o", "c", 1, chat("m"))
		if got := disconnects(); len(got) != 3 {
			t.Fatalf("after b and c came back, disconnects %+v; want no more", got)
		}
	})
}

// A new home lists the workers its organisation's last home listed,
// offline, until they connect; one that was connected there and does not
// come back within the grace gets the disconnect its last home could not
// record, once, dated at the adoption.
func TestAdoptedWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &events{}
		a, b := WorkerID("o", "a"), WorkerID("o", "b")
		now := time.Now()
		store.RecordEvent("o", api.WorkerEvent{WorkerID: a, WorkerName: "a", EventType: api.EventConnected, CreatedAt: now.Add(-time.Hour)})
		store.RecordEvent("o", api.WorkerEvent{WorkerID: b, WorkerName: "b", EventType: api.EventDisconnected, CreatedAt: now.Add(-time.Minute)})
		h := newHarness(t, Config{Grace: 200 * time.Millisecond, LastEvent: store.lastOf})
		h.f.Adopt("o", []Remembered{
			{ID: a, Name: "a", MaxConcurrent: 2, Models: []api.Model{{ID: "m"}}, OfflineSince: now, LastSeen: now},
			{ID: b, Name: "b", OfflineSince: now.Add(-time.Minute), LastSeen: now.Add(-time.Minute)},
		}, []string{a}, now)
		listed := map[string]api.Worker{}
		for _, w := range h.f.Workers("o") {
			listed[w.WorkerName] = w
		}
		if len(listed) != 2 || listed["a"].Status != api.StatusOffline || listed["b"].Status != api.StatusOffline ||
			len(listed["a"].Models) != 1 || !listed["b"].OfflineSince.Equal(now.Add(-time.Minute).UTC()) {
			t.Fatalf("adopted workers listed %+v", listed)
		}
		disconnects := func() []api.WorkerEvent { return h.ev.ofType(api.EventDisconnected) }
		settleAdopted(context.Background(), h.f)
		if got := disconnects(); len(got) != 0 {
			t.Fatalf("within the grace: %+v", got)
		}
		time.Sleep(time.Second)
		settleAdopted(context.Background(), h.f)
		settleAdopted(context.Background(), h.f)
		if got := disconnects(); len(got) != 1 || got[0].WorkerID != a || !got[0].CreatedAt.Equal(now.UTC()) ||
			got[0].Detail == nil || !strings.Contains(*got[0].Detail, "home replica stopped") {
			t.Fatalf("after the grace: %+v, want a's, dated %v", got, now.UTC())
		}
		h.worker("o", "a", 2, chat("m"))
		if got := disconnects(); len(got) != 1 {
			t.Fatalf("after a came back: %+v", got)
		}
	})
}

// A replica that was the organisation's home before lists, once it is
// again, what the events since say of a worker, not what it kept from
// then; and a worker back as its connected event described it is no
// settings change, though its record could not hold its key.
func TestAdoptedAgain(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name    string
		private *bool // as its connected event told; nil: not told
		key     bool  // whether it comes back with a private-inference key
		changed bool
	}{
		{"as told", &yes, true, false},
		{"not told", nil, true, false},
		{"key added", &no, true, true},
		{"key dropped", &yes, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, Config{Grace: 100 * time.Millisecond})
				w := h.worker("o", "w", 4, chat("m"))
				_ = w.conn.Close()
				synctest.Wait()
				time.Sleep(time.Second)
				h.expect(w.id, "o", api.StatusOffline)
				// Another home had it since, and died with it linked.
				time.Sleep(time.Hour)
				linked := time.Now()
				features := []string{"moderation/1"}
				time.Sleep(time.Minute)
				now := time.Now()
				h.f.Adopt("o", []Remembered{{ID: w.id, Name: "w", Version: "v2", MaxConcurrent: 8, Features: features,
					Private: tc.private, OfflineSince: now, LastSeen: linked}}, []string{w.id}, now)
				got := h.expect(w.id, "o", api.StatusOffline)
				if got.OfflineSince == nil || !got.OfflineSince.Equal(now.UTC()) || got.LastSeenSecondsAgo != 60 || got.MaxConcurrent != 8 || len(got.Models) != 0 {
					t.Fatalf("adopted again: %+v; want offline since %v, last seen 60 s ago, 8 slots, no models", got, now.UTC())
				}
				w.hello.SessionID = uuid.NewString()
				w.hello.Version, w.hello.MaxConcurrent, w.hello.Features = "v2", 8, features
				if tc.key {
					w.hello.E2EKey = &api.E2EKey{KeyID: "k1"}
				}
				w.connect("o")
				synctest.Wait()
				ev := h.ev.find(api.EventSettingsChanged, false)
				if (ev != nil) != tc.changed {
					t.Fatalf("settings_changed %+v, want one: %v", ev, tc.changed)
				}
				if ev != nil && (len(ev.Metadata) != 1 || ev.Metadata["private_inference"] == nil) {
					t.Fatalf("settings_changed metadata %v, want private_inference alone", ev.Metadata)
				}
			})
		})
	}
}

// settleReturning and settleAdopted settle what Run's ticker would find
// due now, on the test's goroutine.
func settleReturning(ctx context.Context, f *Fleet) {
	if st := f.dueReturning(time.Now()); st != nil {
		f.settleUnreturned(ctx, st)
	}
}

func settleAdopted(ctx context.Context, f *Fleet) {
	for _, st := range f.dueAdopted(time.Now()) {
		f.settleUnreturned(ctx, st)
	}
}

// A worker that went offline here and then linked to another gateway
// process, which lost it unrecorded (the store's newest event of it is a
// connect newer than this fleet's disconnect), is owed that end: when it
// reconnects here, and when this fleet adopts it again and it does not;
// one that linked nowhere else is owed nothing more.
func TestEndElsewhereAfterGoingOfflineHere(t *testing.T) {
	for _, tc := range []struct {
		elsewhere, reconnect bool
		want                 int
	}{{true, true, 2}, {true, false, 2}, {false, true, 1}, {false, false, 1}} {
		elsewhere, reconnect := tc.elsewhere, tc.reconnect
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Config{Grace: 100 * time.Millisecond})
			h.f.cfg.LastEvent = h.ev.lastOf
			w := h.worker("o", "w", 1, chat("m"))
			_ = w.conn.Close()
			synctest.Wait()
			time.Sleep(time.Second) // past the grace: its disconnect is recorded here
			h.expect(w.id, "o", api.StatusOffline)
			time.Sleep(time.Minute)
			if elsewhere {
				// Another process had it since, and lost it without a word.
				h.ev.RecordEvent("o", api.WorkerEvent{WorkerID: w.id, WorkerName: "w", EventType: api.EventConnected, CreatedAt: time.Now()})
			}
			time.Sleep(time.Minute)
			count := func() int {
				synctest.Wait()
				return len(h.ev.ofType(api.EventDisconnected))
			}
			if reconnect {
				back := &fakeWorker{h: h, hello: api.Hello{Protocol: link.Protocol, Name: "w", Version: "v1", MaxConcurrent: 1,
					SessionID: uuid.NewString(), Models: []api.Model{chat("m")}, DownMS: 30_000}}
				back.sess = link.NewSession(link.Options{Role: link.Worker, Accept: back.serve})
				t.Cleanup(func() { back.sess.Close(nil) })
				back.connect("o")
			} else {
				h.f.Adopt("o", nil, []string{w.id}, time.Now())
				time.Sleep(time.Second)
				settleAdopted(context.Background(), h.f)
			}
			if n := count(); n != tc.want {
				t.Fatalf("elsewhere %v, reconnect %v: %d disconnects, want %d", elsewhere, reconnect, n, tc.want)
			}
		})
	}
}

// failingConn is a connection cut before the gateway's welcome gets out.
type failingConn struct{}

func (failingConn) ReadMessage() ([]byte, error) { return nil, io.ErrClosedPipe }
func (failingConn) WriteMessage([]byte) error    { return io.ErrClosedPipe }
func (failingConn) Close() error                 { return nil }

// A connect that finds the end of a link to another gateway unrecorded and
// then fails keeps what it owes: the worker's next connect records it
// before its connected event, and a worker that does not come back has it
// as its one disconnect.
func TestOwedEndOutlivesAFailedConnect(t *testing.T) {
	for _, back := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			before := newHarness(t, Config{Grace: 100 * time.Millisecond})
			before.worker("o", "a", 1, chat("m"))
			time.Sleep(time.Hour)
			after := newHarness(t, Config{Grace: 100 * time.Millisecond, LastEvent: before.ev.lastOf})
			fw := &fakeWorker{h: after, hello: api.Hello{Protocol: link.Protocol, Name: "a", Version: "v1", MaxConcurrent: 1,
				SessionID: uuid.NewString(), Models: []api.Model{chat("m")}, DownMS: 5000}}
			fw.sess = link.NewSession(link.Options{Role: link.Worker, Accept: fw.serve})
			t.Cleanup(func() { fw.sess.Close(nil) })
			down := time.Now().Add(-5 * time.Second)
			hello := fw.hello
			hello.Streams = fw.sess.RecvState()
			if err := after.f.Connect(after.ctx, "o", hello, failingConn{}); err == nil {
				t.Fatal("a connect whose welcome could not be sent succeeded")
			}
			if back {
				fw.connect("o")
			} else {
				time.Sleep(time.Second) // past the grace
			}
			synctest.Wait()
			after.ev.mu.Lock()
			evs := slices.Clone(after.ev.evs)
			after.ev.mu.Unlock()
			evs = slices.DeleteFunc(evs, func(ev api.WorkerEvent) bool {
				return ev.EventType != api.EventDisconnected && ev.EventType != api.EventConnected
			})
			var types []string
			for _, ev := range evs {
				types = append(types, ev.EventType)
			}
			want := []string{api.EventDisconnected}
			if back {
				want = append(want, api.EventConnected)
			}
			if !slices.Equal(types, want) {
				t.Fatalf("back %v: events %v, want %v", back, types, want)
			}
			if d := evs[0]; d.Detail == nil || !strings.Contains(*d.Detail, "the link ended with the gateway process") || !d.CreatedAt.Equal(down.UTC()) {
				t.Fatalf("back %v: the disconnect %+v, want the owed one dated %v", back, d, down.UTC())
			}
		})
	}
}

// An organisation homed elsewhere now sends its workers away: one that
// leaves when its requests are done is offline at once with the gateway's
// word, and one that stays is disconnected after the bound, its request
// failing. One back on a new link by then keeps that link.
func TestLeaveOrg(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Grace: 10 * time.Second})
		quick := h.worker("o", "quick", 1, chat("m"))
		busy := h.worker("o", "busy", 1, chat("n"))
		back := h.worker("o", "back", 1, chat("m"))
		busy.release = make(chan struct{})
		defer close(busy.release)
		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "n"})
		if err != nil {
			t.Fatal(err)
		}
		st, err := l.Open(h.ctx, []byte(`{}`), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if n := h.f.LeaveOrg("o", "homed elsewhere", 30*time.Second); n != 3 {
			t.Fatalf("LeaveOrg asked %d workers, want 3", n)
		}
		if n := len(h.ev.ofType(api.EventDraining)); n != 3 {
			t.Fatalf("%d draining events, want 3", n)
		}

		_ = quick.conn.Close() // it had nothing running, and left
		synctest.Wait()
		h.expect(quick.id, "o", api.StatusOffline)
		time.Sleep(time.Second)
		_ = back.conn.Close()
		synctest.Wait()
		back.hello.SessionID = uuid.NewString()
		back.hello.SentAway = true
		back.connect("o")

		time.Sleep(30 * time.Second)
		synctest.Wait()
		h.expect(busy.id, "o", api.StatusOffline)
		if w := h.settled(back.id, "o"); w.Status == api.StatusOffline {
			t.Fatal("the worker back on a new link was disconnected")
		}
		if _, err := st.Recv(h.ctx); err == nil {
			t.Fatal("the request on the worker that stayed outlived its link")
		}
		ends := map[string]string{}
		for _, ev := range h.ev.ofType(api.EventDisconnected) {
			ends[ev.WorkerName] = *ev.Detail
		}
		want := map[string]string{
			"quick": "the worker left as the gateway asked: homed elsewhere",
			"back":  "the worker left as the gateway asked: homed elsewhere",
			"busy":  "homed elsewhere",
		}
		if !maps.Equal(ends, want) {
			t.Fatalf("disconnects %v, want %v", ends, want)
		}
	})
}

// forgetful is a power sink that notes the workers it is told to forget.
type forgetful struct {
	discardPower
	mu     sync.Mutex
	forgot []string
}

func (p *forgetful) Forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgot = append(p.forgot, id)
}

// A worker forgotten for being offline past KeepOffline is forgotten by
// the power sink too; one still listed is not.
func TestForgottenWorkersLeaveThePowerSink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &forgetful{}
		h := newHarness(t, Config{Grace: 100 * time.Millisecond, KeepOffline: time.Minute, Power: sink})
		gone := h.worker("o", "gone", 1, chat("m"))
		h.worker("o", "stays", 1, chat("m"))
		_ = gone.conn.Close()
		synctest.Wait()
		time.Sleep(2 * time.Minute)
		h.f.sweep()
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if !slices.Equal(sink.forgot, []string{gone.id}) {
			t.Fatalf("forgot %v, want only %s", sink.forgot, gone.id)
		}
	})
}

// A revoked worker token ends the links made with it and refuses new
// ones; a worker back on a link made with another token serves on.
func TestDisconnectRevoked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		revoked := map[string]bool{}
		h := newHarness(t, Config{Grace: 100 * time.Millisecond, TokenLive: func(id string) bool {
			mu.Lock()
			defer mu.Unlock()
			return !revoked[id]
		}})
		connect := func(name, token string) *fakeWorker {
			fw := &fakeWorker{h: h, hello: api.Hello{Protocol: link.Protocol, Name: name, Version: "v1", MaxConcurrent: 1,
				SessionID: uuid.NewString(), Models: []api.Model{chat("m")}, TokenID: token}}
			fw.sess = link.NewSession(link.Options{Role: link.Worker, Accept: fw.serve})
			t.Cleanup(func() { fw.sess.Close(nil) })
			fw.connect("o")
			return fw
		}
		a := connect("a", "t1")
		b := connect("b", "t2")
		rotated := connect("c", "t1")
		_ = rotated.conn.Close()
		synctest.Wait()
		rotated = connect("c", "t3") // the same worker, on a new token
		mu.Lock()
		revoked["t1"] = true
		mu.Unlock()
		if n := h.f.DisconnectRevoked(); n != 1 {
			t.Fatalf("DisconnectRevoked ended %d links, want a's", n)
		}
		h.expect(a.id, "o", api.StatusOffline)
		h.expect(b.id, "o", api.StatusHealthy)
		h.expect(rotated.id, "o", api.StatusHealthy)
		if evs := h.ev.ofType(api.EventDisconnected); len(evs) == 0 || *evs[len(evs)-1].Detail != "its worker token was revoked" {
			t.Fatalf("disconnects %+v", evs)
		}
		// A link made with it now is refused at the door.
		gc, _ := linktest.Pipe()
		hello := a.hello
		hello.SessionID = uuid.NewString()
		if err := h.f.Connect(h.ctx, "o", hello, gc); !errors.Is(err, errTokenRevoked) {
			t.Fatalf("a connect with a revoked token = %v", err)
		}
	})
}

// A token revoked while its link is being let in, after the door's check,
// still ends the link: the connect looks again once the link is in.
func TestTokenRevokedDuringConnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var revoked atomic.Bool
		h := newHarness(t, Config{Grace: 100 * time.Millisecond,
			TokenLive: func(string) bool { return !revoked.Load() },
			// Asked while the link is let in: the revocation lands then.
			LastEvent: func(context.Context, string, string) (api.WorkerEvent, bool, error) {
				revoked.Store(true)
				return api.WorkerEvent{}, false, nil
			}})
		fw := &fakeWorker{h: h, hello: api.Hello{Protocol: link.Protocol, Name: "late", Version: "v1", MaxConcurrent: 1,
			SessionID: uuid.NewString(), Models: []api.Model{chat("m")}, TokenID: "t1"}}
		fw.sess = link.NewSession(link.Options{Role: link.Worker, Accept: fw.serve})
		t.Cleanup(func() { fw.sess.Close(nil) })
		gc, wc := linktest.Pipe()
		h.conns.Go(func() { _ = h.f.Connect(h.ctx, "o", fw.hello, gc) })
		if _, err := wc.ReadMessage(); err != nil { // the welcome
			t.Fatal(err)
		}
		synctest.Wait()
		h.expect(WorkerID("o", "late"), "o", api.StatusOffline)
		if evs := h.ev.ofType(api.EventDisconnected); len(evs) != 1 || *evs[0].Detail != "its worker token was revoked" {
			t.Fatalf("disconnects %+v", evs)
		}
	})
}

// A model's metadata for a request has the widest context window of the
// workers serving it, so that a prompt only one of them can take is not
// refused for another's; a request pinned to a worker has that worker's;
// and a worker that does not know its window makes the window unknown.
func TestModelHasTheWidestWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		windowed := func(n int) api.Model { m := chat("m"); m.ContextWindow = n; return m }
		small := h.worker("o", "a-small", 1, windowed(4096))
		h.worker("o", "b-large", 1, windowed(8192))
		if m := h.f.Model("o", "m"); m == nil || m.ContextWindow != 8192 {
			t.Fatalf("model %+v, want the widest window, 8192", m)
		}
		if m := h.f.ModelFor("o", "m", small.id); m == nil || m.ContextWindow != 4096 {
			t.Fatalf("pinned to the small one: %+v", m)
		}
		if ms := h.f.Models("o"); len(ms) != 1 || ms[0].ContextWindow != 8192 {
			t.Fatalf("listed %+v", ms)
		}
		h.worker("o", "c-unknown", 1, chat("m"))
		if m := h.f.Model("o", "m"); m == nil || m.ContextWindow != 0 {
			t.Fatalf("with a worker of unknown window: %+v", m)
		}
	})
}

// A prompt is sent only to a worker whose context window of the model
// takes it (or is not known): a narrower worker is passed over, free or
// not; pinned to one, the request is refused with context_length_exceeded.
func TestRoutingWeighsWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Hold: time.Second})
		windowed := func(n int) api.Model { m := chat("m"); m.ContextWindow = n; return m }
		small := h.worker("o", "a-small", 4, windowed(4096))
		large := h.worker("o", "b-large", 1, windowed(8192))
		need := Need{OrgID: "o", Model: "m", PromptTokens: 6000}
		l, err := h.f.Acquire(h.ctx, need)
		if err != nil || l.Worker.ID != large.id {
			t.Fatalf("first: %+v %v, want the large worker", l, err)
		}
		// The large one busy, the small one free: the request waits for
		// the large one rather than go where it cannot fit.
		var ae *api.Error
		if _, err := h.f.Acquire(h.ctx, need); !errors.As(err, &ae) || ae.HTTPStatus() != 429 {
			t.Fatalf("with the large worker busy: %v", err)
		}
		l.Release(Succeeded)
		pinned := need
		pinned.Pin = small.id
		if _, err := h.f.Acquire(h.ctx, pinned); !errors.As(err, &ae) || ae.HTTPStatus() != 400 || ae.Code != "context_length_exceeded" || ae.Param != "messages" {
			t.Fatalf("pinned to the small worker: %v", err)
		}
		// A text completion's prompt is its field prompt.
		pinned.PromptField = "prompt"
		if _, err := h.f.Acquire(h.ctx, pinned); !errors.As(err, &ae) || ae.Param != "prompt" || !strings.HasSuffix(ae.Message, "shorten the prompt") {
			t.Fatalf("a text completion pinned to the small worker: %v", err)
		}
		// A prompt both take goes to either.
		if l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", PromptTokens: 1000}); err != nil {
			t.Fatal(err)
		} else {
			l.Release(Succeeded)
		}
	})
}

// Workers given one key file hold one key: a request sealed to it goes to
// one that serves the model, not to one held back from it or draining.
func TestKeyHolderPrefersAWorkerThatServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		m := api.Model{ID: "m", Capabilities: []string{api.CapChat}}
		for _, name := range []string{"a", "b"} {
			fw := &fakeWorker{h: h, hello: api.Hello{Protocol: link.Protocol, Name: name, Version: "v1", MaxConcurrent: 4,
				SessionID: uuid.NewString(), Models: []api.Model{m}, E2EKey: &api.E2EKey{KeyID: "k1"}}}
			fw.sess = link.NewSession(link.Options{Role: link.Worker, Accept: fw.serve})
			t.Cleanup(func() { fw.sess.Close(nil) })
			fw.connect("o")
		}
		first := h.f.KeyHolder("o", "k1", "m")
		if first == "" {
			t.Fatal("no holder of the key")
		}
		for range 3 {
			time.Sleep(failureSpan / 2)
			l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Pin: first})
			if err != nil {
				t.Fatal(err)
			}
			l.Release(Failed)
		}
		if got := h.f.KeyHolder("o", "k1", "m"); got == first || got == "" {
			t.Fatalf("holder %q with %q held back from the model, want the other", got, first)
		}
		if got := h.f.KeyHolder("o", "k1", "other-model"); got == "" {
			t.Fatal("no holder for a model neither is held back from")
		}
	})
}

// Only the workers a checkpoint recorded as connected are moved to when
// their gateway was last known running with them, and only later.
func TestStillConnectedAt(t *testing.T) {
	rec := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	alive := rec.Add(55 * time.Second)
	earlier := rec.Add(-time.Minute)
	byOrg := map[string][]Remembered{"o": {
		{ID: "linked", OfflineSince: rec, LastSeen: rec, Checkpoint: true, Connected: true},
		{ID: "offline", OfflineSince: earlier, LastSeen: earlier, Checkpoint: true},
		{ID: "stopped", OfflineSince: rec, LastSeen: rec, Connected: true},
		{ID: "newer", OfflineSince: alive.Add(time.Second), LastSeen: alive.Add(time.Second), Checkpoint: true, Connected: true},
	}}
	StillConnectedAt(byOrg, alive)
	for _, tc := range []struct {
		id   string
		want time.Time
	}{{"linked", alive}, {"offline", earlier}, {"stopped", rec}, {"newer", alive.Add(time.Second)}} {
		for _, r := range byOrg["o"] {
			if r.ID == tc.id && (!r.OfflineSince.Equal(tc.want) || !r.LastSeen.Equal(tc.want)) {
				t.Errorf("%s: offline since %v, last seen %v, want %v", tc.id, r.OfflineSince, r.LastSeen, tc.want)
			}
		}
	}
	StillConnectedAt(nil, alive) // no record: nothing to do
}
