package rental

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
	"github.com/svc-dev/svc/internal/money"
)

var owner = auth.Principal{OrgID: "org1", UserID: "u1", KeyID: "k1", Role: auth.RoleOwner}

func keyed(id string) auth.Principal { p := owner; p.KeyID = id; return p }

func status(err error) int {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.HTTPStatus()
	}
	return 0
}

// The whole life of a rental on a synctest clock: nothing billed while
// provisioning, billing from the worker's connection to the second, none
// after the stop, and the stop confirmed with the provider, the token
// revoked and the worker disconnected.
func TestRentalLifecycleBillsToTheSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 128))
		ctx := context.Background()
		r, err := e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Models: []string{"qwen3-8b-q4"}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != api.RentalProvisioning || r.Connected || r.AccruedCostGBP != 0 || r.StartedAt != nil ||
			r.PricePerHourGBP != 250 || r.Name != "Rented h100 label" || r.WorkerID != "wk-Rented h100 label" || r.TierLabel != "UK" {
			t.Fatalf("new rental %+v", r)
		}
		if len(e.prov.launches) != 1 || !strings.Contains(e.prov.launches[0].BootScript, "svc_w_tok1") ||
			e.prov.launches[0].Worker.Name != r.Name || len(e.prov.launches[0].Worker.Models) != 1 {
			t.Fatalf("launch %+v", e.prov.launches)
		}
		p, err := e.m.Audit("org1", r.ID)
		if err != nil || p.TierID != TierUK || p.Country != "GB" || p.OperatorEntity != "Op Ltd" || p.Region != "r-uk" {
			t.Fatalf("placement %+v, %v", p, err)
		}

		time.Sleep(95 * time.Second) // booting is free
		if g, _ := e.m.Get("org1", r.ID); g.AccruedCostGBP != 0 || g.SecondsBilled != 0 {
			t.Fatalf("billed while provisioning: %+v", g)
		}
		e.connect(r)
		g, _ := e.m.Get("org1", r.ID)
		if g.Status != api.RentalRunning || !g.Connected || g.StartedAt == nil || !g.StartedAt.Equal(time.Now()) {
			t.Fatalf("after connect %+v", g)
		}
		for _, tc := range []struct {
			after time.Duration
			secs  int64
			cost  money.GBP
		}{
			{999 * time.Millisecond, 0, 0},
			{time.Second, 1, 0},
			{36 * time.Minute, 2160, 150},           // 0.6 h × £2.50
			{time.Hour + 30*time.Second, 3630, 252}, // 252.08p
			{time.Hour + 37*time.Second, 3637, 253}, // 252.57p rounds up
		} {
			start := *g.StartedAt
			time.Sleep(time.Until(start.Add(tc.after)))
			got, _ := e.m.Get("org1", r.ID)
			if got.SecondsBilled != tc.secs || got.AccruedCostGBP != tc.cost || got.HoursBilled != hours(tc.secs) {
				t.Errorf("after %v: %d s, £%s, %v h; want %d s, £%s", tc.after, got.SecondsBilled, got.AccruedCostGBP, got.HoursBilled, tc.secs, tc.cost)
			}
		}
		stopped, err := e.m.Stop(ctx, "org1", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if stopped.Status != api.RentalStopped || stopped.StoppedAt == nil || !stopped.StoppedAt.Equal(time.Now()) ||
			stopped.SecondsBilled != 3637 || stopped.AccruedCostGBP != 253 || stopped.Connected {
			t.Fatalf("stopped %+v", stopped)
		}
		if len(e.prov.destroyed) != 1 || !e.acct.revoked("tok1") || len(e.fleet.disconnected) != 1 {
			t.Fatalf("destroyed %v, revoked %v, disconnected %v", e.prov.destroyed, e.acct.revoked("tok1"), e.fleet.disconnected)
		}
		time.Sleep(5 * time.Hour)
		again, err := e.m.Stop(ctx, "org1", r.ID)
		if err != nil || again.SecondsBilled != 3637 || !again.StoppedAt.Equal(*stopped.StoppedAt) {
			t.Fatalf("stop again %+v, %v", again, err)
		}
		// The ledger holds it all: a new manager over it says the same.
		m2 := e.open(t)
		if got, _ := m2.Get("org1", r.ID); got.SecondsBilled != 3637 || got.Status != api.RentalStopped {
			t.Fatalf("reloaded %+v", got)
		}
	})
}

