package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/clock"
	"github.com/svc-dev/svc/internal/money"
	"github.com/svc-dev/svc/internal/rental"
)

// clockStep steps the wall clock a year forward and two back under the
// gateway's rentals, its pruner and its clock watch. Setting a real
// process's clock needs root and would disturb the host, so this check
// runs in-process with a clock whose wall reading it steps while the
// monotonic one runs on, real time otherwise: the rental manager runs its
// own loop with a fast tick over a provider in memory, and the pruner a
// real store. Rentals: billing is the time that elapsed, no deadline or
// maximum runtime fires on the step, and a booting machine lost after the
// step back is noticed at once. Pruning: only what was due before the
// step is deleted. The watch counts both steps.
func clockStep(ctx context.Context, h *rig, r *result) error {
	clk := clock.NewStepped()
	if err := clockStepRentals(ctx, clk, scaled(h, 2*time.Second, 10*time.Second), r); err != nil {
		return err
	}
	if err := clockStepPrune(ctx, h, clk, r); err != nil {
		return err
	}
	const year = 365 * 24 * time.Hour
	watch := clock.NewWatch(clk, nil)
	for _, step := range []time.Duration{year, -2 * year, time.Second} {
		clk.Step(step)
		// The two clocks are read a moment apart: d is the step give or
		// take that moment.
		if d, stepped := watch.Check(); (d-step).Abs() > time.Second || stepped != (step.Abs() >= clock.StepThreshold) {
			r.fail("the watch saw a step of %v as %v, counted %v", step, d, stepped)
		}
	}
	r.figure("clock watch", "%d steps counted of a year forward, two back and a 1 s correction", watch.Steps())
	return nil
}

// clockStepRentals runs a rental for about hold, across the steps.
func clockStepRentals(ctx context.Context, clk *clock.Stepped, hold time.Duration, r *result) error {
	const year = 365 * 24 * time.Hour
	prov := &stepProvider{insts: map[string]*stepInstance{}}
	acct := &stepAccounts{}
	m, err := rental.New(rental.Config{Providers: []rental.Provider{prov}, Ledger: &stepLedger{recs: map[string][]byte{}},
		Accounts: acct, Fleet: stepFleet{}, WorkerID: func(_, name string) string { return "wk-" + name },
		Gateway: "http://gw", ProvisionDeadline: 10 * time.Minute, Tick: 10 * time.Millisecond, Clock: clk})
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(rctx) }()
	defer func() { stop(); <-done }()

	p := auth.Principal{OrgID: "org1", UserID: "u1", KeyID: "k1", Role: auth.RoleOwner}
	req := api.RentRequest{GPUModelID: "h100", TierID: rental.TierUK}
	running, err := m.Rent(ctx, p, req)
	if err != nil {
		return fmt.Errorf("rent: %w", err)
	}
	booting, err := m.Rent(ctx, p, req)
	if err != nil {
		return fmt.Errorf("rent: %w", err)
	}
	connected := time.Now()
	m.RecordEvent("org1", api.WorkerEvent{WorkerID: running.WorkerID, EventType: api.EventConnected, CreatedAt: clk.Now()})
	get := func(id string) api.Rental { v, _ := m.Get("org1", id); return v }
	if !eventually(ctx, 10*time.Second, func() bool { return get(running.ID).Status == api.RentalRunning }) {
		return errors.New("the rental's worker connection was not taken")
	}
	seen := time.Now() // billing started between connected and seen
	bootID := prov.idOf(booting.ID)

	// A year ahead: five ticks, each of which polls the booting machine.
	clk.Step(year)
	polls := prov.polls(bootID)
	if !eventually(ctx, 10*time.Second, func() bool { return prov.polls(bootID) >= polls+5 }) {
		r.fail("the booting machine was not polled after the step forward")
	}
	g, b := get(running.ID), get(booting.ID)
	ahead := g.SecondsBilled
	if limit := int64(time.Since(connected) / time.Second); g.Status != api.RentalRunning || ahead > limit {
		r.fail("a year ahead: the running rental is %s with %d s billed; %d s had elapsed", g.Status, ahead, limit)
	}
	if b.Status != api.RentalProvisioning {
		why := ""
		if b.Error != nil {
			why = *b.Error
		}
		r.fail("a year ahead: the booting rental is %s (%s): its deadline fired on the step", b.Status, why)
	}

	// A year behind, and the booting machine gone: polling goes on.
	clk.Step(-2 * year)
	lost := time.Now()
	prov.remove(bootID)
	if !eventually(ctx, 10*time.Second, func() bool { return get(booting.ID).Status == api.RentalStopped }) {
		r.fail("a year behind: a booting machine the provider lost was not noticed in 10 s (polling paused)")
	} else {
		r.figure("machine lost after a step back", "noticed in %d ms (polled every tick, 10 ms)", time.Since(lost).Milliseconds())
	}
	if e := get(booting.ID).Error; e != nil && !strings.Contains(*e, "no longer has") {
		r.fail("a year behind: the booting rental stopped for %q", *e)
	}
	behind := get(running.ID).SecondsBilled
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(seen.Add(hold))):
	}
	least := time.Since(seen)
	stopped, err := m.Stop(ctx, "org1", running.ID)
	if err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	most := time.Since(connected)
	billed := stopped.SecondsBilled
	r.figure("billing through +1 y and -2 y steps", "%d s billed for %.2f-%.2f s run (%d s a year ahead, %d s a year behind)",
		billed, least.Seconds(), most.Seconds(), ahead, behind)
	if behind < ahead || billed < behind || billed < int64(least/time.Second) || billed > int64(most/time.Second) {
		r.fail("billed %d s a year ahead, %d s a year behind, %d s at the stop, for %v to %v run", ahead, behind, billed, least, most)
	}
	if got := stopped.StoppedAt.Sub(*stopped.StartedAt); int64(got/time.Second) != billed {
		r.fail("the stored start and stop are %v apart, for %d s billed", got, billed)
	}
	return nil
}

