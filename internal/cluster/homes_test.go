package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// memHomes is the database's homes in memory: a replica is alive unless
// marked dead.
type memHomes struct {
	mu     sync.Mutex
	homes  map[string]Home
	dead   map[string]bool
	claims atomic.Int64
	down   bool
	// region is each replica's, prefers each organisation's home_region.
	region, prefers map[string]string
}

func newMemHomes() *memHomes {
	return &memHomes{homes: map[string]Home{}, dead: map[string]bool{}, region: map[string]string{}, prefers: map[string]string{}}
}

func (m *memHomes) view(h Home) Home {
	h.Alive = h.ReplicaID != "" && !m.dead[h.ReplicaID]
	if h.ReplicaID != "" {
		h.AdvertiseURL = "http://" + h.ReplicaID
	}
	want := m.prefers[h.OrgID]
	h.Misplaced = h.ReplicaID != "" && want != "" && want != m.region[h.ReplicaID] && m.servedIn(want) != ""
	return h
}

// servedIn is a live replica of region r, "" when none.
func (m *memHomes) servedIn(r string) string {
	for id, at := range m.region {
		if at == r && !m.dead[id] {
			return id
		}
	}
	return ""
}

func (m *memHomes) ClaimHome(_ context.Context, org, me string) (Home, error) {
	m.claims.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return Home{}, errors.New("database down")
	}
	h, ok := m.homes[org]
	live := ok && h.ReplicaID != "" && !m.dead[h.ReplicaID]
	if want := m.prefers[org]; !live && want != "" && want != m.region[me] && m.servedIn(want) != "" {
		h.OrgID, h.ReplicaID = org, m.servedIn(want)
		return m.view(h), nil
	}
	switch {
	case !ok:
		h = Home{OrgID: org, ReplicaID: me, Epoch: 1}
	case h.ReplicaID != me && (h.ReplicaID == "" || m.dead[h.ReplicaID]):
		h.ReplicaID, h.Epoch = me, h.Epoch+1
	}
	m.homes[org] = h
	return m.view(h), nil
}

func (m *memHomes) Homes(context.Context) ([]Home, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, errors.New("database down")
	}
	var out []Home
	for _, h := range m.homes {
		out = append(out, m.view(h))
	}
	return out, nil
}

func (m *memHomes) ReleaseHomes(_ context.Context, me string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := int64(0)
	for org, h := range m.homes {
		if h.ReplicaID == me {
			h.ReplicaID, h.Epoch = "", h.Epoch+1
			m.homes[org] = h
			n++
		}
	}
	return n, nil
}

func (m *memHomes) ReleaseHome(_ context.Context, org, me string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.homes[org]
	if !ok || h.ReplicaID != me {
		return false, nil
	}
	h.ReplicaID, h.Epoch = "", h.Epoch+1
	m.homes[org] = h
	return true, nil
}