func TestRentRules(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(*env)
		req     api.RentRequest
		status  int
		message string
	}{
		{"missing fields", nil, api.RentRequest{}, 422, ""},
		{"unknown GPU", nil, api.RentRequest{GPUModelID: "tpu", TierID: TierUK}, 400, "Unknown GPU"},
		{"unknown tier", nil, api.RentRequest{GPUModelID: "h100", TierID: "moon"}, 400, "Unknown tier"},
		{"tier not offered", nil, api.RentRequest{GPUModelID: "h100", TierID: TierUKSovereign}, 400, "not offered"},
		{"unknown variant", nil, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Models: []string{"nope"}}, 400, "Unknown model variant"},
		{"not enough system memory", nil, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Models: []string{"gpt-oss-120b-mxfp4"}}, 400, "system memory"},
		{"unknown memory never rules out", nil, api.RentRequest{GPUModelID: "a100", TierID: TierGlobal, Models: []string{"deepseek-r1-671b-q4"}}, 202, ""},
		{"below the jurisdiction floor", func(e *env) {
			e.acct.set(func(s *api.OrgSettings) { f := TierUK; s.JurisdictionFloor = &f })
		}, api.RentRequest{GPUModelID: "a100", TierID: TierGlobal}, 400, "jurisdiction floor"},
		{"no card", func(e *env) { e.acct.set(func(s *api.OrgSettings) { s.PaymentCardOnFile = false }) },
			api.RentRequest{GPUModelID: "h100", TierID: TierUK}, 402, "payment card"},
		{"credit for the first hour", func(e *env) { e.acct.set(func(s *api.OrgSettings) { s.CreditBalanceGBP = 249 }) },
			api.RentRequest{GPUModelID: "h100", TierID: TierUK}, 402, "Not enough credit"},
		{"credit exactly enough", func(e *env) { e.acct.set(func(s *api.OrgSettings) { s.CreditBalanceGBP = 250 }) },
			api.RentRequest{GPUModelID: "h100", TierID: TierUK}, 202, ""},
		{"credit with a running rental's next hour", func(e *env) {
			e.acct.set(func(s *api.OrgSettings) { s.CreditBalanceGBP = 349 })
			if _, err := e.m.Rent(context.Background(), owner, api.RentRequest{GPUModelID: "a100", TierID: TierGlobal}); err != nil {
				panic(err)
			}
		}, api.RentRequest{GPUModelID: "h100", TierID: TierUK}, 402, "next hour"},
		{"budget reached", func(e *env) {
			e.acct.set(func(s *api.OrgSettings) { b := money.GBP(0); s.MonthlyBudgetGBP = &b })
		}, api.RentRequest{GPUModelID: "h100", TierID: TierUK}, 402, "budget"},
		{"no capacity", func(e *env) { e.prov.capacity["h100"] = 0 }, api.RentRequest{GPUModelID: "h100", TierID: TierUK}, 409, "No capacity"},
		{"a stricter tier serves a laxer request", nil, api.RentRequest{GPUModelID: "h100", TierID: TierGlobal}, 202, ""},
		{"name taken by a worker", func(e *env) { e.fleet.workers = []api.Worker{{WorkerName: "box"}} },
			api.RentRequest{GPUModelID: "h100", TierID: TierUK, Name: "box"}, 400, "already called"},
		// A name that is taken stays taken, whatever credit or capacity
		// a retry finds: it is told first.
		{"name taken, and credit short", func(e *env) {
			e.fleet.workers = []api.Worker{{WorkerName: "box"}}
			e.acct.set(func(s *api.OrgSettings) { s.CreditBalanceGBP = 1 })
		}, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Name: "box"}, 400, "already called"},
		{"name taken, and no capacity", func(e *env) {
			e.fleet.workers = []api.Worker{{WorkerName: "box"}}
			e.prov.capacity["h100"] = 0
		}, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Name: "box"}, 400, "already called"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, offer("h100", TierUK, 250, 64), offer("a100", TierGlobal, 100, 0))
				if tc.setup != nil {
					tc.setup(e)
				}
				r, err := e.m.Rent(context.Background(), keyed("k-"+tc.name), tc.req)
				if tc.status == 202 {
					if err != nil || r.Status != api.RentalProvisioning {
						t.Fatalf("rent: %+v, %v", r, err)
					}
					return
				}
				if status(err) != tc.status || !strings.Contains(err.Error(), tc.message) {
					t.Fatalf("got %v (%d), want %d with %q", err, status(err), tc.status, tc.message)
				}
				// Refused requests leave nothing running and no token behind.
				for _, x := range must(e.m.List("org1")) {
					if x.Status != api.RentalStopped && x.GPUModelID == tc.req.GPUModelID && tc.req.GPUModelID == "h100" {
						t.Fatalf("a refused request left %+v", x)
					}
				}
			})
		})
	}
}

