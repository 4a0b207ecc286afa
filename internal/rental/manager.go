// Package rental rents GPU machines from providers for organisations: the
// catalogue and its prices, the rules a rental must pass, the ledger and
// its billing to the second, and the lifecycle from placement to a
// connected worker to a confirmed stop, reconciled with every provider.
package rental

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/clock"
	"github.com/svc-dev/svc/internal/store"
)

// Ledger keeps rental records durably.
type Ledger interface {
	Save(id string, record []byte) error
	All() ([][]byte, error)
}

// Accounts is what renting needs of the organisations.
type Accounts interface {
	OrgByID(id string) (api.Organization, bool)
	CreateWorkerToken(org string, req api.CreateWorkerTokenRequest) (api.WorkerToken, error)
	RevokeWorkerToken(org, id string) (api.WorkerToken, error)
}

// Fleet is what renting needs of the connected workers.
type Fleet interface {
	Workers(orgID string) []api.Worker
	Disconnect(orgID, workerID, reason string)
}

// Config is what a Manager runs with.
type Config struct {
	Providers []Provider
	Ledger    Ledger
	Accounts  Accounts
	Fleet     Fleet
	// WorkerID is the worker id a worker name gets in an organisation.
	WorkerID func(orgID, name string) string
	// Gateway is the URL rentals' workers dial.
	Gateway string
	Boot    BootOptions
	// Rates convert providers' currencies to pounds (pounds per unit);
	// GBP is always 1. Margin is added on top (0.1 is 10%).
	Rates  map[string]float64
	Margin float64
	// ProvisionDeadline is how long a rental's worker may take to connect
	// before the rental is destroyed (default 15 minutes).
	ProvisionDeadline time.Duration
	// RentEvery is how often one API key may ask for a rental (default a
	// minute).
	RentEvery time.Duration
	// Limiter counts the rental requests against RentEvery where replicas
	// share the count; nil counts them in this process's memory.
	Limiter store.RentLimiter
	// Tick is how often the manager looks at its rentals (default 1 s).
	Tick time.Duration
	// CatalogueTTL bounds how old cached offers may be (default 60 s).
	CatalogueTTL time.Duration
	// Clock is read for every time the manager bills, waits or records;
	// nil is the system's clock.
	Clock  clock.Clock
	Logger *slog.Logger
}

// Manager runs the organisations' rentals.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	models []Model
	// clock is the time of every bill, deadline and record: a step of the
	// system clock while the gateway runs moves none of them.
	clock *clock.Steady

	// mem is the rental rate limit when Config.Limiter is nil.
	mem *MemoryLimiter

	mu      sync.Mutex
	rentals map[string]*record
	dl      map[string]downloads // by rental id
	offers  map[string]offerCache
	// placing holds the rentals whose machine Rent is asking a provider
	// for: one a listing does not show yet is not gone.
	placing map[string]bool

	// events carries worker events from the fleet, which calls under its
	// own lock, to Run.
	events chan workerEvent
}

type workerEvent struct {
	orgID string
	ev    api.WorkerEvent
}

type offerCache struct {
	at     time.Time
	offers []Offer
	err    error
}

// New loads the ledger and returns a manager; Run drives it.
func New(cfg Config) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ProvisionDeadline <= 0 {
		cfg.ProvisionDeadline = 15 * time.Minute
	}
	if cfg.RentEvery <= 0 {
		cfg.RentEvery = time.Minute
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.CatalogueTTL <= 0 {
		cfg.CatalogueTTL = time.Minute
	}
	if cfg.Rates == nil {
		cfg.Rates = map[string]float64{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System()
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, models: Models(), clock: clock.NewSteady(cfg.Clock), rentals: map[string]*record{},
		placing: map[string]bool{},
		dl:      map[string]downloads{}, offers: map[string]offerCache{},
		events: make(chan workerEvent, 1024)}
	m.mem = NewMemoryLimiter(m.now)
	raws, err := cfg.Ledger.All()
	if err != nil {
		return nil, err
	}
	for _, raw := range raws {
		var r record
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("decode rental: %w", err)
		}
		m.rentals[r.ID] = &r
	}
	return m, nil
}

