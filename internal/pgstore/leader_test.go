package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/pgstore"
)

func replica(i int) pgstore.Replica {
	return pgstore.Replica{ID: fmt.Sprintf("replica-%d", i), AdvertiseURL: fmt.Sprintf("http://gw-%d:8080", i),
		Version: "test", Role: "standby"}
}

func beat(t *testing.T, s *pgstore.Store, me pgstore.Replica, ttl time.Duration, want bool) pgstore.Leader {
	t.Helper()
	l, err := s.Beat(context.Background(), me, ttl, want)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// race has every replica Beat for the lease at once and returns who holds
// it according to each answer.
func race(t *testing.T, stores []*pgstore.Store, skip int, ttl time.Duration) []pgstore.Leader {
	t.Helper()
	ls := make([]pgstore.Leader, len(stores))
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, s := range stores {
		if i == skip {
			continue
		}
		wg.Go(func() {
			<-start
			ls[i], errs[i] = s.Beat(context.Background(), replica(i), ttl, true)
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return ls
}

// winner checks that exactly one of the racers holds the lease, that every
// answer names it, and returns its index.
func winner(t *testing.T, ls []pgstore.Leader, skip int) int {
	t.Helper()
	w := -1
	for i, l := range ls {
		if i == skip {
			continue
		}
		if l.Held(replica(i).ID) {
			if w >= 0 {
				t.Fatalf("replicas %d and %d both hold the lease: %+v", w, i, ls)
			}
			w = i
		}
	}
	if w < 0 {
		t.Fatalf("nobody holds the lease: %+v", ls)
	}
	for i, l := range ls {
		if i != skip && (l.ReplicaID != replica(w).ID || l.Epoch != ls[w].Epoch) {
			t.Fatalf("replica %d was told %+v, the holder is %+v", i, l, ls[w])
		}
	}
	return w
}

// Replicas racing for the lease: exactly one wins each time, the others
// wait for it to expire, and each takeover moves the epoch on by one while
// renewals keep it.
func TestLeaseRace(t *testing.T) {
	url := pg.CreateDB(t)
	stores := []*pgstore.Store{open(t, url), open(t, url), open(t, url)}
	const ttl = 500 * time.Millisecond
	ls := race(t, stores, -1, ttl)
	w := winner(t, ls, -1)
	if ls[w].Epoch != 1 || !ls[w].ExpiresAt.Equal(ls[w].DBNow.Add(ttl)) {
		t.Fatalf("first lease %+v, want epoch 1 for %v", ls[w], ttl)
	}
	epoch := int64(1)
	for round := range 4 {
		// The holder renews: same epoch, later expiry.
		renewed := beat(t, stores[w], replica(w), ttl, true)
		if !renewed.Held(replica(w).ID) || renewed.Epoch != epoch || !renewed.ExpiresAt.After(ls[w].ExpiresAt) {
			t.Fatalf("round %d: renewal %+v after %+v", round, renewed, ls[w])
		}
		// Before it expires nobody else takes it.
		others := race(t, stores, w, ttl)
		for i, l := range others {
			if i != w && (l.Held(replica(i).ID) || l.ReplicaID != replica(w).ID || l.Epoch != epoch) {
				t.Fatalf("round %d: replica %d took a live lease: %+v", round, i, l)
			}
		}
		// The holder stops beating; once the lease expires on the
		// database's clock, exactly one of the others takes it.
		for {
			l := beat(t, stores[w], replica(w), ttl, false)
			if !l.ExpiresAt.After(l.DBNow) {
				break
			}
			time.Sleep(l.ExpiresAt.Sub(l.DBNow))
		}
		ls = race(t, stores, w, ttl)
		prev := w
		w = winner(t, ls, prev)
		epoch++
		if ls[w].Epoch != epoch {
			t.Fatalf("round %d: takeover at epoch %d, want %d", round, ls[w].Epoch, epoch)
		}
	}
}

// A replica that only beats never takes the lease; Replicas lists every
// replica with the leader, and Deregister removes one.
func TestReplicasAndDeregister(t *testing.T) {
	s := open(t, pg.CreateDB(t))
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	me := replica(1)
	me.StartedAt = started
	me.OutboxRecords, me.OutboxOldest = 7, started.Add(time.Minute)
	if l := beat(t, s, me, time.Minute, false); l.ReplicaID != "" || l.Epoch != 0 {
		t.Fatalf("a beat without wanting the lease took it: %+v", l)
	}
	beat(t, s, replica(2), time.Minute, true)
	rs, l, err := s.Replicas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || l.ReplicaID != replica(2).ID || l.AdvertiseURL != replica(2).AdvertiseURL || l.Epoch != 1 {
		t.Fatalf("replicas %+v, leader %+v", rs, l)
	}
	r := rs[0]
	if r.ID != me.ID || r.AdvertiseURL != me.AdvertiseURL || !r.StartedAt.Equal(started) || r.OutboxRecords != 7 ||
		!r.OutboxOldest.Equal(me.OutboxOldest) || !r.ExpiresAt.Equal(r.SeenAt.Add(time.Minute)) {
		t.Fatalf("replica row %+v", r)
	}
	if !rs[1].OutboxOldest.IsZero() || rs[1].StartedAt.IsZero() {
		t.Fatalf("replica row %+v", rs[1])
	}
	if err := s.Deregister(context.Background(), me.ID); err != nil {
		t.Fatal(err)
	}
	if rs, _, _ := s.Replicas(context.Background()); len(rs) != 1 || rs[0].ID != replica(2).ID {
		t.Fatalf("after Deregister: %+v", rs)
	}
}

// A Beat tells of the registration it overwrote when another live
// process wrote it: each of two processes sharing an id sees the other;
// a process taking over from one under the same URL (a handover) sees
// nothing, nor does one whose predecessor's registration expired.
func TestBeatDisplaced(t *testing.T) {
	s := open(t, pg.CreateDB(t))
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a, copied := replica(1), replica(1)
	a.StartedAt = started
	copied.AdvertiseURL, copied.StartedAt = "http://gw-copy:8080", started.Add(time.Hour)
	for i, step := range []struct {
		me   pgstore.Replica
		ttl  time.Duration
		want *pgstore.Replica
	}{
		{a, time.Minute, nil},
		{a, time.Minute, nil},
		{copied, time.Minute, &a},
		{a, time.Minute, &copied},
		{copied, time.Minute, &a},
		{copied, time.Minute, nil},
	} {
		l := beat(t, s, step.me, step.ttl, false)
		got := l.Displaced
		if (got == nil) != (step.want == nil) || got != nil && (got.ID != a.ID || got.AdvertiseURL != step.want.AdvertiseURL ||
			!got.StartedAt.Equal(step.want.StartedAt)) {
			t.Fatalf("beat %d: displaced %+v, want %+v", i, got, step.want)
		}
	}
	handover := copied
	handover.StartedAt = started.Add(2 * time.Hour)
	if l := beat(t, s, handover, time.Millisecond, false); l.Displaced != nil {
		t.Fatalf("a handover displaced %+v", l.Displaced)
	}
	time.Sleep(10 * time.Millisecond)
	if l := beat(t, s, a, time.Minute, false); l.Displaced != nil {
		t.Fatalf("an expired registration was displaced: %+v", l.Displaced)
	}
}

// A Beat tells each live peer's TTL, read from its registration, for a
// replica to notice one configured otherwise; not its own, nor a dead
// peer's.
func TestBeatPeerTTLs(t *testing.T) {
	s := open(t, pg.CreateDB(t))
	a, b, gone := replica(1), replica(2), replica(3)
	beat(t, s, gone, time.Millisecond, false)
	beat(t, s, b, 30*time.Second, false)
	time.Sleep(10 * time.Millisecond)
	l := beat(t, s, a, 10*time.Second, false)
	if len(l.PeerTTLs) != 1 || l.PeerTTLs[b.ID] != 30*time.Second {
		t.Fatalf("peer TTLs %v, want %s: 30s", l.PeerTTLs, b.ID)
	}
	if len(l.PeerRetentions) != 0 {
		t.Fatalf("peer retentions %v of a peer that reports none", l.PeerRetentions)
	}
	b.UsageRetention = 30 * 24 * time.Hour
	beat(t, s, b, 30*time.Second, false)
	if l := beat(t, s, a, 10*time.Second, false); len(l.PeerRetentions) != 1 || l.PeerRetentions[b.ID] != b.UsageRetention {
		t.Fatalf("peer retentions %v, want %s: 720h", l.PeerRetentions, b.ID)
	}
}

// Resigning hands the lease over at once, under a new epoch, even back to
// the replica that resigned.
func TestResign(t *testing.T) {
	url := pg.CreateDB(t)
	a, b := open(t, url), open(t, url)
	la := beat(t, a, replica(1), time.Hour, true)
	if err := b.Resign(context.Background(), replica(2).ID, la.Epoch); err != nil {
		t.Fatal(err)
	}
	if err := a.Resign(context.Background(), replica(1).ID, la.Epoch+1); err != nil {
		t.Fatal(err)
	}
	if l := beat(t, b, replica(2), time.Hour, true); l.ReplicaID != replica(1).ID {
		t.Fatalf("someone else's resignation ended the lease: %+v", l)
	}
	if err := a.Resign(context.Background(), replica(1).ID, la.Epoch); err != nil {
		t.Fatal(err)
	}
	lb := beat(t, b, replica(2), time.Hour, true)
	if !lb.Held(replica(2).ID) || lb.Epoch != la.Epoch+1 {
		t.Fatalf("after resigning: %+v", lb)
	}
	if err := b.Resign(context.Background(), replica(2).ID, lb.Epoch); err != nil {
		t.Fatal(err)
	}
	if l := beat(t, b, replica(2), time.Hour, true); !l.Held(replica(2).ID) || l.Epoch != lb.Epoch+1 {
		t.Fatalf("taken back after resigning: %+v", l)
	}
}

func TestClusterSecretIsMadeOnce(t *testing.T) {
	url := pg.CreateDB(t)
	stores := []*pgstore.Store{open(t, url), open(t, url), open(t, url)}
	secrets := make([]string, 6)
	var wg sync.WaitGroup
	for i := range secrets {
		wg.Go(func() {
			s, err := stores[i%len(stores)].ClusterSecret(context.Background())
			if err != nil {
				t.Error(err)
			}
			secrets[i] = s
		})
	}
	wg.Wait()
	for _, s := range secrets {
		if len(s) < 40 || s != secrets[0] {
			t.Fatalf("secrets %q", secrets)
		}
	}
}