func clockStepPrune(ctx context.Context, h *rig, clk *clock.Stepped, r *result) error {
	const day = 24 * time.Hour
	dir := filepath.Join(h.dir, "clockstep-data")
	if err := bolt.EnsureDir(dir); err != nil {
		return err
	}
	s, err := bolt.Open(dir, bolt.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	w := s.NewWriter(bolt.WriterOptions{})
	u, ev := s.Usage(w), s.Events(w)
	now := clk.Now()
	ages := []time.Duration{day, 10 * day, 40 * day, 100 * day, 300 * day, 500 * day}
	for _, age := range ages {
		u.Record("org1", api.UsageRow{ID: age.String(), CreatedAt: now.Add(-age), Model: "m", StatusCode: 200})
		ev.RecordEvent("org1", api.WorkerEvent{WorkerID: age.String(), EventType: api.EventConnected, CreatedAt: now.Add(-age)})
	}
	if err := w.Flush(); err != nil {
		return err
	}
	p := bolt.NewPruner(ev, u, nil, bolt.Retention{Events: 30 * day, Usage: 400 * day}, clk, nil)
	clk.Step(365 * day)
	ahead, err := p.Pass(ctx)
	if err != nil {
		return err
	}
	clk.Step(-2 * 365 * day)
	behind, err := p.Pass(ctx)
	if err != nil {
		return err
	}
	var wallRows, wallEvents int // what the stepped wall clock would have made due
	for _, age := range ages {
		if age+365*day > 400*day {
			wallRows++
		}
		if age+365*day > 30*day {
			wallEvents++
		}
	}
	r.figure("pruning a year ahead", "%d of %d usage rows and %d of %d events deleted, the ones due (older than 400 and 30 days); by the wall clock, %d rows and %d events",
		ahead.Usage, len(ages), ahead.Events, len(ages), wallRows, wallEvents)
	if ahead.Usage != 1 || ahead.Events != 4 || behind.Usage != 0 || behind.Events != 0 {
		r.fail("pruned %d rows and %d events a year ahead, %d and %d a year behind; want 1 and 4, then none",
			ahead.Usage, ahead.Events, behind.Usage, behind.Events)
	}
	return nil
}

// eventually reports whether cond held within limit, looking every 5 ms.
func eventually(ctx context.Context, limit time.Duration, cond func() bool) bool {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	end := time.After(limit)
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-end:
			return cond()
		case <-t.C:
		}
	}
	return true
}