// Two rents at once are checked in turn, each with the other counted: a
// second rent arriving while the first is being created waits for it, and
// one arriving while the first is being placed counts it at the price it
// was checked for. Either way the second is refused where the two
// together would pass the credit, or take one name twice.
func TestRentsAtOnceAreCheckedInTurn(t *testing.T) {
	a100 := api.RentRequest{GPUModelID: "a100", TierID: TierGlobal}
	h100 := api.RentRequest{GPUModelID: "h100", TierID: TierUK}
	named := func(r api.RentRequest, name string) api.RentRequest { r.Name = name; return r }
	for _, tc := range []struct {
		name          string
		first, second api.RentRequest
		// placing holds the first in its placement rather than in its
		// creation.
		placing bool
		credit  money.GBP
		status  int
		message string
	}{
		// £3.49: either GPU's first hour, not both.
		{"credit, while created", a100, h100, false, 349, 402, "next hour"},
		{"credit, while placed", a100, h100, true, 349, 402, "next hour"},
		{"a name, while created", named(a100, "twin"), named(a100, "twin"), false, 349, 400, "already called"},
		{"room for both", a100, a100, false, 200, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, offer("h100", TierUK, 250, 64), offer("a100", TierGlobal, 100, 0))
				e.acct.set(func(s *api.OrgSettings) { s.CreditBalanceGBP = tc.credit })
				var second error
				done := make(chan struct{})
				during := func() {
					go func() {
						defer close(done)
						_, second = e.m.Rent(context.Background(), keyed("k2"), tc.second)
					}()
					synctest.Wait()
					if !tc.placing {
						select {
						case <-done:
							t.Error("a second rent was checked while the first was being created")
						default:
						}
					}
				}
				if tc.placing {
					e.prov.creating = during
				} else {
					e.acct.minting = during
				}
				if _, err := e.m.Rent(context.Background(), owner, tc.first); err != nil {
					t.Fatal(err)
				}
				<-done
				if tc.status == 0 {
					if second != nil {
						t.Fatalf("second: %v", second)
					}
					return
				}
				if status(second) != tc.status || !strings.Contains(second.Error(), tc.message) {
					t.Fatalf("second: %v, want %d with %q", second, tc.status, tc.message)
				}
			})
		})
	}
}

// A rent whose caller gives up while another is being created stops
// waiting.
func TestRentWaitEndsWithItsCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("a100", TierGlobal, 100, 0))
		ctx, cancel := context.WithCancel(context.Background())
		e.acct.minting = func() {
			done := make(chan error)
			go func() {
				_, err := e.m.Rent(ctx, keyed("k2"), api.RentRequest{GPUModelID: "a100", TierID: TierGlobal})
				done <- err
			}()
			synctest.Wait()
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("the second rent: %v", err)
			}
		}
		if _, err := e.m.Rent(context.Background(), owner, api.RentRequest{GPUModelID: "a100", TierID: TierGlobal}); err != nil {
			t.Fatal(err)
		}
	})
}

// One request per key per minute, failed ones included; other keys are
// not held back.
func TestRentRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		if err := e.m.Allow("k1"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Second)
		err := e.m.Allow("k1")
		var ae *api.Error
		if !errors.As(err, &ae) || ae.HTTPStatus() != 429 || ae.RetryAfter != 40*time.Second {
			t.Fatalf("second call %v", err)
		}
		if err := e.m.Allow("k2"); err != nil {
			t.Fatalf("another key: %v", err)
		}
		time.Sleep(40 * time.Second)
		if err := e.m.Allow("k1"); err != nil {
			t.Fatalf("a minute later: %v", err)
		}
	})
}

// A restart does not reset the limit for a key that rented within the
// minute: the ledger says when it did.
func TestRentRateLimitOutlivesARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		if err := e.m.Allow("k1"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.m.Rent(context.Background(), owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Second)
		restarted := e.open(t)
		var ae *api.Error
		if err := restarted.Allow("k1"); !errors.As(err, &ae) || ae.HTTPStatus() != 429 || ae.RetryAfter != 40*time.Second {
			t.Fatalf("the key that rented, after a restart: %v", err)
		}
		if err := restarted.Allow("k2"); err != nil {
			t.Fatalf("another key after a restart: %v", err)
		}
	})
}