// now is the manager's time: the wall clock as read at start, advanced
// by the monotonic clock. Billing, deadlines, maximum runtimes and the
// intervals between polls are differences between its readings, so they
// are the time that elapsed; what is stored stays a wall-clock instant,
// which the next start, reading the wall clock afresh, continues from.
func (m *Manager) now() time.Time { return m.clock.Now() }

// eventTime is on the manager's clock the time another part of the
// gateway stamped with the wall clock, no later than now: a connection
// noticed a moment after it happened is billed from when it happened.
func (m *Manager) eventTime(t time.Time) time.Time {
	now := m.now()
	if at := m.clock.FromWall(t); at.Before(now) {
		return at
	}
	return now
}

func (m *Manager) provider(name string) Provider {
	for _, p := range m.cfg.Providers {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// save writes r to the ledger. Called with m.mu held: the ledger write is
// a short bbolt transaction, and holding the lock keeps the ledger's order
// the same as the memory's.
func (m *Manager) saveLocked(r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode rental: %w", err)
	}
	return m.cfg.Ledger.Save(r.ID, b)
}

// RecordEvent takes a worker event from the fleet. It never blocks: the
// fleet calls it under its lock.
func (m *Manager) RecordEvent(orgID string, ev api.WorkerEvent) {
	select {
	case m.events <- workerEvent{orgID, ev}:
	default:
		m.log.Warn("rental: worker event dropped, the queue is full", "worker_id", ev.WorkerID, "event", ev.EventType)
	}
}

// CheckWorker decides whether a worker may connect with token tokenID
// under name: a rental's token only as that rental's worker, while the
// rental runs; a rental's worker name only with its token.
func (m *Manager) CheckWorker(orgID, tokenID, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.rentals {
		if err := r.admits(orgID, tokenID, name); err != nil {
			return err
		}
	}
	return nil
}

// CheckWorkerIn is CheckWorker against the rentals the ledger holds, for a
// replica of a cluster that does not run the rentals itself.
func CheckWorkerIn(l Ledger, orgID, tokenID, name string) error {
	raws, err := l.All()
	if err != nil {
		return fmt.Errorf("read the rentals: %w", err)
	}
	for _, raw := range raws {
		var r record
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Errorf("decode rental: %w", err)
		}
		if err := r.admits(orgID, tokenID, name); err != nil {
			return err
		}
	}
	return nil
}

// admits is nil unless the rental forbids a worker of orgID to connect
// with token tokenID under name.
func (r *record) admits(orgID, tokenID, name string) error {
	if r.OrgID != orgID {
		return nil
	}
	switch {
	case r.TokenID == tokenID && !r.active():
		return errors.New("this rental has stopped")
	case r.TokenID == tokenID && r.Name != name:
		return fmt.Errorf("this token belongs to the rental %s and connects only as %q", r.ID, r.Name)
	case r.TokenID != tokenID && r.active() && r.Name == name:
		return fmt.Errorf("the name %q belongs to the rental %s; connect with its token", name, r.ID)
	}
	return nil
}

// Run looks after the rentals until ctx ends: reconciliation with every
// provider at start, then worker connections and installs, boot phases,
// provisioning deadlines, maximum runtimes and stops awaiting confirmation.
func (m *Manager) Run(ctx context.Context) error {
	m.reconcile(ctx)
	t := time.NewTicker(m.cfg.Tick)
	defer t.Stop()
	// Reconciling again now and then catches a machine a provider placed
	// while answering with an error (a launch whose reply was lost).
	again := time.NewTicker(10 * time.Minute)
	defer again.Stop()
	lastPoll := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case we := <-m.events:
			m.workerEvent(we.orgID, we.ev)
		case <-t.C:
			m.tick(ctx, lastPoll)
		case <-again.C:
			m.reconcile(ctx)
		}
	}
}