// The rental manager's surroundings, in memory.

type stepLedger struct {
	mu   sync.Mutex
	recs map[string][]byte
}

func (l *stepLedger) Save(_ rental.Fence, id string, b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs[id] = append([]byte(nil), b...)
	return nil
}

func (l *stepLedger) All() ([][]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]byte
	for _, b := range l.recs {
		out = append(out, b)
	}
	return out, nil
}

func (l *stepLedger) Org(orgID string) ([][]byte, error) {
	all, _ := l.All()
	return rental.OfOrg(all, orgID)
}

// stepAccounts is one organisation that may rent for an hour at most.
type stepAccounts struct {
	mu sync.Mutex
	n  int
}

func (a *stepAccounts) OrgByID(id string) (api.Organization, bool) {
	hour := int64(3600)
	return api.Organization{ID: "org1", Name: "acme", Settings: api.OrgSettings{PaymentCardOnFile: true,
		CreditBalanceGBP: money.Pounds(1000), MaxRuntimeSeconds: &hour}}, id == "org1"
}

func (a *stepAccounts) CreateWorkerToken(string, api.CreateWorkerTokenRequest) (api.WorkerToken, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	return api.WorkerToken{ID: fmt.Sprintf("tok%d", a.n), Secret: fmt.Sprintf("svc_w_tok%d", a.n)}, nil
}

func (a *stepAccounts) RevokeWorkerToken(_, id string) (api.WorkerToken, error) {
	return api.WorkerToken{ID: id}, nil
}

type stepFleet struct{}

func (stepFleet) Workers(string) []api.Worker       { return nil }
func (stepFleet) Disconnect(string, string, string) {}

// stepProvider places machines in memory and counts the polls of each.
type stepProvider struct {
	mu    sync.Mutex
	n     int
	insts map[string]*stepInstance
}

type stepInstance struct {
	rental.Instance
	polls int
}

func (p *stepProvider) Name() string { return "memory" }

func (p *stepProvider) Offers(context.Context) ([]rental.Offer, error) {
	return []rental.Offer{{GPUModelID: "h100", Label: "H100", Vendor: "NVIDIA", Model: "H100", VRAMGB: 80, GPUCount: 1,
		RAMGB: 128, TierID: rental.TierUK, Region: "london", Country: "GB", OperatorEntity: "Op Ltd", OperatorDomicile: "GB",
		PriceMinor: 360, Currency: "GBP", Available: true, Ref: "h100"}}, nil
}

func (p *stepProvider) Create(_ context.Context, l rental.Launch) (rental.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	in := &stepInstance{Instance: rental.Instance{ID: fmt.Sprintf("m%d", p.n), RentalID: l.RentalID,
		State: rental.InstancePending, BootPhase: api.BootAllocating}}
	p.insts[in.ID] = in
	return in.Instance, nil
}

func (p *stepProvider) Status(_ context.Context, id string) (rental.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.insts[id]
	if in == nil {
		return rental.Instance{}, rental.ErrNotFound
	}
	in.polls++
	return in.Instance, nil
}

func (p *stepProvider) Destroy(_ context.Context, id string) error {
	p.remove(id)
	return nil
}

func (p *stepProvider) List(context.Context) ([]rental.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []rental.Instance
	for _, in := range p.insts {
		out = append(out, in.Instance)
	}
	return out, nil
}

func (p *stepProvider) remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.insts, id)
}

func (p *stepProvider) polls(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if in := p.insts[id]; in != nil {
		return in.polls
	}
	return 0
}

func (p *stepProvider) idOf(rentalID string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, in := range p.insts {
		if in.RentalID == rentalID {
			return in.ID
		}
	}
	return ""
}