// An organisation's home_region sends it to a replica of that region
// while one lives: a claim elsewhere names that replica instead, and a
// home elsewhere gives the organisation up.
func TestHomesRegion(t *testing.T) {
	ctx := context.Background()
	db := newMemHomes()
	db.region["us"], db.region["eu"] = "us-east", "eu-west"
	var moved []string
	us := NewHomes(db, "us", HomesOptions{Moved: func(org string) { moved = append(moved, org) }})
	eu := NewHomes(db, "eu", HomesOptions{})

	db.prefers["x"] = "eu-west"
	if got, err := us.Where(ctx, "x"); err != nil || got.ReplicaID != "eu" || got.AdvertiseURL != "http://eu" {
		t.Fatalf("us sees x at %+v, %v; want eu, unclaimed", got, err)
	}
	if db.homes["x"].ReplicaID != "" {
		t.Fatalf("x was claimed by %s before reaching its region", db.homes["x"].ReplicaID)
	}
	if got, _ := eu.Where(ctx, "x"); got.ReplicaID != "eu" || db.homes["x"].ReplicaID != "eu" {
		t.Fatalf("eu did not claim x: %+v", got)
	}

	// A region without a live replica is only a preference.
	db.prefers["z"] = "ap-south"
	if got, _ := us.Where(ctx, "z"); got.ReplicaID != "us" {
		t.Fatalf("z at %s; want us, as no replica runs in its region", got.ReplicaID)
	}

	// y is homed in us, then asks for eu-west: us gives it up at its next
	// reading of the homes, once.
	if got, _ := us.Where(ctx, "y"); got.ReplicaID != "us" {
		t.Fatalf("y at %s, want us", got.ReplicaID)
	}
	db.prefers["y"] = "eu-west"
	us.Refresh(ctx)
	us.Refresh(ctx)
	if len(moved) != 1 || moved[0] != "y" || db.homes["y"].ReplicaID != "" {
		t.Fatalf("moved %v, y's home %q; want y given up once", moved, db.homes["y"].ReplicaID)
	}
	if got, _ := us.Where(ctx, "y"); got.ReplicaID != "eu" {
		t.Fatalf("us sends y to %s, want eu", got.ReplicaID)
	}
	// With eu dead, y's region is served nowhere: us keeps what it has.
	db.dead["eu"] = true
	if got, _ := us.Where(ctx, "z"); got.ReplicaID != "us" {
		t.Fatalf("z at %s", got.ReplicaID)
	}
	us.Refresh(ctx)
	if len(moved) != 1 {
		t.Fatalf("moved %v with no replica in the region", moved)
	}
}

func TestHomesWhere(t *testing.T) {
	ctx := context.Background()
	db := newMemHomes()
	var lost, gained []string
	a := NewHomes(db, "a", HomesOptions{Lost: func(org string) { lost = append(lost, org) }})
	b := NewHomes(db, "b", HomesOptions{Grace: 5 * time.Second, Gained: func(org string) { gained = append(gained, org) }})

	steps := []struct {
		name    string
		h       *Homes
		org     string
		want    string
		prepare func()
	}{
		{name: "the first to ask claims", h: a, org: "x", want: "a"},
		{name: "another replica finds the live home", h: b, org: "x", want: "a"},
		{name: "each organisation has its own", h: b, org: "y", want: "b"},
		{name: "a dead home passes to the next to ask", h: b, org: "x", want: "b", prepare: func() {
			db.dead["a"] = true
			b.Refresh(ctx)
		}},
	}
	for _, s := range steps {
		if s.prepare != nil {
			s.prepare()
		}
		got, err := s.h.Where(ctx, s.org)
		if err != nil || got.ReplicaID != s.want {
			t.Fatalf("%s: %+v, %v; want %s", s.name, got, err, s.want)
		}
	}
	// b was told of each home it claimed, and of no other.
	if strings.Join(gained, " ") != "y x" {
		t.Fatalf("b gained %v, want y then x", gained)
	}
	// a comes back and learns it lost x.
	db.dead["a"] = false
	a.Refresh(ctx)
	if h, _ := a.Lookup("x"); len(lost) != 1 || lost[0] != "x" || h.ReplicaID == "a" {
		t.Fatalf("lost %v, x at %q; want x lost", lost, h.ReplicaID)
	}
	if got, _ := a.Where(ctx, "x"); got.ReplicaID != "b" {
		t.Fatalf("a sees x at %q, want b", got.ReplicaID)
	}
}