// workerEvent moves a rental on what its worker did.
func (m *Manager) workerEvent(orgID string, ev api.WorkerEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.byWorkerLocked(orgID, ev.WorkerID)
	if r == nil {
		return
	}
	switch ev.EventType {
	case api.EventConnected, api.EventReplaced:
		if r.StartedAt != nil {
			return
		}
		// Never before the rental was asked for, whatever a step of the
		// wall clock between the event and now made of its time.
		at := m.eventTime(ev.CreatedAt)
		if at.Before(r.CreatedAt) {
			at = r.CreatedAt
		}
		r.StartedAt = &at
		r.Status = api.RentalRunning
		r.BootPhase = api.BootWorkerConnected
		if len(r.Models) == 0 {
			r.BootPhase = api.BootReady
		}
		r.note(at, "worker_connected", "the worker connected; billing starts")
		if err := m.saveLocked(r); err != nil {
			m.log.Error("rental: save", "rental", r.ID, "err", err)
		}
	case api.EventModelInstall:
		in := ev.Install
		if in == nil {
			return
		}
		id := m.requestedLocked(r, in.Model)
		if id == "" {
			return
		}
		dl := m.dl[r.ID]
		if dl == nil {
			dl = downloads{}
			m.dl[r.ID] = dl
		}
		switch in.State {
		case api.InstallStarted:
			dl[id] = 0
		case api.InstallProgress:
			if in.Total > 0 {
				dl[id] = min(1, float64(in.Completed)/float64(in.Total))
			}
		case api.InstallCompleted, api.InstallFailed:
			delete(dl, id)
			switch {
			case in.State == api.InstallCompleted && r.installed(id):
				// Seen already in the worker's models (catchInstalls).
			case in.State == api.InstallCompleted:
				r.Installed = append(r.Installed, id)
				r.note(m.eventTime(ev.CreatedAt), "model_"+in.State, id)
			default:
				r.note(m.eventTime(ev.CreatedAt), "model_"+in.State, id)
			}
			if len(dl) == 0 {
				delete(m.dl, r.ID)
			}
			if len(r.Installed) == len(r.Models) && r.StartedAt != nil {
				r.BootPhase = api.BootReady
			}
			if err := m.saveLocked(r); err != nil {
				m.log.Error("rental: save", "rental", r.ID, "err", err)
			}
		}
	}
}

// catchConnections starts the rentals whose worker the fleet shows
// connected while they still wait for it, and marks the installs of those
// whose worker serves their models: the events are the usual way, but
// events are dropped when their queue is full, and a rental must not then
// wait for its deadline. Billing starts at the fleet's own connection
// time.
func (m *Manager) catchConnections() {
	waiting := map[string]map[string]bool{} // org -> worker ids
	m.mu.Lock()
	for _, r := range m.rentals {
		if r.active() && r.StopRequestedAt == nil && (r.StartedAt == nil || len(r.Installed) < len(r.Models)) {
			if waiting[r.OrgID] == nil {
				waiting[r.OrgID] = map[string]bool{}
			}
			waiting[r.OrgID][r.WorkerID] = true
		}
	}
	m.mu.Unlock()
	for org, ids := range waiting {
		for _, w := range m.cfg.Fleet.Workers(org) {
			if ids[w.WorkerID] && w.ConnectedAt != nil && w.OfflineSince == nil {
				m.workerEvent(org, api.WorkerEvent{WorkerID: w.WorkerID, EventType: api.EventConnected, CreatedAt: *w.ConnectedAt})
				m.catchInstalls(org, w)
			}
		}
	}
}

// catchInstalls counts as installed the requested models a rental's
// connected worker serves: the install events are the usual way, but they
// reach only the replica the worker is linked to, which in a cluster may
// not be the one running the rentals, and events are dropped when their
// queue is full.
func (m *Manager) catchInstalls(orgID string, w api.Worker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.byWorkerLocked(orgID, w.WorkerID)
	if r == nil || r.StartedAt == nil {
		return
	}
	now := m.now()
	changed := false
	for _, md := range w.Models {
		if id := m.requestedLocked(r, md.ID); id != "" && !r.installed(id) {
			r.Installed = append(r.Installed, id)
			r.note(now, "model_"+api.InstallCompleted, id)
			if dl := m.dl[r.ID]; dl != nil {
				delete(dl, id)
				if len(dl) == 0 {
					delete(m.dl, r.ID)
				}
			}
			changed = true
		}
	}
	if !changed {
		return
	}
	if len(r.Installed) == len(r.Models) {
		r.BootPhase = api.BootReady
	}
	if err := m.saveLocked(r); err != nil {
		m.log.Error("rental: save", "rental", r.ID, "err", err)
	}
}

