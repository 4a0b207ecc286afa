package rental

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

const year = 365 * 24 * time.Hour

// Steps of the wall clock, forward by a year and back by two, while one
// rental runs and another boots: billing is the time that elapsed, no
// deadline or maximum runtime fires early, polling goes on through the
// step back and finds both machines gone, and the rate limit is not held
// for the step's length.
func TestClockStepsMoveNoBillOrDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 360, 64))
		ctx := context.Background()
		e.acct.set(func(s *api.OrgSettings) { v := int64(3600); s.MaxRuntimeSeconds = &v })
		running, err := e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		if err != nil {
			t.Fatal(err)
		}
		booting, err := e.m.Rent(ctx, keyed("k2"), api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		if err != nil {
			t.Fatal(err)
		}
		e.connect(running)
		polls := map[string]time.Time{} // kept between ticks, as Run keeps it
		e.m.tick(ctx, polls)

		time.Sleep(5 * time.Minute)
		e.clk.Step(year)
		e.m.tick(ctx, polls)
		g, _ := e.m.Get("org1", running.ID)
		if g.Status != api.RentalRunning || g.SecondsBilled != 300 || g.AccruedCostGBP != 30 {
			t.Fatalf("a year ahead: %d s, £%s, %s; want 300 s, £0.30, running", g.SecondsBilled, g.AccruedCostGBP, g.Status)
		}
		if b, _ := e.m.Get("org1", booting.ID); b.Status != api.RentalProvisioning {
			t.Fatalf("the provisioning deadline fired on the step: %+v", b)
		}
		if s := must(e.m.Spend("org1")); s.MonthToDateGBP != 30 || s.CreditRemainingGBP != 10000-30 {
			t.Fatalf("spend a year ahead: %+v", s)
		}

		e.clk.Step(-2 * year)
		if err := e.m.Allow("k1"); err != nil {
			t.Fatalf("first rental request after the step back: %v", err)
		}
		time.Sleep(time.Minute)
		if err := e.m.Allow("k1"); err != nil {
			t.Fatalf("a minute after the last, the clock a year behind: %v", err)
		}
		if g, _ := e.m.Get("org1", running.ID); g.SecondsBilled != 360 {
			t.Fatalf("a year behind: %d s billed, want 360", g.SecondsBilled)
		}
		e.m.tick(ctx, polls) // polls both, each still there
		// Both machines vanish while the clock is behind: the booting one is
		// noticed at the next tick, the running one within its 30 s.
		for _, r := range []api.Rental{running, booting} {
			a, _ := e.m.Audit("org1", r.ID)
			delete(e.prov.insts, a.InstanceID)
		}
		e.m.tick(ctx, polls)
		if g, _ := e.m.Get("org1", running.ID); g.Status != api.RentalRunning {
			t.Fatalf("the running machine polled again at once: %+v", g)
		}
		if b, _ := e.m.Get("org1", booting.ID); b.Status != api.RentalStopped || b.Error == nil || !strings.Contains(*b.Error, "no longer has") {
			t.Fatalf("a booting machine lost after the step back: %+v", b)
		}
		time.Sleep(30 * time.Second)
		e.m.tick(ctx, polls)
		g, _ = e.m.Get("org1", running.ID)
		if g.Status != api.RentalStopped || g.Error == nil || g.SecondsBilled != 390 {
			t.Fatalf("a running machine lost after the step back: %s, %d s billed, want stopped at 390 s", g.Status, g.SecondsBilled)
		}
		if got := g.StoppedAt.Sub(*g.StartedAt); got != 390*time.Second {
			t.Fatalf("stored times %v apart, want 6m30s", got)
		}
	})
}

// The maximum runtime is the time the rental ran, not what the wall clock
// says: a step forward does not end it early, and it ends on time.
func TestMaxRuntimeAfterAClockStep(t *testing.T) {
	for _, step := range []time.Duration{year, -year} {
		t.Run(step.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, offer("h100", TierUK, 250, 64))
				ctx := context.Background()
				e.acct.set(func(s *api.OrgSettings) { v := int64(1800); s.MaxRuntimeSeconds = &v })
				r, _ := e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
				e.connect(r)
				polls := map[string]time.Time{}
				time.Sleep(time.Minute)
				e.clk.Step(step)
				e.m.tick(ctx, polls)
				if g, _ := e.m.Get("org1", r.ID); g.Status != api.RentalRunning || g.SecondsBilled != 60 {
					t.Fatalf("after the step: %s, %d s billed", g.Status, g.SecondsBilled)
				}
				time.Sleep(29*time.Minute + time.Second)
				e.m.tick(ctx, polls)
				if g, _ := e.m.Get("org1", r.ID); g.Status != api.RentalStopped || g.SecondsBilled != 1800 {
					t.Fatalf("at the maximum runtime: %s, %d s billed", g.Status, g.SecondsBilled)
				}
			})
		})
	}
}

// A connection the fleet stamped with the wall clock before a step starts
// billing at most at the rental's request, never a year before it.
func TestConnectionStampedBeforeAStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		r, _ := e.m.Rent(context.Background(), owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		time.Sleep(time.Minute)
		stamped := e.clk.Now()
		e.clk.Step(year)
		e.m.workerEvent("org1", api.WorkerEvent{WorkerID: r.WorkerID, EventType: api.EventConnected, CreatedAt: stamped})
		time.Sleep(time.Minute)
		g, _ := e.m.Get("org1", r.ID)
		if g.SecondsBilled > 120 || g.StartedAt.Before(g.CreatedAt) {
			t.Fatalf("billed %d s from %v for a rental requested at %v", g.SecondsBilled, g.StartedAt, g.CreatedAt)
		}
	})
}