func TestHomesServeOnWithoutTheDatabase(t *testing.T) {
	ctx := context.Background()
	db := newMemHomes()
	a := NewHomes(db, "a", HomesOptions{})
	if _, err := a.Where(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	db.down = true
	a.Refresh(ctx)
	if got, err := a.Where(ctx, "x"); err != nil || got.ReplicaID != "a" {
		t.Fatalf("own home without the database: %+v, %v", got, err)
	}
	if _, err := a.Where(ctx, "new"); err == nil {
		t.Fatal("an organisation without a home was given one without the database")
	}
}

func TestHomesClaimOnceForConcurrentAsks(t *testing.T) {
	db := newMemHomes()
	a := NewHomes(db, "a", HomesOptions{})
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if h, err := a.Where(context.Background(), "x"); err != nil || h.ReplicaID != "a" {
				t.Errorf("%+v, %v", h, err)
			}
		})
	}
	wg.Wait()
	if n := db.claims.Load(); n < 1 || n > 50 {
		t.Fatalf("%d claims", n)
	}
	// Once claimed, asks are answered from memory.
	before := db.claims.Load()
	for range 100 {
		_, _ = a.Where(context.Background(), "x")
	}
	if db.claims.Load() != before {
		t.Fatal("a home already known was claimed again")
	}
}

func TestHomesRelease(t *testing.T) {
	ctx := context.Background()
	db := newMemHomes()
	var lost []string
	a := NewHomes(db, "a", HomesOptions{Lost: func(org string) { lost = append(lost, org) }})
	b := NewHomes(db, "b", HomesOptions{Grace: 5 * time.Second})
	for _, org := range []string{"x", "y"} {
		if _, err := a.Where(ctx, org); err != nil {
			t.Fatal(err)
		}
	}
	if a.Count() != 2 {
		t.Fatalf("a is home to %d, want 2", a.Count())
	}
	a.Release(ctx)
	if _, err := a.Where(ctx, "z"); !errors.Is(err, ErrReleased) {
		t.Fatalf("a stopping replica claimed: %v", err)
	}
	if got, _ := b.Where(ctx, "x"); got.ReplicaID != "b" {
		t.Fatalf("x after the release is at %q, want b", got.ReplicaID)
	}
	a.Refresh(ctx)
	if len(lost) != 0 {
		t.Fatalf("released homes reported lost: %v", lost)
	}
}

// TestHomesRefreshOlderThanAClaim: a reading of the homes that began
// before this replica's claim neither undoes it nor reports it lost.
func TestHomesRefreshOlderThanAClaim(t *testing.T) {
	ctx := context.Background()
	db := &slowHomes{memHomes: newMemHomes(), read: make(chan struct{}), release: make(chan struct{})}
	var lost []string
	a := NewHomes(db, "a", HomesOptions{Lost: func(org string) { lost = append(lost, org) }})
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Refresh(ctx)
	}()
	<-db.read // the reading has its rows: none
	if _, err := a.Where(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	close(db.release)
	<-done
	if h, _ := a.Lookup("x"); h.ReplicaID != "a" || len(lost) != 0 {
		t.Fatalf("x at %q, lost %v after an older reading", h.ReplicaID, lost)
	}
}

type slowHomes struct {
	*memHomes
	read, release chan struct{}
}

func (s *slowHomes) Homes(ctx context.Context) ([]Home, error) {
	hs, err := s.memHomes.Homes(ctx)
	close(s.read)
	<-s.release
	return hs, err
}

// A claim that lands as the replica stops is given back at once.
func TestHomesClaimWhileReleasing(t *testing.T) {
	ctx := context.Background()
	db := &gatedHomes{memHomes: newMemHomes(), claiming: make(chan struct{}), proceed: make(chan struct{})}
	a := NewHomes(db, "a", HomesOptions{})
	errc := make(chan error, 1)
	go func() {
		_, err := a.Where(ctx, "x")
		errc <- err
	}()
	<-db.claiming
	a.Release(ctx)
	close(db.proceed)
	if err := <-errc; !errors.Is(err, ErrReleased) {
		t.Fatalf("a claim made while stopping: %v", err)
	}
	if h, _ := db.Homes(ctx); len(h) != 1 || h[0].ReplicaID != "" {
		t.Fatalf("homes after the stop: %+v", h)
	}
}

type gatedHomes struct {
	*memHomes
	claiming, proceed chan struct{}
}

func (g *gatedHomes) ClaimHome(ctx context.Context, org, me string) (Home, error) {
	close(g.claiming)
	<-g.proceed
	return g.memHomes.ClaimHome(ctx, org, me)
}