// A rental across midnight at the month's end: the spend report of the
// new month counts only its part after midnight.
func TestSpendSplitsAtTheMonth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 360, 64))
		r, err := e.m.Rent(context.Background(), owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		if err != nil {
			t.Fatal(err)
		}
		e.connect(r) // 23:00 on 31 March
		time.Sleep(90 * time.Minute)
		s := must(e.m.Spend("org1"))
		if !s.PeriodStart.Equal(time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)) || s.ActiveCount != 1 || len(s.Lines) != 1 ||
			s.Lines[0].Hours != 0.5 || s.Lines[0].CostGBP != 180 || s.MonthToDateGBP != 180 {
			t.Fatalf("spend %+v", s)
		}
		if s.CreditRemainingGBP != money.Pounds(100)-540 {
			t.Fatalf("credit remaining %s", s.CreditRemainingGBP)
		}
		if g, _ := e.m.Get("org1", r.ID); g.AccruedCostGBP != 540 {
			t.Fatalf("accrued %s", g.AccruedCostGBP)
		}
	})
}

// A destroy the provider fails once is tried again; the rental is marked
// stopped only once the provider confirms.
func TestStopRetriesAnUnconfirmedDestroy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		r, _ := e.m.Rent(context.Background(), owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		e.connect(r)
		time.Sleep(time.Minute)
		e.prov.failDestroy = 1
		got, err := e.m.Stop(context.Background(), "org1", r.ID)
		if err != nil || got.Status != api.RentalStopped || got.SecondsBilled != 60 {
			t.Fatalf("stop %+v, %v", got, err)
		}
		e.prov.failDestroy = 100
		r2, _ := e.m.Rent(context.Background(), keyed("k2"), api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		e.connect(r2)
		time.Sleep(time.Minute)
		if _, err := e.m.Stop(context.Background(), "org1", r2.ID); status(err) != 502 {
			t.Fatalf("stop with a provider that never confirms: %v", err)
		}
		// Billing stopped at the request all the same, and Run finishes the
		// stop once the provider answers.
		time.Sleep(time.Hour)
		if g, _ := e.m.Get("org1", r2.ID); g.Status != api.RentalRunning || g.SecondsBilled != 60 {
			t.Fatalf("unconfirmed %+v", g)
		}
		e.prov.failDestroy = 0
		e.m.tick(context.Background(), map[string]time.Time{})
		if g, _ := e.m.Get("org1", r2.ID); g.Status != api.RentalStopped || g.SecondsBilled != 60 {
			t.Fatalf("after the retry %+v", g)
		}
	})
}

// At start the ledger and the provider are made to agree.
func TestReconcile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		ctx := context.Background()
		running, _ := e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		e.connect(running)
		kept, _ := e.m.Rent(ctx, keyed("k2"), api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		e.connect(kept)
		// A machine no rental accounts for, and a running rental's machine gone.
		e.prov.insts["h100-orphan"] = &Instance{ID: "h100-orphan", RentalID: "unknown", State: InstanceRunning}
		a, _ := e.m.Audit("org1", running.ID)
		delete(e.prov.insts, a.InstanceID)
		time.Sleep(10 * time.Minute)

		m2 := e.open(t) // a restart
		m2.reconcile(ctx, nil)
		if !slices.Contains(e.prov.destroyed, "h100-orphan") {
			t.Fatalf("orphan not destroyed: %v", e.prov.destroyed)
		}
		g, _ := m2.Get("org1", running.ID)
		if g.Status != api.RentalStopped || g.Error == nil || g.SecondsBilled != 600 {
			t.Fatalf("lost machine %+v", g)
		}
		if g, _ := m2.Get("org1", kept.ID); g.Status != api.RentalRunning || g.SecondsBilled != 600 {
			t.Fatalf("kept %+v", g)
		}
	})
}

// A rental placed while the provider was listing its machines is not in
// the list, and not gone: reconciling (at start, then every ten minutes)
// leaves it running.
func TestReconcileSparesARentalPlacedMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		ctx := context.Background()
		var placed api.Rental
		e.prov.listed = func() {
			e.prov.listed = nil
			var err error
			if placed, err = e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK}); err != nil {
				t.Errorf("rent: %v", err)
			}
		}
		e.m.reconcile(ctx, nil)
		if g, _ := e.m.Get("org1", placed.ID); g.Status != api.RentalProvisioning {
			t.Fatalf("a rental placed during the listing is %s (%v)", g.Status, g.Error)
		}
	})
}