// requestedLocked maps the model a worker installs (a variant id, or its
// Ollama name) to the requested variant id.
func (m *Manager) requestedLocked(r *record, model string) string {
	for _, id := range r.Models {
		if id == model {
			return id
		}
		if v, ok := variantByID(m.models, id); ok && v.Ollama == model {
			return id
		}
	}
	return ""
}

func (m *Manager) byWorkerLocked(orgID, workerID string) *record {
	var found *record
	for _, r := range m.rentals {
		if r.OrgID == orgID && r.WorkerID == workerID && r.active() {
			found = r
		}
	}
	return found
}

// tick polls providers for boot phases and lost machines, and enforces
// deadlines and maximum runtimes.
func (m *Manager) tick(ctx context.Context, lastPoll map[string]time.Time) {
	m.catchConnections()
	now := m.now()
	type job struct {
		r    record
		kind string
	}
	var jobs []job
	m.mu.Lock()
	for _, r := range m.rentals {
		switch {
		case !r.active():
			delete(lastPoll, r.ID)
		case r.StopRequestedAt != nil:
			jobs = append(jobs, job{*r, "stop"})
		case r.StartedAt == nil && now.Sub(r.CreatedAt) > m.cfg.ProvisionDeadline:
			jobs = append(jobs, job{*r, "deadline"})
		case r.StartedAt != nil && m.overRuntimeLocked(r, now):
			jobs = append(jobs, job{*r, "runtime"})
		case r.InstanceID != "":
			// Booting machines are watched closely, for their phases;
			// running ones only for whether they are still there.
			every := time.Duration(0)
			if r.StartedAt != nil {
				every = 30 * time.Second
			}
			if now.Sub(lastPoll[r.ID]) >= every {
				lastPoll[r.ID] = now
				jobs = append(jobs, job{*r, "poll"})
			}
		}
	}
	m.mu.Unlock()
	for _, j := range jobs {
		if ctx.Err() != nil {
			return
		}
		switch j.kind {
		case "stop":
			m.finishStop(ctx, j.r.ID)
		case "deadline":
			m.requestStop(j.r.ID, now, fmt.Sprintf("the worker did not connect within %s of the request", m.cfg.ProvisionDeadline), true)
			m.finishStop(ctx, j.r.ID)
		case "runtime":
			// Billing ends at the maximum runtime itself, not at the tick
			// that noticed it.
			m.requestStop(j.r.ID, m.runtimeEnd(&j.r, now), "reached the organisation's maximum runtime", false)
			m.finishStop(ctx, j.r.ID)
		case "poll":
			m.poll(ctx, j.r)
		}
	}
}

func (m *Manager) overRuntimeLocked(r *record, now time.Time) bool {
	return !m.runtimeEnd(r, now).After(now)
}

// runtimeEnd is when a running rental reaches its organisation's maximum
// runtime; after now when there is none.
func (m *Manager) runtimeEnd(r *record, now time.Time) time.Time {
	o, ok := m.cfg.Accounts.OrgByID(r.OrgID)
	if !ok || o.Settings.MaxRuntimeSeconds == nil || r.StartedAt == nil {
		return now.Add(time.Hour)
	}
	return r.StartedAt.Add(time.Duration(*o.Settings.MaxRuntimeSeconds) * time.Second)
}

// poll asks the provider about a rental's machine.
func (m *Manager) poll(ctx context.Context, r record) {
	p := m.provider(r.Provider)
	if p == nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	inst, err := p.Status(pctx, r.InstanceID)
	now := m.now()
	switch {
	case errors.Is(err, ErrNotFound) || err == nil && (inst.State == InstanceTerminated || inst.State == InstanceFailed):
		why := "the provider no longer has the machine"
		if err == nil && inst.Error != "" {
			why = "the machine failed: " + inst.Error
		}
		m.requestStop(r.ID, now, why, true)
		m.finishStop(ctx, r.ID)
	case err != nil:
		m.log.Warn("rental: provider status", "rental", r.ID, "provider", r.Provider, "err", err)
	default:
		m.mu.Lock()
		defer m.mu.Unlock()
		cur := m.rentals[r.ID]
		if cur == nil || cur.StartedAt != nil || inst.BootPhase == "" || inst.BootPhase == cur.BootPhase {
			return
		}
		cur.BootPhase = inst.BootPhase
		cur.note(now, "boot_phase", inst.BootPhase)
		if err := m.saveLocked(cur); err != nil {
			m.log.Error("rental: save", "rental", r.ID, "err", err)
		}
	}
}

