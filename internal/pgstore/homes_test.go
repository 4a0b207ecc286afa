package pgstore_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/pgstore"
)

func claim(t *testing.T, s *pgstore.Store, org string, i int) pgstore.Home {
	t.Helper()
	h, err := s.ClaimHome(context.Background(), org, replica(i).ID)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHomeClaims(t *testing.T) {
	url := pg.CreateDB(t)
	s := open(t, url)
	ctx := context.Background()
	beat(t, s, replica(0), time.Minute, false)
	beat(t, s, replica(1), time.Minute, false)

	cases := []struct {
		name    string
		org     string
		by      int
		want    string
		epoch   int64
		prepare func()
	}{
		{name: "the first claim wins", org: "org-a", by: 0, want: "replica-0", epoch: 1},
		{name: "a live home stays", org: "org-a", by: 1, want: "replica-0", epoch: 1},
		{name: "the home claiming again keeps its epoch", org: "org-a", by: 0, want: "replica-0", epoch: 1},
		{name: "another organisation is free", org: "org-b", by: 1, want: "replica-1", epoch: 1},
		{name: "a dead home's organisation is taken", org: "org-a", by: 1, want: "replica-1", epoch: 2, prepare: func() {
			beat(t, s, replica(0), time.Microsecond, false)
			time.Sleep(5 * time.Millisecond)
		}},
		{name: "a released home is taken", org: "org-b", by: 0, want: "replica-0", epoch: 3, prepare: func() {
			beat(t, s, replica(0), time.Minute, false)
			if n, err := s.ReleaseHomes(ctx, "replica-1"); err != nil || n != 2 {
				t.Fatalf("released %d homes, %v; want 2", n, err)
			}
		}},
	}
	for _, c := range cases {
		if c.prepare != nil {
			c.prepare()
		}
		h := claim(t, s, c.org, c.by)
		if h.ReplicaID != c.want || h.Epoch != c.epoch || !h.Alive || h.AdvertiseURL == "" {
			t.Fatalf("%s: %+v, want %s at epoch %d, alive", c.name, h, c.want, c.epoch)
		}
	}
	hs, err := s.Homes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].OrgID != "org-a" || hs[0].ReplicaID != "" || hs[0].Alive || hs[1].ReplicaID != "replica-0" {
		t.Fatalf("homes %+v; want org-a released and org-b at replica-0", hs)
	}
}

// TestHomeRace has three replicas claim each of many organisations at
// once: every organisation ends with exactly one home, the one every
// claimer was told of.
func TestHomeRace(t *testing.T) {
	url := pg.CreateDB(t)
	stores := []*pgstore.Store{open(t, url), open(t, url), open(t, url)}
	for i, s := range stores {
		beat(t, s, replica(i), time.Minute, false)
	}
	orgs := []string{"o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8"}
	for _, org := range orgs {
		got := make([]pgstore.Home, len(stores))
		errs := make([]error, len(stores))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, s := range stores {
			wg.Go(func() {
				<-start
				got[i], errs[i] = s.ClaimHome(context.Background(), org, replica(i).ID)
			})
		}
		close(start)
		wg.Wait()
		for i := range got {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if got[i].ReplicaID != got[0].ReplicaID || got[i].Epoch != 1 {
				t.Fatalf("%s: claimers were told %+v and %+v", org, got[0], got[i])
			}
		}
	}
}

// A replica's registration carries the peers it could not reach, as it
// last reported them.
func TestUnreachablePeersReported(t *testing.T) {
	s := open(t, pg.CreateDB(t))
	me := replica(0)
	me.UnreachablePeers = []string{"http://gw-1:8080"}
	beat(t, s, me, time.Minute, false)
	beat(t, s, replica(1), time.Minute, false)
	rs, _, err := s.Replicas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || !slices.Equal(rs[0].UnreachablePeers, me.UnreachablePeers) || len(rs[1].UnreachablePeers) != 0 {
		t.Fatalf("replicas %+v", rs)
	}
	me.UnreachablePeers = nil
	beat(t, s, me, time.Minute, false)
	if rs, _, _ = s.Replicas(context.Background()); len(rs[0].UnreachablePeers) != 0 {
		t.Fatalf("a replica that reaches its peers again still reports %v", rs[0].UnreachablePeers)
	}
}