// A rental whose Create has not answered is not gone because a listing
// made meanwhile does not show its machine: the reconcile leaves it for
// Rent to record.
func TestReconcileSparesAMachineBeingPlaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		ctx := context.Background()
		e.prov.creating = func() { e.m.reconcile(ctx, nil) }
		r, err := e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		if err != nil {
			t.Fatal(err)
		}
		if len(e.prov.destroyed) != 0 {
			t.Fatalf("the reconcile destroyed %v, the machine being placed", e.prov.destroyed)
		}
		e.m.tick(ctx, map[string]time.Time{})
		if g, _ := e.m.Get("org1", r.ID); g.Status != api.RentalProvisioning {
			t.Fatalf("the rental is %s (%v)", g.Status, g.Error)
		}
	})
}

// A rental whose worker never connects is destroyed at the deadline and
// costs nothing; one past the organisation's maximum runtime is stopped.
func TestDeadlineAndMaxRuntime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		ctx := context.Background()
		slow, _ := e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		e.acct.set(func(s *api.OrgSettings) { v := int64(1800); s.MaxRuntimeSeconds = &v })
		capped, _ := e.m.Rent(ctx, keyed("k2"), api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		if e.prov.launches[1].Worker.MaxRuntime != 40*time.Minute {
			t.Fatalf("node timer %v", e.prov.launches[1].Worker.MaxRuntime)
		}
		e.connect(capped)
		time.Sleep(10*time.Minute + time.Second)
		e.m.tick(ctx, map[string]time.Time{})
		if g, _ := e.m.Get("org1", slow.ID); g.Status != api.RentalStopped || g.Error == nil || g.AccruedCostGBP != 0 ||
			!strings.Contains(*g.Error, "did not connect") {
			t.Fatalf("deadline %+v", g)
		}
		time.Sleep(20 * time.Minute)
		e.m.tick(ctx, map[string]time.Time{})
		if g, _ := e.m.Get("org1", capped.ID); g.Status != api.RentalStopped || g.SecondsBilled != 1800 ||
			g.Error == nil || !strings.Contains(*g.Error, "maximum runtime") {
			t.Fatalf("max runtime %+v", g)
		}
	})
}

// A maximum runtime set while a rental is already past it stops the
// rental as it is set: the stop is not dated back to when the rental
// would have reached it, nor its bill cut back.
func TestMaxRuntimeSetLaterStopsNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		ctx := context.Background()
		r, _ := e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		e.connect(r)
		time.Sleep(30 * time.Minute)
		e.m.tick(ctx, map[string]time.Time{})
		if g, _ := e.m.Get("org1", r.ID); g.Status != api.RentalRunning || g.SecondsBilled != 1800 {
			t.Fatalf("before the limit %+v", g)
		}
		setAt := e.clk.Now()
		e.acct.set(func(s *api.OrgSettings) { v := int64(600); s.MaxRuntimeSeconds, s.MaxRuntimeSince = &v, &setAt })
		e.m.tick(ctx, map[string]time.Time{})
		g, _ := e.m.Get("org1", r.ID)
		if g.Status != api.RentalStopped || g.SecondsBilled != 1800 || g.StoppedAt == nil || !g.StoppedAt.Equal(setAt) ||
			g.Error == nil || !strings.Contains(*g.Error, "maximum runtime") {
			t.Fatalf("a limit set past the rental's runtime: %+v", g)
		}
	})
}

