package rental

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/clock"
	"github.com/svc-dev/svc/internal/money"
)

// memLedger is a ledger in memory that can be reopened.
type memLedger struct {
	mu   sync.Mutex
	recs map[string][]byte
}

func (l *memLedger) Save(_ Fence, id string, b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.recs == nil {
		l.recs = map[string][]byte{}
	}
	l.recs[id] = append([]byte(nil), b...)
	return nil
}

func (l *memLedger) All() ([][]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]byte
	for _, b := range l.recs {
		out = append(out, b)
	}
	return out, nil
}

func (l *memLedger) Org(orgID string) ([][]byte, error) {
	all, _ := l.All()
	return OfOrg(all, orgID)
}

// fakeAccounts is one organisation with settings tests change.
type fakeAccounts struct {
	mu      sync.Mutex
	org     api.Organization
	tokens  map[string]bool // id -> revoked
	created int
	// minting, when set, runs once as CreateWorkerToken starts.
	minting func()
}

func newAccounts() *fakeAccounts {
	return &fakeAccounts{org: api.Organization{ID: "org1", Name: "acme", Plan: api.PlanPro,
		Settings: api.OrgSettings{PaymentCardOnFile: true, CreditBalanceGBP: money.Pounds(100)}}, tokens: map[string]bool{}}
}

func (a *fakeAccounts) OrgByID(id string) (api.Organization, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.org, id == a.org.ID
}

func (a *fakeAccounts) set(fn func(*api.OrgSettings)) {
	a.mu.Lock()
	fn(&a.org.Settings)
	a.mu.Unlock()
}

func (a *fakeAccounts) CreateWorkerToken(org string, req api.CreateWorkerTokenRequest) (api.WorkerToken, error) {
	a.mu.Lock()
	if minting := a.minting; minting != nil {
		a.minting = nil
		a.mu.Unlock()
		minting()
		a.mu.Lock()
	}
	defer a.mu.Unlock()
	a.created++
	id := fmt.Sprintf("tok%d", a.created)
	a.tokens[id] = false
	return api.WorkerToken{ID: id, Name: req.Name, Secret: "svc_w_" + id}, nil
}

func (a *fakeAccounts) RevokeWorkerToken(org, id string) (api.WorkerToken, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tokens[id] = true
	return api.WorkerToken{ID: id}, nil
}

func (a *fakeAccounts) revoked(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tokens[id]
}

// fakeFleet records disconnects and lists the workers tests declare.
type fakeFleet struct {
	mu           sync.Mutex
	workers      []api.Worker
	disconnected []string
}

func (f *fakeFleet) Workers(string) []api.Worker {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.Worker(nil), f.workers...)
}

func (f *fakeFleet) Disconnect(_, workerID, _ string) {
	f.mu.Lock()
	f.disconnected = append(f.disconnected, workerID)
	f.mu.Unlock()
}

// fakeProvider places machines in memory.
type fakeProvider struct {
	name string
	mu   sync.Mutex
	// offers are what Offers returns; capacity[gpu] bounds live machines.
	offers   []Offer
	capacity map[string]int
	insts    map[string]*Instance
	launches []Launch
	// failDestroy fails this many Destroy calls first.
	failDestroy int
	destroyed   []string
	n           int
	// listed, when set, runs after List took its snapshot, before it
	// answers; creating as Create starts, before the machine exists.
	listed, creating func()
}

func newProvider(name string, offers ...Offer) *fakeProvider {
	return &fakeProvider{name: name, offers: offers, capacity: map[string]int{}, insts: map[string]*Instance{}}
}

func (p *fakeProvider) Name() string { return p.name }

func (p *fakeProvider) liveLocked(gpu string) int {
	n := 0
	for _, in := range p.insts {
		if in.State != InstanceTerminated && in.ID[:len(gpu)] == gpu {
			n++
		}
	}
	return n
}

func (p *fakeProvider) Offers(context.Context) ([]Offer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]Offer(nil), p.offers...)
	for i := range out {
		c, ok := p.capacity[out[i].GPUModelID]
		out[i].Available = !ok || p.liveLocked(out[i].GPUModelID) < c
	}
	return out, nil
}

