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
	// Save writes a rental's record under f.
	Save(f Fence, id string, record []byte) error
	// All returns every rental's record.
	All() ([][]byte, error)
	// Org returns the records of one organisation's rentals.
	Org(orgID string) ([][]byte, error)
}

// Fence is what a write to the ledger is made under: the rental's
// organisation and, in a cluster, the epoch of the organisation's home
// that writes it (0 on one gateway, which has no homes). A cluster's
// ledger refuses a write once the organisation's home has moved on: the
// replica that holds it now runs its rentals.
type Fence struct {
	OrgID string
	Epoch int64
}

// Homes says which organisations' rentals a manager runs: in a cluster,
// those of the organisations its replica is the home of.
type Homes interface {
	// Mine lists the organisations this replica is the home of, each
	// with its home's epoch.
	Mine() map[string]int64
	// Epoch is orgID's home epoch when this replica is its home.
	Epoch(orgID string) (int64, bool)
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
	// Homes, when set, limits the manager to the organisations whose home
	// its replica is (a cluster's replica): it loads an organisation's
	// rentals from the ledger when it becomes the home, drops them when it
	// no longer is, and leaves the machines of other organisations'
	// rentals alone. Nil: every organisation's (one gateway).
	Homes Homes
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

	// renting is a lock, taken by a send and given back by a receive,
	// that holds a rent's checks (credit, budget, name) and the creation
	// of its record together, so that of two rents at once the second is
	// checked with the first counted. A rental's requests all reach its
	// organisation's home, so one manager's lock is enough. A channel, so
	// that a caller who gives up stops waiting; never taken under mu, and
	// not held while a provider places the machine.
	renting chan struct{}

	mu      sync.Mutex
	rentals map[string]*record
	// epochs holds, with Config.Homes, the organisations whose rentals
	// are loaded and the home epoch they were loaded at.
	epochs map[string]int64
	dl     map[string]downloads // by rental id
	offers map[string]offerCache
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
		placing: map[string]bool{}, epochs: map[string]int64{},
		dl: map[string]downloads{}, offers: map[string]offerCache{},
		events: make(chan workerEvent, 1024), renting: make(chan struct{}, 1)}
	m.mem = NewMemoryLimiter(m.now)
	if cfg.Homes != nil {
		// Each organisation's rentals are loaded as its home comes here.
		return m, nil
	}
	raws, err := cfg.Ledger.All()
	if err != nil {
		return nil, err
	}
	recs, err := decodeRecords(raws)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		m.rentals[r.ID] = r
		m.mem.seen(r.KeyID, r.CreatedAt)
	}
	return m, nil
}

