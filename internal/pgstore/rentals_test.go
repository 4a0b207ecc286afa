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

// homeLedger registers replica i and returns its ledger, with the fence
// of a write as the home of an organisation, which it claims.
func homeLedger(t *testing.T, s *pgstore.Store, i int) (*pgstore.Rentals, func(org string) rental.Fence) {
	t.Helper()
	beat(t, s, replica(i), time.Hour, false)
	return s.Rentals(replica(i).ID), func(org string) rental.Fence {
		h := claim(t, s, org, i)
		if h.ReplicaID != replica(i).ID {
			t.Fatalf("replica %d did not get %s's home: %+v", i, org, h)
		}
		return rental.Fence{OrgID: org, Epoch: h.Epoch}
	}
}

func TestRentalsConformance(t *testing.T) {
	storetest.Rentals(t, func(t *testing.T) (rental.Ledger, func(string) rental.Fence) {
		return homeLedger(t, open(t, pg.CreateDB(t)), 1)
	})
}

// A replica whose organisation's home went to another writes nothing more
// of that organisation's rentals; the new home does, and the old one's
// writes for the organisations it still holds go on.
func TestLedgerIsFenced(t *testing.T) {
	url := pg.CreateDB(t)
	a, b := open(t, url), open(t, url)
	ctx := context.Background()
	beat(t, a, replica(1), 300*time.Millisecond, false)
	ledA := a.Rentals(replica(1).ID)
	h1, h2 := claim(t, a, "org1", 1), claim(t, a, "org2", 1)
	fa := rental.Fence{OrgID: "org1", Epoch: h1.Epoch}
	if err := ledA.Save(fa, "r1", []byte(`{"id":"r1","org_id":"org1","status":"provisioning"}`)); err != nil {
		t.Fatal(err)
	}
	// Another replica takes org1 once a's registration has lapsed.
	beat(t, b, replica(2), time.Hour, false)
	var hb pgstore.Home
	eventually(t, "a's registration lapses and b takes org1", func() bool {
		hb = claim(t, b, "org1", 2)
		return hb.ReplicaID == replica(2).ID
	})
	if err := ledA.Save(fa, "r1", []byte(`{"id":"r1","org_id":"org1","status":"running"}`)); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("a save after the home moved: %v", err)
	}
	if err := ledA.Save(fa, "r2", []byte(`{"id":"r2","org_id":"org1","status":"provisioning"}`)); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("a new record after the home moved: %v", err)
	}
	// The new home's replica under the old epoch is refused too.
	if err := b.Rentals(replica(2).ID).Save(rental.Fence{OrgID: "org1", Epoch: h1.Epoch}, "r1", []byte(`{"id":"r1","org_id":"org1"}`)); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("a save under an old epoch: %v", err)
	}
	ledB := b.Rentals(replica(2).ID)
	if err := ledB.Save(rental.Fence{OrgID: "org1", Epoch: hb.Epoch}, "r1", []byte(`{"id":"r1","org_id":"org1","status":"stopping"}`)); err != nil {
		t.Fatal(err)
	}
	// a, back, still holds org2, which nobody took.
	beat(t, a, replica(1), time.Hour, false)
	if err := ledA.Save(rental.Fence{OrgID: "org2", Epoch: h2.Epoch}, "x1", []byte(`{"id":"x1","org_id":"org2","status":"provisioning"}`)); err != nil {
		t.Fatalf("a save for an organisation still homed here: %v", err)
	}
	// A released home writes nothing.
	if _, err := a.ReleaseHome(ctx, "org2", replica(1).ID); err != nil {
		t.Fatal(err)
	}
	if err := ledA.Save(rental.Fence{OrgID: "org2", Epoch: h2.Epoch}, "x1", []byte(`{"id":"x1","org_id":"org2","status":"running"}`)); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("a save after the home was released: %v", err)
	}
	got, err := ledB.Org("org1")
	if err != nil || len(got) != 1 || string(got[0]) != `{"id": "r1", "org_id": "org1", "status": "stopping"}` {
		t.Fatalf("org1's rentals %q, %v", got, err)
	}
}

// started_at, stop_requested_at and stopped_at, once written, neither
// change nor go away; the rest of the record may.
func TestBillingTimestampsAreSetOnce(t *testing.T) {
	led, fence := homeLedger(t, open(t, pg.CreateDB(t)), 1)
	f := fence("org1")
	const (
		t1 = `"2026-03-31T23:05:00.123456Z"`
		t2 = `"2026-03-31T23:35:00Z"`
		t3 = `"2026-03-31T23:36:00Z"`
	)
	rec := func(status string, fields ...string) []byte {
		b := fmt.Appendf(nil, `{"id":"r1","org_id":"org1","status":%q`, status)
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
		err := led.Save(f, "r1", tc.rec)
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
	want := `{"id": "r1", "error": "x", "org_id": "org1", "status": "stopped", "started_at": "2026-03-31T23:05:00.123456Z", "stopped_at": "2026-03-31T23:35:00Z", "stop_requested_at": "2026-03-31T23:35:00Z"}`
	if string(all[0]) != want {
		t.Fatalf("stored %s\nwant %s", all[0], want)
	}
}

// twoStores spreads calls over two stores, as over two replicas.
type twoStores struct {
	s [2]*pgstore.Store
	n atomic.Int32
}

func (t *twoStores) AllowRent(ctx context.Context, keyID string, every time.Duration) (bool, time.Duration, error) {
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
	if ok, wait, err := s.AllowRent(ctx, "k", time.Minute); err == nil || ok {
		t.Fatalf("AllowRent without a database = %v, %v, %v", ok, wait, err)
	}
}
