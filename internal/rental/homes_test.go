package rental

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// homeTable is the database's homes as the replicas of a test share
// them: each organisation's home replica and its epoch.
type homeTable struct {
	mu    sync.Mutex
	homes map[string]homeRow
}

type homeRow struct {
	replica string
	epoch   int64
}

func (h *homeTable) claim(org, replica string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.homes == nil {
		h.homes = map[string]homeRow{}
	}
	h.homes[org] = homeRow{replica, h.homes[org].epoch + 1}
}

// replicaHomes is one replica's view of the table (Homes).
type replicaHomes struct {
	t  *homeTable
	me string
}

func (r replicaHomes) Mine() map[string]int64 {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	out := map[string]int64{}
	for org, x := range r.t.homes {
		if x.replica == r.me {
			out[org] = x.epoch
		}
	}
	return out
}

func (r replicaHomes) Epoch(org string) (int64, bool) {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	x, ok := r.t.homes[org]
	return x.epoch, ok && x.replica == r.me
}

// fencedLedger is one replica's ledger over the shared records, refusing
// a write as a home the table no longer names, as the database does.
type fencedLedger struct {
	*memLedger
	homes replicaHomes
}

var errFenced = errors.New("fenced")

func (l fencedLedger) Save(f Fence, id string, b []byte) error {
	if e, ok := l.homes.Epoch(f.OrgID); !ok || e != f.Epoch {
		return fmt.Errorf("save %s as %s at epoch %d: %w", id, l.homes.me, f.Epoch, errFenced)
	}
	return l.memLedger.Save(f, id, b)
}

// replicaManager is replica me's manager in e's surroundings, sharing its
// ledger and provider.
func (e *env) replicaManager(t *testing.T, table *homeTable, me string) *Manager {
	t.Helper()
	return e.replicaManagerSeeing(t, table, me, replicaHomes{table, me})
}

// replicaManagerSeeing is replica me's manager seeing the homes as view
// says, which may be stale: the ledger fences by the table.
func (e *env) replicaManagerSeeing(t *testing.T, table *homeTable, me string, view Homes) *Manager {
	t.Helper()
	m, err := New(Config{Providers: []Provider{e.prov}, Ledger: fencedLedger{e.led, replicaHomes{table, me}}, Homes: view,
		Accounts: e.acct, Fleet: e.fleet, WorkerID: func(org, name string) string { return "wk-" + name },
		Gateway: "http://gw", ProvisionDeadline: 10 * time.Minute, Clock: e.clk})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// An organisation's rentals run at its home. Another replica answers
// none of its rental calls; when the home moves there, the new home
// loads them from the ledger and runs them on, billed from when they
// started, while the old home drops them and can write nothing more of
// them. Reconciling, a home leaves alone the machines of rentals it does
// not run.
func TestRentalsFollowTheHome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		ctx := context.Background()
		table := &homeTable{}
		a, b := e.replicaManager(t, table, "a"), e.replicaManager(t, table, "b")
		table.claim("org1", "a")
		table.claim("org2", "b")

		r, err := a.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		if err != nil {
			t.Fatal(err)
		}
		a.workerEvent("org1", api.WorkerEvent{WorkerID: r.WorkerID, EventType: api.EventConnected, CreatedAt: e.clk.Now()})
		if _, err := b.List("org1"); status(err) != 503 {
			t.Fatalf("org1's rentals at a replica that is not its home: %v", err)
		}
		// org2, homed at b, has a machine b runs: a leaves it alone.
		e.prov.insts["h100-other"] = &Instance{ID: "h100-other", RentalID: "not-a-rental-of-a", State: InstanceRunning}
		a.reconcile(ctx, nil)
		if len(e.prov.destroyed) != 0 {
			t.Fatalf("a home destroyed %v, machines of rentals it does not run", e.prov.destroyed)
		}
		time.Sleep(10 * time.Minute)
		before := must(a.Get("org1", r.ID))

		// a's registration lapses and b takes org1.
		table.claim("org1", "b")
		if _, err := a.Stop(ctx, "org1", r.ID); status(err) != 503 {
			t.Fatalf("a stop at the old home: %v", err)
		}
		a.mu.Lock()
		stale := a.rentals[r.ID]
		if stale != nil {
			stale.note(e.clk.Now(), "x", "a write as the old home")
			if err := a.saveLocked(stale); !errors.Is(err, errFenced) {
				t.Errorf("the old home's write: %v", err)
			}
		}
		a.mu.Unlock()
		a.tick(ctx, map[string]time.Time{})
		a.mu.Lock()
		held := len(a.rentals)
		a.mu.Unlock()
		if held != 0 {
			t.Fatalf("the old home still holds %d rentals", held)
		}
		b.tick(ctx, map[string]time.Time{})
		after := must(b.Get("org1", r.ID))
		if after.Status != api.RentalRunning || !after.StartedAt.Equal(*before.StartedAt) || after.SecondsBilled != 600 {
			t.Fatalf("at the new home: %+v, was %+v", after, before)
		}
		if slices.Contains(e.prov.destroyed, before.ID) || len(e.prov.destroyed) != 0 {
			t.Fatalf("taking the home over destroyed %v", e.prov.destroyed)
		}
		time.Sleep(5 * time.Minute)
		stopped, err := b.Stop(ctx, "org1", r.ID)
		if err != nil || stopped.Status != api.RentalStopped || stopped.SecondsBilled != 900 {
			t.Fatalf("stopped at the new home: %+v, %v", stopped, err)
		}
		if len(e.prov.destroyed) != 1 {
			t.Fatalf("destroyed %v, want the rental's machine", e.prov.destroyed)
		}
		// The ledger holds what the new home wrote, not the old one's note.
		recs, _ := e.led.Org("org1")
		got, _ := decodeRecords(recs)
		if len(got) != 1 || got[0].Status != api.RentalStopped || slices.ContainsFunc(got[0].Notes, func(n api.RentalNote) bool { return n.Type == "x" }) {
			t.Fatalf("the ledger holds %+v", got)
		}
	})
}

