package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/pgstore"
	"github.com/svc-dev/svc/internal/rental"
	"github.com/svc-dev/svc/internal/store"
	"github.com/svc-dev/svc/internal/store/storetest"
)

// leaderLedger makes replica i the leader and returns its ledger.
func leaderLedger(t *testing.T, s *pgstore.Store, i int) *pgstore.Rentals {
	t.Helper()
	l := beat(t, s, replica(i), time.Hour, true)
	if !l.Held(replica(i).ID) {
		t.Fatalf("replica %d did not get the lease: %+v", i, l)
	}
	return s.Rentals(l.Fence())
}

func TestRentalsConformance(t *testing.T) {
	storetest.Rentals(t, func(t *testing.T) rental.Ledger { return leaderLedger(t, open(t, pg.CreateDB(t)), 1) })
}

// A replica that lost the lease writes nothing more to the ledger; the one
// that took it over does.
func TestLedgerIsFenced(t *testing.T) {
	url := pg.CreateDB(t)
	a, b := open(t, url), open(t, url)
	la := beat(t, a, replica(1), 200*time.Millisecond, true)
	ledA := a.Rentals(la.Fence())
	if err := ledA.Save("r1", []byte(`{"id":"r1","status":"provisioning"}`)); err != nil {
		t.Fatal(err)
	}
	var lb pgstore.Leader
	eventually(t, "the lease expires and b takes it", func() bool {
		lb = beat(t, b, replica(2), time.Hour, true)
		return lb.Held(replica(2).ID)
	})
	err := ledA.Save("r1", []byte(`{"id":"r1","status":"running"}`))
	if !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("a save under a lost lease: %v", err)
	}
	if err := ledA.Save("r2", []byte(`{"id":"r2","status":"provisioning"}`)); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("a new record under a lost lease: %v", err)
	}
	// A stale fence of the new holder's replica id but an old epoch fails too.
	if err := a.Rentals(pgstore.Fence{ReplicaID: replica(2).ID, Epoch: la.Epoch}).Save("r1", []byte(`{"id":"r1"}`)); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("a save under an old epoch: %v", err)
	}
	ledB := b.Rentals(lb.Fence())
	if err := ledB.Save("r1", []byte(`{"id":"r1","status":"stopping"}`)); err != nil {
		t.Fatal(err)
	}
	all, err := ledB.All()
	if err != nil || len(all) != 1 || string(all[0]) != `{"id": "r1", "status": "stopping"}` {
		t.Fatalf("ledger %q, %v", all, err)
	}
}

// started_at, stop_requested_at and stopped_at, once written, neither
// change nor go away; the rest of the record may.
func TestBillingTimestampsAreSetOnce(t *testing.T) {
	led := leaderLedger(t, open(t, pg.CreateDB(t)), 1)
	const (
		t1 = `"2026-03-31T23:05:00.123456Z"`
		t2 = `"2026-03-31T23:35:00Z"`
		t3 = `"2026-03-31T23:36:00Z"`
	)
	rec := func(status string, fields ...string) []byte {
		b := fmt.Appendf(nil, `{"id":"r1","status":%q`, status)
		for i := 0; i < len(fields); i += 2 {
			b = fmt.Appendf(b, `,%q:%s`, fields[i], fields[i+1])
		}
		return append(b, '}')
	}
	for _, tc := range []struct {
		name string
		rec  []byte
		ok   bool
	}{
		{"created", rec("provisioning"), true},
		{"started", rec("running", "started_at", t1), true},
		{"saved again as it was", rec("running", "started_at", t1), true},
		{"start moved", rec("running", "started_at", t2), false},
		{"start dropped", rec("running"), false},
		{"stop asked", rec("stopping", "started_at", t1, "stop_requested_at", t2), true},
		{"stop asked again later", rec("stopping", "started_at", t1, "stop_requested_at", t3), false},
		{"stopped", rec("stopped", "started_at", t1, "stop_requested_at", t2, "stopped_at", t2), true},
		{"a note added", rec("stopped", "started_at", t1, "stop_requested_at", t2, "stopped_at", t2, "error", `"x"`), true},
		{"stop moved", rec("stopped", "started_at", t1, "stop_requested_at", t2, "stopped_at", t3), false},
		{"stop dropped", rec("running", "started_at", t1, "stop_requested_at", t2), false},
	} {
		err := led.Save("r1", tc.rec)
		switch {
		case tc.ok && err != nil:
			t.Fatalf("%s: %v", tc.name, err)
		case !tc.ok && !errors.Is(err, pgstore.ErrSetOnce):
			t.Fatalf("%s: saved (%v), want ErrSetOnce", tc.name, err)
		}
	}
	all, err := led.All()
	if err != nil || len(all) != 1 {
		t.Fatal(all, err)
	}
	want := `{"id": "r1", "error": "x", "status": "stopped", "started_at": "2026-03-31T23:05:00.123456Z", "stopped_at": "2026-03-31T23:35:00Z", "stop_requested_at": "2026-03-31T23:35:00Z"}`
	if string(all[0]) != want {
		t.Fatalf("stored %s\nwant %s", all[0], want)
	}
}

// twoStores spreads calls over two stores, as over two replicas.
type twoStores struct {
	s [2]*pgstore.Store
	n atomic.Int32
}

func (t *twoStores) AllowRent(ctx context.Context, keyID string, every time.Duration) (bool, error) {
	return t.s[t.n.Add(1)%2].AllowRent(ctx, keyID, every)
}

func TestLimiterConformance(t *testing.T) {
	sleep := storetest.LimiterOptions{Window: 300 * time.Millisecond, Advance: time.Sleep}
	t.Run("one store", func(t *testing.T) {
		storetest.Limiter(t, func(t *testing.T) (store.RentLimiter, storetest.LimiterOptions) {
			return open(t, pg.CreateDB(t)), sleep
		})
	})
	t.Run("two stores", func(t *testing.T) {
		storetest.Limiter(t, func(t *testing.T) (store.RentLimiter, storetest.LimiterOptions) {
			url := pg.CreateDB(t)
			return &twoStores{s: [2]*pgstore.Store{open(t, url), open(t, url)}}, sleep
		})
	})
}

// Without the database the limiter says it cannot decide, rather than
// allow.
func TestLimiterErrorWithoutDatabase(t *testing.T) {
	srv := newServer(t)
	url, err := srv.CreateDB(context.Background(), "limits")
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, url)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ok, err := s.AllowRent(ctx, "k", time.Minute); err == nil || ok {
		t.Fatalf("AllowRent without a database = %v, %v", ok, err)
	}
}