// Boot phases come from the provider; installs from the worker's events.
func TestBootPhasesAndDownloads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		ctx := context.Background()
		r, _ := e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Models: []string{"qwen3-8b-q4", "qwen3-32b-q4"}})
		a, _ := e.m.Audit("org1", r.ID)
		e.prov.set(a.InstanceID, func(in *Instance) { in.BootPhase = api.BootPullingImage })
		e.m.tick(ctx, map[string]time.Time{})
		if g, _ := e.m.Get("org1", r.ID); *g.BootPhase != api.BootPullingImage || g.ModelDownload != nil {
			t.Fatalf("phase %+v", g)
		}
		e.connect(r)
		// Connected, no install reported yet: the installs are still to
		// come, so the download is not over.
		if g, _ := e.m.Get("org1", r.ID); g.ModelDownload == nil || g.ModelDownload.Total != 25.2e9 || g.ModelDownload.Completed != 0 {
			t.Fatalf("before the first install report %+v", g.ModelDownload)
		}
		ev := func(model, state string, done, total int64) {
			e.m.workerEvent("org1", api.WorkerEvent{WorkerID: r.WorkerID, EventType: api.EventModelInstall, CreatedAt: time.Now(),
				Install: &api.ModelInstall{Model: model, State: state, Completed: done, Total: total}})
		}
		ev("qwen3-8b-q4", api.InstallStarted, 0, 0)
		ev("qwen3-8b-q4", api.InstallProgress, 1, 2)
		g, _ := e.m.Get("org1", r.ID)
		// 5.2 GB half done of 25.2 GB.
		if g.ModelDownload == nil || g.ModelDownload.Total != 25.2e9 || g.ModelDownload.Completed != 2.6e9 ||
			g.ModelDownload.ProgressPct != 10.3 || *g.BootPhase != api.BootWorkerConnected {
			t.Fatalf("download %+v %v", g.ModelDownload, *g.BootPhase)
		}
		ev("qwen3-8b-q4", api.InstallCompleted, 0, 0)
		ev("qwen3-32b-q4", api.InstallStarted, 0, 0)
		if g, _ := e.m.Get("org1", r.ID); g.ModelDownload == nil || g.ModelDownload.Completed != 5.2e9 {
			t.Fatalf("one done %+v", g.ModelDownload)
		}
		ev("qwen3-32b-q4", api.InstallCompleted, 0, 0)
		if g, _ := e.m.Get("org1", r.ID); g.ModelDownload != nil || *g.BootPhase != api.BootReady {
			t.Fatalf("all done %+v %v", g.ModelDownload, *g.BootPhase)
		}

		// An install that failed is no longer in flight: the waiting ends.
		r2, _ := e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Models: []string{"qwen3-8b-q4"}})
		e.connect(r2)
		if g, _ := e.m.Get("org1", r2.ID); g.ModelDownload == nil {
			t.Fatal("no download before the first install report")
		}
		e.m.workerEvent("org1", api.WorkerEvent{WorkerID: r2.WorkerID, EventType: api.EventModelInstall, CreatedAt: time.Now(),
			Install: &api.ModelInstall{Model: "qwen3-8b-q4", State: api.InstallFailed}})
		if g, _ := e.m.Get("org1", r2.ID); g.ModelDownload != nil {
			t.Fatalf("a failed install still in flight: %+v", g.ModelDownload)
		}
	})
}

// A rental's token connects only as its worker, and its name only with
// its token.
func TestCheckWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		r, _ := e.m.Rent(context.Background(), owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Name: "rented-1"})
		for _, tc := range []struct {
			token, name string
			ok          bool
		}{
			{"tok1", "rented-1", true},
			{"tok1", "other", false},
			{"tokX", "rented-1", false},
			{"tokX", "other", true},
		} {
			if err := e.m.CheckWorker("org1", tc.token, tc.name); (err == nil) != tc.ok {
				t.Errorf("%s as %s: %v", tc.token, tc.name, err)
			}
		}
		_, _ = e.m.Stop(context.Background(), "org1", r.ID)
		if err := e.m.CheckWorker("org1", "tok1", "rented-1"); err == nil {
			t.Error("a stopped rental's token connected")
		}
	})
}

func TestCatalogue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUKSovereign, 300, 64), offer("h100", TierGlobal, 200, 0), offer("a100", TierAdequacy, 90, 32))
		e.prov.offers = append(e.prov.offers, func() Offer { o := offer("a100", TierGlobal, 5000, 16); o.Currency = "USD"; return o }())
		e.acct.set(func(s *api.OrgSettings) { f := TierAdequacy; s.JurisdictionFloor = &f })
		cat := e.m.Catalogue(context.Background(), "org1")
		if len(cat) != 2 || cat[0].GPUModelID != "a100" || cat[1].GPUModelID != "h100" {
			t.Fatalf("catalogue %+v", cat)
		}
		h := cat[1].Tiers
		if len(h) != 4 || h[0].TierID != TierUKSovereign || h[0].PricePerHourGBP != 300 || *h[0].MaxRAMGB != 64 || !h[0].Allowed {
			t.Fatalf("h100 tiers %+v", h)
		}
		if g := h[3]; g.TierID != TierGlobal || g.PricePerHourGBP != 200 || g.MaxRAMGB != nil || g.Allowed {
			t.Fatalf("h100 global %+v", g)
		}
		a := cat[0].Tiers
		// The USD machine is $50 at 0.8 = £40; the adequacy machine at £0.90
		// also satisfies global, and is cheaper.
		if len(a) != 2 || a[0].TierID != TierAdequacy || a[0].PricePerHourGBP != 90 || a[1].PricePerHourGBP != 90 || *a[1].MaxRAMGB != 32 {
			t.Fatalf("a100 tiers %+v", a)
		}
	})
}