// requestStop records that rental id is to stop at at, for why; billing
// ends there. failed marks an error on the rental.
func (m *Manager) requestStop(id string, at time.Time, why string, failed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rentals[id]
	if r == nil || !r.active() || r.StopRequestedAt != nil {
		return
	}
	r.StopRequestedAt = &at
	r.StopReason = why
	if failed {
		r.Error = why
	}
	r.note(at, "stop_requested", why)
	if err := m.saveLocked(r); err != nil {
		m.log.Error("rental: save", "rental", r.ID, "err", err)
	}
	m.log.Info("rental stopping", "rental", id, "reason", why)
}

// finishStop destroys a stopping rental's machine and, once the provider
// confirms, revokes its token, disconnects its worker and marks it
// stopped. It returns whether the rental is stopped.
func (m *Manager) finishStop(ctx context.Context, id string) (bool, error) {
	m.mu.Lock()
	r := m.rentals[id]
	if r == nil || !r.active() {
		m.mu.Unlock()
		return true, nil
	}
	snap := *r
	m.mu.Unlock()
	if snap.InstanceID != "" {
		p := m.provider(snap.Provider)
		if p == nil {
			return false, fmt.Errorf("provider %q is not configured", snap.Provider)
		}
		dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := p.Destroy(dctx, snap.InstanceID)
		cancel()
		if err != nil && !errors.Is(err, ErrNotFound) {
			m.log.Warn("rental: destroy not confirmed; will retry", "rental", id, "provider", snap.Provider, "err", err)
			return false, err
		}
	}
	if org, ok := m.cfg.Accounts.OrgByID(snap.OrgID); ok && snap.TokenID != "" {
		if _, err := m.cfg.Accounts.RevokeWorkerToken(org.Name, snap.TokenID); err != nil {
			m.log.Warn("rental: revoke token", "rental", id, "err", err)
		}
	}
	m.cfg.Fleet.Disconnect(snap.OrgID, snap.WorkerID, "its rental stopped")
	m.mu.Lock()
	defer m.mu.Unlock()
	r = m.rentals[id]
	if r == nil || !r.active() {
		return true, nil
	}
	at := *r.StopRequestedAt
	r.StoppedAt = &at
	r.Status = api.RentalStopped
	r.BootPhase = ""
	delete(m.dl, id)
	r.note(m.now(), "stopped", "the provider confirmed the machine is gone")
	if err := m.saveLocked(r); err != nil {
		return false, err
	}
	m.log.Info("rental stopped", "rental", id, "billed_seconds", r.billedSeconds(at))
	return true, nil
}