// staleHomes is the view of a replica cut off from the database: it still
// believes itself the home of what it was.
type staleHomes map[string]int64

func (h staleHomes) Mine() map[string]int64 { return h }
func (h staleHomes) Epoch(org string) (int64, bool) {
	e, ok := h[org]
	return e, ok
}

// A home replaced while it was cut off from the database acts on nothing
// its stale view would have it do: a stop it cannot record (its writes
// fenced) destroys no machine, and the rental runs on at the new home.
func TestReplacedHomeDestroysNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		ctx := context.Background()
		table := &homeTable{}
		table.claim("org1", "a")
		a := e.replicaManagerSeeing(t, table, "a", staleHomes{"org1": 1})
		r, err := a.Rent(ctx, owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK})
		if err != nil {
			t.Fatal(err)
		}
		// b takes org1 over, and its worker connects there.
		table.claim("org1", "b")
		b := e.replicaManager(t, table, "b")
		b.tick(ctx, map[string]time.Time{})
		b.workerEvent("org1", api.WorkerEvent{WorkerID: r.WorkerID, EventType: api.EventConnected, CreatedAt: e.clk.Now()})
		// Past the provisioning deadline a believes the worker never came.
		time.Sleep(11 * time.Minute)
		a.tick(ctx, map[string]time.Time{})
		if len(e.prov.destroyed) != 0 {
			t.Fatalf("the replaced home destroyed %v", e.prov.destroyed)
		}
		if got := must(b.Get("org1", r.ID)); got.Status != api.RentalRunning || got.SecondsBilled != 660 {
			t.Fatalf("at the new home: %+v", got)
		}
		if _, err := a.Stop(ctx, "org1", r.ID); err == nil || len(e.prov.destroyed) != 0 {
			t.Fatalf("a stop at the replaced home: %v, destroyed %v", err, e.prov.destroyed)
		}
	})
}

// A worker of an organisation homed here is checked against the rentals
// loaded here; one that asks elsewhere is checked against the ledger.
func TestCheckWorkerAtTheHome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, offer("h100", TierUK, 250, 64))
		table := &homeTable{}
		a, b := e.replicaManager(t, table, "a"), e.replicaManager(t, table, "b")
		table.claim("org1", "a")
		r, err := a.Rent(context.Background(), owner, api.RentRequest{GPUModelID: "h100", TierID: TierUK, Name: "box"})
		if err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		tok := a.rentals[r.ID].TokenID
		a.mu.Unlock()
		for _, m := range []*Manager{a, b} {
			if err := m.CheckWorker("org1", tok, "box"); err != nil {
				t.Fatalf("the rental's worker: %v", err)
			}
			if err := m.CheckWorker("org1", tok, "other"); err == nil {
				t.Fatalf("the rental's token under another name was let in")
			}
			if err := m.CheckWorker("org1", "tok-own", r.Name); err == nil {
				t.Fatalf("another token under the rental's name was let in")
			}
		}
	})
}

// The leader's sweep destroys the machines no running rental accounts
// for, whichever replica's they were: orphans, and a stopped rental's
// machine still listed. A running rental's machine, and one whose rental
// is still being placed, stay.
func TestSweep(t *testing.T) {
	prov := newProvider("fake", offer("h100", TierUK, 250, 64))
	led := &memLedger{}
	save := func(r record) {
		b := fmt.Appendf(nil, `{"id":%q,"org_id":"org1","status":%q,"provider":"fake","instance_id":%q}`, r.ID, r.Status, r.InstanceID)
		if err := led.Save(Fence{OrgID: "org1"}, r.ID, b); err != nil {
			t.Fatal(err)
		}
	}
	save(record{ID: "running", Status: api.RentalRunning, InstanceID: "h100-1"})
	save(record{ID: "placing", Status: api.RentalProvisioning})
	save(record{ID: "stopped", Status: api.RentalStopped, InstanceID: "h100-3"})
	save(record{ID: "moved", Status: api.RentalRunning, InstanceID: "h100-5"})
	for id, rental := range map[string]string{"h100-1": "running", "h100-2": "placing", "h100-3": "stopped", "h100-4": "unknown", "h100-6": "moved"} {
		prov.insts[id] = &Instance{ID: id, RentalID: rental, State: InstanceRunning}
	}
	Sweep(context.Background(), []Provider{prov}, led, slog.New(slog.DiscardHandler))
	slices.Sort(prov.destroyed)
	if want := []string{"h100-3", "h100-4", "h100-6"}; !slices.Equal(prov.destroyed, want) {
		t.Fatalf("swept %v, want %v", prov.destroyed, want)
	}
}