// A rental whose connected event was lost starts all the same, at the
// time the fleet says its worker connected.
func TestConnectionWithoutItsEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		r, _ := e.m.Rent(context.Background(), owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		time.Sleep(time.Minute)
		at := time.Now()
		e.fleet.workers = []api.Worker{{WorkerID: r.WorkerID, WorkerName: r.Name, Status: api.StatusHealthy, ConnectedAt: &at}}
		time.Sleep(time.Minute)
		e.m.tick(context.Background(), map[string]time.Time{})
		if g, _ := e.m.Get("org1", r.ID); g.Status != api.RentalRunning || g.StartedAt == nil || !g.StartedAt.Equal(at) || g.SecondsBilled != 60 {
			t.Fatalf("%+v", g)
		}
	})
}

// boot_phase is the last boot milestone reached: stopping a rental,
// however it stops, does not take that back, and the ledger keeps it.
func TestStoppedRentalKeepsItsLastBootPhase(t *testing.T) {
	for _, tc := range []struct {
		name   string
		models []string
		steps  func(e *env, r api.Rental)
		want   string
	}{
		{"stopped while booting", nil, func(e *env, r api.Rental) {
			a, _ := e.m.Audit("org1", r.ID)
			e.prov.set(a.InstanceID, func(in *Instance) { in.BootPhase = api.BootPullingImage })
			e.m.tick(context.Background(), map[string]time.Time{})
		}, api.BootPullingImage},
		{"stopped while serving", nil, func(e *env, r api.Rental) { e.connect(r) }, api.BootReady},
		{"stopped with a model installing", []string{"qwen3-8b-q4"}, func(e *env, r api.Rental) {
			e.connect(r)
			e.m.workerEvent("org1", api.WorkerEvent{WorkerID: r.WorkerID, EventType: api.EventModelInstall, CreatedAt: time.Now(),
				Install: &api.ModelInstall{Model: "qwen3-8b-q4", State: api.InstallStarted}})
		}, api.BootWorkerConnected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, offer("h100", TierUK, 250, 64))
				ctx := context.Background()
				r := must(e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Models: tc.models}))
				tc.steps(e, r)
				if g, _ := e.m.Get("org1", r.ID); g.BootPhase == nil || *g.BootPhase != tc.want {
					t.Fatalf("before the stop: boot_phase %v, want %s", g.BootPhase, tc.want)
				}
				stopped := must(e.m.Stop(ctx, "org1", r.ID))
				if stopped.Status != api.RentalStopped || stopped.BootPhase == nil || *stopped.BootPhase != tc.want {
					t.Fatalf("stopped %s: boot_phase %v, want %s", stopped.Status, stopped.BootPhase, tc.want)
				}
				if g, _ := e.open(t).Get("org1", r.ID); g.BootPhase == nil || *g.BootPhase != tc.want {
					t.Fatalf("reloaded: boot_phase %v, want %s", g.BootPhase, tc.want)
				}
			})
		})
	}
}