// reconcile makes the ledger and the providers agree: machines no rental
// accounts for are destroyed, rentals whose machine is gone are stopped
// with an error, and a rental whose placement was cut short by a crash
// adopts its machine or fails.
func (m *Manager) reconcile(ctx context.Context) {
	for _, p := range m.cfg.Providers {
		// Only a rental placed before the listing began can be missing
		// from it: one placed while the provider answered is not gone.
		m.mu.Lock()
		placed := map[string]string{}
		for _, r := range m.rentals {
			if r.active() && r.Provider == p.Name() {
				placed[r.ID] = r.InstanceID
			}
		}
		m.mu.Unlock()
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		insts, err := p.List(lctx)
		cancel()
		if err != nil {
			m.log.Error("rental: cannot list machines to reconcile", "provider", p.Name(), "err", err)
			continue
		}
		seen := map[string]Instance{}
		for _, inst := range insts {
			m.mu.Lock()
			r := m.rentals[inst.RentalID]
			keep := r != nil && r.active() && r.Provider == p.Name() && (r.InstanceID == "" || r.InstanceID == inst.ID)
			if keep && r.InstanceID == "" {
				now := m.now()
				r.InstanceID, r.PlacedAt = inst.ID, &now
				r.note(now, "placed", "adopted the machine found at start-up")
				if err := m.saveLocked(r); err != nil {
					m.log.Error("rental: save", "rental", r.ID, "err", err)
				}
			}
			m.mu.Unlock()
			if keep {
				seen[inst.ID] = inst
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err := p.Destroy(dctx, inst.ID)
			cancel()
			m.log.Warn("rental: destroyed a machine no running rental accounts for", "provider", p.Name(),
				"instance", inst.ID, "rental", inst.RentalID, "err", err)
		}
		now := m.now()
		m.mu.Lock()
		var gone []string
		for _, r := range m.rentals {
			if !r.active() || r.Provider != p.Name() || r.StopRequestedAt != nil {
				continue
			}
			if inst, ok := placed[r.ID]; !ok || inst != r.InstanceID || m.placing[r.ID] {
				continue
			}
			if _, ok := seen[r.InstanceID]; !ok || r.InstanceID == "" {
				gone = append(gone, r.ID)
			}
		}
		m.mu.Unlock()
		for _, id := range gone {
			m.requestStop(id, now, "the machine was gone when the gateway started", true)
			m.finishStop(ctx, id)
		}
	}
}

// List returns an organisation's rentals, newest first.
func (m *Manager) List(orgID string) []api.Rental {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var rs []*record
	for _, r := range m.rentals {
		if r.OrgID == orgID {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *record) int { return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(a.ID, b.ID)) })
	out := make([]api.Rental, len(rs))
	for i, r := range rs {
		out[i] = r.view(now, m.dl[r.ID], m.downloadGB)
	}
	return out
}

// Get returns one rental of the organisation.
func (m *Manager) Get(orgID, id string) (api.Rental, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rentals[id]
	if r == nil || r.OrgID != orgID {
		return api.Rental{}, api.NotFound("No rental %s in this organisation", id)
	}
	return r.view(m.now(), m.dl[r.ID], m.downloadGB), nil
}

// Audit returns a rental's placement record: 404 until it is placed.
func (m *Manager) Audit(orgID, id string) (api.Placement, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rentals[id]
	if r == nil || r.OrgID != orgID {
		return api.Placement{}, api.NotFound("No rental %s in this organisation", id)
	}
	p, ok := r.placement()
	if !ok {
		return api.Placement{}, api.NotFound("Rental %s has not been placed yet", id)
	}
	return p, nil
}

// Stop stops a rental: its machine is destroyed and confirmed gone, its
// worker disconnected, and billing ends at the moment of the call.
// Stopping a stopped rental returns it unchanged.
func (m *Manager) Stop(ctx context.Context, orgID, id string) (api.Rental, error) {
	m.mu.Lock()
	r := m.rentals[id]
	if r == nil || r.OrgID != orgID {
		m.mu.Unlock()
		return api.Rental{}, api.NotFound("No rental %s in this organisation", id)
	}
	m.mu.Unlock()
	m.requestStop(id, m.now(), "stopped through the API", false)
	// A destroy the provider refuses is tried again a few times here, and
	// after that by Run until it is confirmed.
	var err error
	for attempt := range 3 {
		var done bool
		if done, err = m.finishStop(ctx, id); done {
			return m.Get(orgID, id)
		}
		select {
		case <-ctx.Done():
			return api.Rental{}, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 500 * time.Millisecond):
		}
	}
	return api.Rental{}, &api.Error{Kind: api.KindUpstream, Message: fmt.Sprintf(
		"The provider has not confirmed the machine is gone (%v). Billing stopped at your request; the gateway keeps trying to destroy it.", err)}
}

func (m *Manager) downloadGB(id string) float64 {
	if v, ok := variantByID(m.models, id); ok && v.DownloadGB > 0 {
		return v.DownloadGB
	}
	return 1
}

// Models is the rentable model list.
func (m *Manager) Models() []api.RentableModel {
	out := make([]api.RentableModel, len(m.models))
	for i, x := range m.models {
		out[i] = x.RentableModel
	}
	return out
}
