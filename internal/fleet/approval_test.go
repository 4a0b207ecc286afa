package fleet

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/svc-dev/svc/internal/api"
)

// gate is an organisation's approvals as the account service keeps them.
type gate struct {
	mu       sync.Mutex
	required bool
	approved map[string]bool
}

func (g *gate) check(_, id string) (bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.required {
		return false, "approval is no longer required"
	}
	return !g.approved[id], "approved"
}

func (g *gate) set(required bool, approved ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.required = required
	for _, id := range approved {
		g.approved[id] = true
	}
}

func code(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

func (e *events) count(typ string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.evs {
		if ev.EventType == typ {
			n++
		}
	}
	return n
}

func TestPendingWorkerIsListedAndServesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gate{required: true, approved: map[string]bool{}}
		h := newHarness(t, Config{Approval: g.check})
		w := h.worker("o", "new", 1, chat("m"))
		if got := h.settled(w.id, "o"); !got.ApprovalPending || got.Status != api.StatusHealthy {
			t.Fatalf("listed as %+v, want healthy and approval_pending", got)
		}
		if h.ev.find(api.EventApprovalPending, false) == nil || h.ev.find(api.EventConnected, false) == nil {
			t.Fatalf("events %+v lack connected and approval_pending", h.ev.evs)
		}
		_, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Capability: api.CapChat})
		if status(err) != 503 || code(err) != api.CodeApprovalPending {
			t.Fatalf("request for its model: %v, want 503 %s", err, api.CodeApprovalPending)
		}
		_, err = h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Pin: w.id})
		if status(err) != 503 || code(err) != api.CodeApprovalPending {
			t.Fatalf("request pinned to it: %v, want 503 %s", err, api.CodeApprovalPending)
		}
		if ms := h.f.Models("o"); len(ms) != 0 {
			t.Fatalf("models of a pending worker offered: %+v", ms)
		}

		g.set(true, w.id)
		if listed, waited := h.f.Approve("o", w.id, "svc admin"); !listed || !waited {
			t.Fatalf("Approve = %v, %v", listed, waited)
		}
		if ev := h.ev.find(api.EventApproved, false); ev == nil || ev.Actor == nil || *ev.Actor != "svc admin" {
			t.Fatalf("approved event %+v", ev)
		}
		l, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m", Capability: api.CapChat})
		if err != nil {
			t.Fatal(err)
		}
		if got := run(t, l); got != "ok from new" {
			t.Fatalf("answered %q", got)
		}
		l.Release(Succeeded)
		if h.settled(w.id, "o").ApprovalPending {
			t.Fatal("still pending after approval")
		}

		// A new session of an approved worker is not asked again.
		restarted := h.worker("o", "new", 1, chat("m"))
		if h.settled(restarted.id, "o").ApprovalPending || h.ev.count(api.EventApprovalPending) != 1 {
			t.Fatalf("approved worker asked again: %+v", h.ev.evs)
		}
	})
}

func TestPendingWorkersGoWhenApprovalIsTurnedOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gate{required: true, approved: map[string]bool{}}
		h := newHarness(t, Config{Approval: g.check})
		w := h.worker("o", "w", 1, chat("m"))
		h.f.recheckApprovals()
		if !h.settled(w.id, "o").ApprovalPending {
			t.Fatal("let go while still pending")
		}
		g.set(false)
		h.f.recheckApprovals()
		if h.settled(w.id, "o").ApprovalPending {
			t.Fatal("still pending with approval off")
		}
		ev := h.ev.find(api.EventApproved, false)
		if ev == nil || ev.Detail == nil || *ev.Detail != "approval is no longer required" || ev.Actor != nil {
			t.Fatalf("approved event %+v", ev)
		}
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWithoutApprovalNothingWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		w := h.worker("o", "w", 1, chat("m"))
		if h.settled(w.id, "o").ApprovalPending || h.ev.count(api.EventApprovalPending) != 0 {
			t.Fatal("a worker waits with no approval gate")
		}
		if listed, waited := h.f.Approve("o", w.id, "svc admin"); !listed || waited {
			t.Fatalf("Approve of a serving worker = %v, %v", listed, waited)
		}
		if listed, _ := h.f.Approve("o", "wk_nobody", "svc admin"); listed {
			t.Fatal("approved a worker nobody knows")
		}
	})
}