// A home that cannot be reached is looked up again in the database, but
// at most once a quarter second for an organisation: while the dead
// home's registration lasts, every request would otherwise ask. Once it
// has lapsed, the next lookup takes the organisation over.
func TestHomesForgetUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db := newMemHomes()
		a, b := NewHomes(db, "a", HomesOptions{}), NewHomes(db, "b", HomesOptions{})
		if got, _ := a.Where(ctx, "x"); got.ReplicaID != "a" {
			t.Fatalf("x at %q", got.ReplicaID)
		}
		if got, _ := b.Where(ctx, "x"); got.ReplicaID != "a" {
			t.Fatalf("b sees x at %q", got.ReplicaID)
		}
		// a dies; its registration has not lapsed yet.
		claims := db.claims.Load()
		if !b.ForgetUnreachable("x") {
			t.Fatal("the first report was not acted on")
		}
		if got, _ := b.Where(ctx, "x"); got.ReplicaID != "a" || db.claims.Load() != claims+1 {
			t.Fatalf("x at %q after %d claims, want a, asked once", got.ReplicaID, db.claims.Load()-claims)
		}
		for range 10 {
			if b.ForgetUnreachable("x") {
				t.Fatal("forgot again within a quarter second")
			}
			b.Where(ctx, "x")
		}
		if db.claims.Load() != claims+1 {
			t.Fatalf("%d claims within a quarter second, want 1", db.claims.Load()-claims)
		}
		// Its registration lapses: the next report takes x over.
		db.mu.Lock()
		db.dead["a"] = true
		db.mu.Unlock()
		time.Sleep(recheckEvery)
		if !b.ForgetUnreachable("x") {
			t.Fatal("a report a quarter second later was not acted on")
		}
		if got, _ := b.Where(ctx, "x"); got.ReplicaID != "b" {
			t.Fatalf("x at %q, want b", got.ReplicaID)
		}
		// Its own homes a replica never forgets so.
		time.Sleep(recheckEvery)
		b.ForgetUnreachable("x")
		if got, ok := b.Lookup("x"); !ok || got.ReplicaID != "b" {
			t.Fatalf("b forgot its own home: %+v", got)
		}
	})
}

// After readings failed (the database was down, so no replica could
// renew its registration), a home that was live before is taken for live
// for Grace though the database reads it expired: another replica asking
// in the meantime forwards to it rather than taking the organisation and
// moving its workers. After Grace, or without an outage, a dead home is
// claimed at once.
func TestHomesGraceAfterTheDatabaseReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db := newMemHomes()
		a := NewHomes(db, "a", HomesOptions{})
		b := NewHomes(db, "b", HomesOptions{Grace: 5 * time.Second})
		if got, err := a.Where(ctx, "x"); err != nil || got.ReplicaID != "a" {
			t.Fatalf("claim: %+v %v", got, err)
		}
		b.Refresh(ctx)

		db.down = true
		b.Refresh(ctx)
		db.down = false
		db.dead["a"] = true // its registration lapsed on the database's clock
		b.Refresh(ctx)
		if got, err := b.Where(ctx, "x"); err != nil || got.ReplicaID != "a" {
			t.Fatalf("just after the database came back: %+v %v; want a, within the grace", got, err)
		}
		time.Sleep(5 * time.Second)
		b.Refresh(ctx)
		if got, err := b.Where(ctx, "x"); err != nil || got.ReplicaID != "b" {
			t.Fatalf("after the grace: %+v %v; want b", got, err)
		}

		// Without an outage the grace does not apply.
		c := NewHomes(db, "c", HomesOptions{Grace: 5 * time.Second})
		c.Refresh(ctx)
		db.dead["b"] = true
		c.Refresh(ctx)
		if got, err := c.Where(ctx, "x"); err != nil || got.ReplicaID != "c" {
			t.Fatalf("a dead home with the database up: %+v %v; want c", got, err)
		}
	})
}