func decodeRecords(raws [][]byte) ([]*record, error) {
	out := make([]*record, 0, len(raws))
	for _, raw := range raws {
		r := new(record)
		if err := json.Unmarshal(raw, r); err != nil {
			return nil, fmt.Errorf("decode rental: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// notHomeRetry is the Retry-After of a rental request that reached a
// replica as the organisation's home left it: the next home is known
// within seconds.
const notHomeRetry = 2 * time.Second

// own makes sure the manager holds orgID's rentals as the ledger has them
// at its home's epoch: loaded afresh when the home came here, or came
// back, since another replica may have run them meanwhile. An error when
// this replica is not the organisation's home, or cannot read the ledger.
func (m *Manager) own(orgID string) error {
	if m.cfg.Homes == nil {
		return nil
	}
	epoch, ok := m.cfg.Homes.Epoch(orgID)
	if !ok {
		return &api.Error{Kind: api.KindUnavailable, RetryAfter: notHomeRetry,
			Message: "This gateway replica no longer runs the organisation's rentals; its new home does. Retry"}
	}
	m.mu.Lock()
	have, loaded := m.epochs[orgID]
	m.mu.Unlock()
	if loaded && have == epoch {
		return nil
	}
	return m.load(orgID, epoch)
}

// load replaces what the manager holds of orgID's rentals with the
// ledger's, as the home at epoch.
func (m *Manager) load(orgID string, epoch int64) error {
	raws, err := m.cfg.Ledger.Org(orgID)
	if err != nil {
		return fmt.Errorf("read the organisation's rentals: %w", err)
	}
	recs, err := decodeRecords(raws)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if have, ok := m.epochs[orgID]; ok && have >= epoch {
		return nil // loaded meanwhile
	}
	m.dropLocked(orgID)
	for _, r := range recs {
		if r.OrgID == orgID {
			m.rentals[r.ID] = r
		}
	}
	m.epochs[orgID] = epoch
	level := slog.LevelDebug
	if len(recs) > 0 {
		level = slog.LevelInfo
	}
	m.log.Log(context.Background(), level, "rental: running the organisation's rentals here", "org", orgID, "epoch", epoch, "rentals", len(recs))
	return nil
}

// dropLocked forgets orgID's rentals: another replica runs them now.
func (m *Manager) dropLocked(orgID string) {
	for id, r := range m.rentals {
		if r.OrgID == orgID {
			delete(m.rentals, id)
			delete(m.dl, id)
		}
	}
	delete(m.epochs, orgID)
}

// follow brings the organisations the manager runs in line with the
// replica's homes, and reconciles those it has just taken on with their
// providers: their previous home may have died while placing a machine.
func (m *Manager) follow(ctx context.Context) {
	if m.cfg.Homes == nil {
		return
	}
	mine := m.cfg.Homes.Mine()
	var todo []string
	m.mu.Lock()
	for org := range m.epochs {
		if _, ok := mine[org]; !ok {
			m.dropLocked(org)
			m.log.Debug("rental: the organisation's rentals are another replica's to run now", "org", org)
		}
	}
	for org, e := range mine {
		if have, ok := m.epochs[org]; !ok || have != e {
			todo = append(todo, org)
		}
	}
	m.mu.Unlock()
	taken := map[string]bool{}
	for _, org := range todo {
		if err := m.load(org, mine[org]); err != nil {
			m.log.Warn("rental: load an organisation's rentals; will retry", "org", org, "err", err)
			continue
		}
		taken[org] = true
	}
	if m.anyActive(taken) {
		m.reconcile(ctx, taken)
	}
}

// anyActive is whether one of orgs has a rental that runs.
func (m *Manager) anyActive(orgs map[string]bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.rentals {
		if orgs[r.OrgID] && r.active() {
			return true
		}
	}
	return false
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
	return m.cfg.Ledger.Save(Fence{OrgID: r.OrgID, Epoch: m.epochs[r.OrgID]}, r.ID, b)
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
	if err := m.own(orgID); err != nil {
		// A replica that is not the home links no worker of the
		// organisation; the ledger answers for one that asks all the same.
		return checkWorkerIn(m.cfg.Ledger, orgID, tokenID, name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.rentals {
		if err := r.admits(orgID, tokenID, name); err != nil {
			return err
		}
	}
	return nil
}

// checkWorkerIn is CheckWorker against the rentals the ledger holds.
func checkWorkerIn(l Ledger, orgID, tokenID, name string) error {
	raws, err := l.Org(orgID)
	if err != nil {
		return fmt.Errorf("read the rentals: %w", err)
	}
	recs, err := decodeRecords(raws)
	if err != nil {
		return err
	}
	for _, r := range recs {
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
	if m.cfg.Homes == nil {
		m.reconcile(ctx, nil)
	}
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
			m.reconcile(ctx, nil)
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
		was := *r
		r.StartedAt = &at
		r.Status = api.RentalRunning
		r.BootPhase = api.BootWorkerConnected
		if len(r.Models) == 0 {
			r.BootPhase = api.BootReady
		}
		r.note(at, "worker_connected", "the worker connected; billing starts")
		if err := m.saveLocked(r); err != nil {
			// Billing starts once the ledger says so; the next tick finds
			// the worker connected and tries again.
			*r = was
			m.log.Error("rental: record the worker's connection", "rental", r.ID, "err", err)
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
	m.follow(ctx)
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
	for id := range lastPoll {
		if m.rentals[id] == nil {
			delete(lastPoll, id) // another replica runs it now
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
			if m.requestStop(j.r.ID, now, fmt.Sprintf("the worker did not connect within %s of the request", m.cfg.ProvisionDeadline), true) == nil {
				m.finishStop(ctx, j.r.ID)
			}
		case "runtime":
			// Billing ends at the maximum runtime itself, not at the tick
			// that noticed it.
			// Not a failure, but a stop no client asked for: its reason
			// goes in error, where a client polling the rental looks.
			if m.requestStop(j.r.ID, m.runtimeEnd(&j.r, now), "reached the organisation's maximum runtime", true) == nil {
				m.finishStop(ctx, j.r.ID)
			}
		case "poll":
			m.poll(ctx, j.r)
		}
	}
}

func (m *Manager) overRuntimeLocked(r *record, now time.Time) bool {
	return !m.runtimeEnd(r, now).After(now)
}

// runtimeEnd is when a running rental reaches its organisation's maximum
// runtime; after now when there is none. A limit set when the rental was
// past it already ends it as it was set: a stop is never dated before
// the limit existed, nor a bill cut back to it.
func (m *Manager) runtimeEnd(r *record, now time.Time) time.Time {
	o, ok := m.cfg.Accounts.OrgByID(r.OrgID)
	if !ok || o.Settings.MaxRuntimeSeconds == nil || r.StartedAt == nil {
		return now.Add(time.Hour)
	}
	end := r.StartedAt.Add(time.Duration(*o.Settings.MaxRuntimeSeconds) * time.Second)
	if since := o.Settings.MaxRuntimeSince; since != nil && since.After(end) {
		end = *since
	}
	return end
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
		if m.requestStop(r.ID, m.goneAt(&r, now), why, true) == nil {
			m.finishStop(ctx, r.ID)
		}
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

// goneAt is when a running rental whose machine a poll found gone was
// lost: when its worker's link dropped, if it is offline since a moment
// after it started, or its link is down and waits out its grace, for the
// machine went with it and a poll comes up to 30 s later; else now.
func (m *Manager) goneAt(r *record, now time.Time) time.Time {
	if r.StartedAt == nil {
		return now
	}
	for _, w := range m.cfg.Fleet.Workers(r.OrgID) {
		if w.WorkerID != r.WorkerID {
			continue
		}
		down := w.LinkDownSince
		if w.Status == api.StatusOffline {
			down = w.OfflineSince
		}
		if down != nil && down.After(*r.StartedAt) && down.Before(now) {
			return *down
		}
	}
	return now
}

// requestStop records that rental id is to stop at at, for why; billing
// ends there. own marks a stop the gateway made on its own, whose reason
// is the rental's error; a stop a client asked for has none. The stop is acted on
// only once the ledger has it: a record that could not be written (the
// disk, the database, or in a cluster a home that has moved on) is left
// as it was, and the stop is asked for again later.
func (m *Manager) requestStop(id string, at time.Time, why string, own bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rentals[id]
	if r == nil || !r.active() || r.StopRequestedAt != nil {
		return nil
	}
	was := *r
	r.StopRequestedAt = &at
	r.StopReason = why
	if own {
		r.Error = why
	}
	r.note(at, "stop_requested", why)
	if err := m.saveLocked(r); err != nil {
		*r = was
		m.log.Error("rental: record a stop; not acted on", "rental", r.ID, "reason", why, "err", err)
		return err
	}
	m.log.Info("rental stopping", "rental", id, "reason", why)
	return nil
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
	if r.StopRequestedAt == nil {
		m.mu.Unlock()
		return false, errors.New("the stop is not recorded yet")
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
	// Disconnected first, so that its events say why: a revoked token's
	// links are cut too, for the token's sake.
	m.cfg.Fleet.Disconnect(snap.OrgID, snap.WorkerID, "its rental stopped")
	if org, ok := m.cfg.Accounts.OrgByID(snap.OrgID); ok && snap.TokenID != "" {
		if _, err := m.cfg.Accounts.RevokeWorkerToken(org.Name, snap.TokenID); err != nil {
			m.log.Warn("rental: revoke token", "rental", id, "err", err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r = m.rentals[id]
	if r == nil || !r.active() {
		return true, nil
	}
	at := *r.StopRequestedAt
	r.StoppedAt = &at
	r.Status = api.RentalStopped
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
// adopts its machine or fails. With Config.Homes it judges only the
// rentals of the organisations it runs (of only, when not nil) and their
// machines: a machine of a rental it does not hold may be another
// replica's, and the cluster's leader sweeps those that nobody's are
// (Sweep).
func (m *Manager) reconcile(ctx context.Context, only map[string]bool) {
	mine := func(r *record) bool { return only == nil || only[r.OrgID] }
	for _, p := range m.cfg.Providers {
		// Only a rental placed before the listing began can be missing
		// from it: one placed while the provider answered is not gone.
		m.mu.Lock()
		placed := map[string]string{}
		for _, r := range m.rentals {
			if r.active() && r.Provider == p.Name() && mine(r) {
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
			if m.cfg.Homes != nil && (r == nil || !mine(r)) {
				m.mu.Unlock()
				continue
			}
			keep := r.accountsFor(p.Name(), inst)
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
			if m.requestStop(id, now, "the machine was gone when the gateway started", true) == nil {
				m.finishStop(ctx, id)
			}
		}
	}
}

// Sweep destroys the machines at the providers that no running rental in
// the ledger accounts for: a cluster's leader runs it, since each home
// reconciles only its own organisations' rentals. The providers are
// listed before the ledger is read: a rental is committed before any
// provider is asked for its machine, so every machine listed has its
// record by the time the ledger is read, whichever replica placed it.
func Sweep(ctx context.Context, providers []Provider, l Ledger, log *slog.Logger) {
	for _, p := range providers {
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		insts, err := p.List(lctx)
		cancel()
		if err != nil {
			log.Error("rental: cannot list machines to sweep", "provider", p.Name(), "err", err)
			continue
		}
		if len(insts) == 0 {
			continue
		}
		raws, err := l.All()
		if err != nil {
			log.Error("rental: cannot read the ledger to sweep", "err", err)
			return
		}
		recs, err := decodeRecords(raws)
		if err != nil {
			log.Error("rental: cannot read the ledger to sweep", "err", err)
			return
		}
		byID := make(map[string]*record, len(recs))
		for _, r := range recs {
			byID[r.ID] = r
		}
		for _, inst := range insts {
			if byID[inst.RentalID].accountsFor(p.Name(), inst) {
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err := p.Destroy(dctx, inst.ID)
			cancel()
			log.Warn("rental: destroyed a machine no running rental accounts for", "provider", p.Name(),
				"instance", inst.ID, "rental", inst.RentalID, "err", err)
		}
	}
}

// List returns an organisation's rentals, newest first.
func (m *Manager) List(orgID string) ([]api.Rental, error) {
	if err := m.own(orgID); err != nil {
		return nil, err
	}
	now := m.now()
	serving := m.serving(orgID)
	m.mu.Lock()
	defer m.mu.Unlock()
	var rs []*record
	for _, r := range m.rentals {
		if r.OrgID == orgID && !r.Refused {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *record) int { return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(a.ID, b.ID)) })
	out := make([]api.Rental, len(rs))
	for i, r := range rs {
		out[i] = r.view(now, m.dl[r.ID], m.downloadGB)
		out[i].Serving = new(r.active() && serving[r.WorkerID])
	}
	return out, nil
}

// serving tells, by worker id, the organisation's workers that are
// connected and healthy now; it is read outside the manager's lock, which
// is not held while waiting on the fleet's.
func (m *Manager) serving(orgID string) map[string]bool {
	out := map[string]bool{}
	for _, w := range m.cfg.Fleet.Workers(orgID) {
		// A worker that awaits the organisation's approval is routed
		// nothing, however healthy.
		out[w.WorkerID] = w.Status == api.StatusHealthy && !w.ApprovalPending
	}
	return out
}

// Get returns one rental of the organisation.
func (m *Manager) Get(orgID, id string) (api.Rental, error) {
	if err := m.own(orgID); err != nil {
		return api.Rental{}, err
	}
	serving := m.serving(orgID)
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rentals[id]
	if r == nil || r.OrgID != orgID || r.Refused {
		return api.Rental{}, api.NotFound("No rental %s in this organisation", id)
	}
	v := r.view(m.now(), m.dl[r.ID], m.downloadGB)
	v.Serving = new(r.active() && serving[r.WorkerID])
	return v, nil
}

// Audit returns a rental's placement record: 404 until it is placed.
func (m *Manager) Audit(orgID, id string) (api.Placement, error) {
	if err := m.own(orgID); err != nil {
		return api.Placement{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rentals[id]
	if r == nil || r.OrgID != orgID || r.Refused {
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
	if err := m.own(orgID); err != nil {
		return api.Rental{}, err
	}
	m.mu.Lock()
	r := m.rentals[id]
	if r == nil || r.OrgID != orgID || r.Refused {
		m.mu.Unlock()
		return api.Rental{}, api.NotFound("No rental %s in this organisation", id)
	}
	m.mu.Unlock()
	if err := m.requestStop(id, m.now(), "stopped through the API", false); err != nil {
		return api.Rental{}, fmt.Errorf("record the stop: %w", err)
	}
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