// An organisation whose home_region names a region with a live replica is
// claimed only there; the others are sent there, and its home elsewhere
// is marked misplaced. A stopping replica, and a region with none alive,
// do not hold it back.
func TestHomeRegions(t *testing.T) {
	s := open(t, pg.CreateDB(t))
	ctx := context.Background()
	regional := func(i int, region string) pgstore.Replica {
		r := replica(i)
		r.Region, r.StartedAt = region, time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
		return r
	}
	beat(t, s, regional(0, "us-east"), time.Minute, false)
	beat(t, s, regional(1, "eu-west"), time.Minute, false)
	beat(t, s, regional(2, "eu-west"), time.Minute, false)
	setRegion := func(org, region string) {
		t.Helper()
		o := account.Org{ID: org, Name: org, Plan: api.PlanPro, CreatedAt: time.Now()}
		o.Settings.HomeRegion = region
		if err := s.WriteAccounts(func(w account.Writer) error { return w.PutOrg(o) }); err != nil {
			t.Fatal(err)
		}
	}
	setRegion("org-eu", "eu-west")
	setRegion("org-any", "")
	setRegion("org-ap", "ap-south")

	// replica-1 holds a home already: replica-2, with none, is offered.
	claim(t, s, "org-any", 1)
	if h := claim(t, s, "org-eu", 0); h.ReplicaID != "replica-2" || !h.Alive || h.AdvertiseURL != "http://gw-2:8080" {
		t.Fatalf("us-east's claim of org-eu answered %+v; want replica-2, the eu-west replica with fewest homes", h)
	}
	if hs, _ := s.Homes(ctx); len(hs) != 1 {
		t.Fatalf("homes %+v: org-eu was claimed outside its region", hs)
	}
	if h := claim(t, s, "org-eu", 2); h.ReplicaID != "replica-2" || h.Epoch != 1 {
		t.Fatalf("eu-west's claim of org-eu answered %+v", h)
	}
	if h := claim(t, s, "org-ap", 0); h.ReplicaID != "replica-0" {
		t.Fatalf("org-ap, whose region has no replica, went to %+v; want the claimer", h)
	}

	// org-any, homed in eu-west, asks for us-east: misplaced until given up.
	setRegion("org-any", "us-east")
	home := func(org string) pgstore.Home {
		hs, err := s.Homes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.OrgID == org {
				return h
			}
		}
		return pgstore.Home{}
	}
	if h := home("org-any"); !h.Misplaced || home("org-eu").Misplaced || home("org-ap").Misplaced {
		t.Fatalf("org-any %+v, org-eu %+v, org-ap %+v; want only org-any misplaced", h, home("org-eu"), home("org-ap"))
	}
	if ok, err := s.ReleaseHome(ctx, "org-any", "replica-2"); err != nil || ok {
		t.Fatalf("a replica that is not the home released it: %v %v", ok, err)
	}
	if ok, err := s.ReleaseHome(ctx, "org-any", "replica-1"); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if h := claim(t, s, "org-any", 1); h.ReplicaID != "replica-0" || home("org-any").ReplicaID != "" {
		t.Fatalf("eu-west's claim of org-any answered %+v; want replica-0, unclaimed", h)
	}

	// Stopping, replica-0 no longer holds org-any back from the others;
	// started again under its id, it does.
	if _, err := s.ReleaseHomes(ctx, "replica-0"); err != nil {
		t.Fatal(err)
	}
	beat(t, s, regional(0, "us-east"), time.Minute, false)
	if h := claim(t, s, "org-any", 1); h.ReplicaID != "replica-1" {
		t.Fatalf("with us-east's one replica stopping, org-any went to %+v; want its claimer", h)
	}
	if rs, _, _ := s.Replicas(ctx); !rs[0].Stopping || rs[0].Region != "us-east" || rs[1].Stopping {
		t.Fatalf("replicas %+v", rs)
	}
	again := regional(0, "us-east")
	again.StartedAt = again.StartedAt.Add(time.Hour)
	beat(t, s, again, time.Minute, false)
	if rs, _, _ := s.Replicas(ctx); rs[0].Stopping {
		t.Fatal("a replica started again is still stopping")
	}
	if h := home("org-any"); !h.Misplaced {
		t.Fatalf("org-any %+v at replica-1 with us-east served again; want misplaced", h)
	}
}