func (p *fakeProvider) Create(_ context.Context, l Launch) (Instance, error) {
	p.mu.Lock()
	if creating := p.creating; creating != nil {
		p.creating = nil
		p.mu.Unlock()
		creating()
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	if c, ok := p.capacity[l.Offer.GPUModelID]; ok && p.liveLocked(l.Offer.GPUModelID) >= c {
		return Instance{}, ErrNoCapacity
	}
	p.n++
	in := &Instance{ID: fmt.Sprintf("%s-%d", l.Offer.GPUModelID, p.n), RentalID: l.RentalID, State: InstancePending,
		BootPhase: api.BootAllocating, Region: l.Offer.Region}
	p.insts[in.ID] = in
	p.launches = append(p.launches, l)
	return *in, nil
}

func (p *fakeProvider) Status(_ context.Context, id string) (Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.insts[id]
	if in == nil {
		return Instance{}, ErrNotFound
	}
	return *in, nil
}

func (p *fakeProvider) Destroy(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failDestroy > 0 {
		p.failDestroy--
		return fmt.Errorf("provider error 500")
	}
	if in := p.insts[id]; in != nil {
		in.State = InstanceTerminated
	}
	p.destroyed = append(p.destroyed, id)
	return nil
}

func (p *fakeProvider) List(context.Context) ([]Instance, error) {
	p.mu.Lock()
	var out []Instance
	for _, in := range p.insts {
		if in.State != InstanceTerminated {
			out = append(out, *in)
		}
	}
	listed := p.listed
	p.mu.Unlock()
	if listed != nil {
		listed()
	}
	return out, nil
}

func (p *fakeProvider) set(id string, fn func(*Instance)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(p.insts[id])
}

// offer is a machine of gpu in tier at price pence an hour.
func offer(gpu, tier string, pence int64, ramGB float64) Offer {
	country, dom := "US", "US"
	switch tier {
	case TierUKSovereign:
		country, dom = "GB", "GB"
	case TierUK:
		country = "GB"
	case TierAdequacy:
		country = "DE"
	}
	return Offer{GPUModelID: gpu, Label: gpu + " label", Vendor: "NVIDIA", Model: gpu, Generation: "Hopper",
		VRAMGB: 80, GPUCount: 1, RAMGB: ramGB, TierID: tier, Region: "r-" + tier, Country: country,
		OperatorEntity: "Op Ltd", OperatorDomicile: dom, PriceMinor: pence, Currency: "GBP", Available: true, Ref: gpu + "-type"}
}

// env is a manager over fakes, in a synctest bubble: a test moves the
// clock with time.Sleep, and steps the wall clock alone with clk.Step.
type env struct {
	clk   *clock.Stepped
	m     *Manager
	acct  *fakeAccounts
	fleet *fakeFleet
	prov  *fakeProvider
	led   *memLedger
}

func newEnv(t *testing.T, offers ...Offer) *env {
	t.Helper()
	// A bubble's clock starts in 2000; the tests start an hour before a
	// month ends.
	time.Sleep(time.Until(time.Date(2026, 3, 31, 23, 0, 0, 0, time.UTC)))
	e := &env{clk: clock.NewStepped(), acct: newAccounts(), fleet: &fakeFleet{},
		prov: newProvider("fake", offers...), led: &memLedger{}}
	e.m = e.open(t)
	return e
}

func (e *env) open(t *testing.T) *Manager {
	t.Helper()
	m, err := New(Config{Providers: []Provider{e.prov}, Ledger: e.led, Accounts: e.acct, Fleet: e.fleet,
		WorkerID: func(org, name string) string { return "wk-" + name }, Gateway: "http://gw",
		Rates: map[string]float64{"USD": 0.8}, ProvisionDeadline: 10 * time.Minute, Clock: e.clk})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// connect delivers the rental's worker's connected event.
func (e *env) connect(r api.Rental) {
	e.m.workerEvent("org1", api.WorkerEvent{WorkerID: r.WorkerID, EventType: api.EventConnected, CreatedAt: e.clk.Now()})
}

// must is v, failing the test's goroutine on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