// A rental no provider placed, its capacity taken between the check and
// the placement, is answered 409 and is no rental of the organisation's:
// not listed, not found, not in the spend report, and its name free for
// the next (which becomes its own worker).
func TestUnplacedRentalIsNotListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		e.prov.creating = func() {
			e.prov.mu.Lock()
			e.prov.capacity["h100"] = 0
			e.prov.mu.Unlock()
		}
		ctx := context.Background()
		if _, err := e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Name: "box"}); status(err) != 409 {
			t.Fatalf("rent: %v", err)
		}
		var id string
		for rid, r := range e.m.rentals {
			if !r.Refused || r.Status != api.RentalStopped || r.BootPhase != api.BootQueued {
				t.Fatalf("the ledger's record of the attempt %+v", r)
			}
			id = rid
		}
		if rs := must(e.m.List("org1")); len(rs) != 0 {
			t.Fatalf("listed %+v", rs)
		}
		if sp := must(e.m.Spend("org1")); len(sp.Lines) != 0 || sp.ActiveCount != 0 {
			t.Fatalf("spend %+v", sp)
		}
		for _, err := range []error{second(e.m.Get("org1", id)), second(e.m.Audit("org1", id)), second(e.m.Stop(ctx, "org1", id))} {
			if status(err) != 404 {
				t.Fatalf("the refused rental by id: %v, want 404", err)
			}
		}
		// Reloaded from the ledger, as after a restart: still not listed.
		if rs := must(e.open(t).List("org1")); len(rs) != 0 {
			t.Fatalf("listed after a reload %+v", rs)
		}
		e.prov.mu.Lock()
		e.prov.capacity["h100"], e.prov.creating = 1, nil
		e.prov.mu.Unlock()
		if r := must(e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Name: "box"})); r.Name != "box" {
			t.Fatalf("the name of the refused rental, asked for again: %+v", r)
		}
	})
}

func second[T any](_ T, err error) error { return err }

// A rental serves while its worker is connected and healthy: connected
// stays true once the worker has connected, as the spec defines it, and
// serving says what is true now, in the rental as in the spend report.
func TestRentalServingFollowsItsWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		ctx := context.Background()
		r := must(e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK}))
		check := func(what string, connected, serving bool) {
			t.Helper()
			g := must(e.m.Get("org1", r.ID))
			ls := must(e.m.List("org1"))
			sp := must(e.m.Spend("org1"))
			if g.Connected != connected || g.Serving == nil || *g.Serving != serving ||
				len(ls) != 1 || ls[0].Serving == nil || *ls[0].Serving != serving || len(sp.Lines) != 1 || sp.Lines[0].Serving != serving {
				t.Fatalf("%s: connected %v, serving %v (listed %+v, spend %+v); want %v, %v", what, g.Connected, g.Serving, ls, sp.Lines, connected, serving)
			}
		}
		check("provisioning", false, false)
		e.connect(r)
		e.fleet.mu.Lock()
		e.fleet.workers = []api.Worker{{WorkerID: r.WorkerID, WorkerName: r.Name, Status: api.StatusHealthy}}
		e.fleet.mu.Unlock()
		check("connected", true, true)
		e.fleet.mu.Lock()
		e.fleet.workers[0].ApprovalPending = true
		e.fleet.mu.Unlock()
		check("its worker awaiting approval", true, false)
		e.fleet.mu.Lock()
		e.fleet.workers[0].ApprovalPending = false
		e.fleet.workers[0].Status = api.StatusOffline
		e.fleet.mu.Unlock()
		check("its worker offline", true, false)
		must(e.m.Stop(ctx, "org1", r.ID))
		check("stopped", false, false)
	})
}

// A running rental whose machine is gone is billed until its worker's
// link dropped, when it went, not until the poll that found it gone: a
// worker offline since then, or one whose link is down and still in its
// grace when the poll comes.
func TestLostMachineIsBilledUntilItsWorkerDropped(t *testing.T) {
	for _, graced := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, offer("h100", TierUK, 250, 64))
			ctx := context.Background()
			r, err := e.m.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
			if err != nil {
				t.Fatal(err)
			}
			e.connect(r)
			time.Sleep(10 * time.Minute)
			dropped := time.Now()
			w := api.Worker{WorkerID: r.WorkerID, Status: api.StatusOffline, OfflineSince: &dropped}
			if graced {
				w = api.Worker{WorkerID: r.WorkerID, Status: api.StatusStale, LinkDownSince: &dropped}
			}
			e.fleet.mu.Lock()
			e.fleet.workers = []api.Worker{w}
			e.fleet.mu.Unlock()
			time.Sleep(10 * time.Second)
			e.prov.mu.Lock()
			for _, in := range e.prov.insts {
				in.State = InstanceTerminated
			}
			e.prov.mu.Unlock()
			e.m.tick(ctx, map[string]time.Time{})
			g, _ := e.m.Get("org1", r.ID)
			if g.Status != api.RentalStopped || g.StoppedAt == nil || !g.StoppedAt.Equal(dropped) || g.SecondsBilled != 600 {
				t.Fatalf("lost machine (link in its grace: %v) %+v, want stopped when its worker dropped, 600 s billed", graced, g)
			}
		})
	}
}
