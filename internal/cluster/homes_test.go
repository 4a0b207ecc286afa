package cluster

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// memHomes is the database's homes in memory: a replica is alive unless
// marked dead.
type memHomes struct {
	mu     sync.Mutex
	homes  map[string]Home
	dead   map[string]bool
	claims atomic.Int64
	down   bool
}

func newMemHomes() *memHomes { return &memHomes{homes: map[string]Home{}, dead: map[string]bool{}} }

func (m *memHomes) view(h Home) Home {
	h.Alive = h.ReplicaID != "" && !m.dead[h.ReplicaID]
	if h.ReplicaID != "" {
		h.AdvertiseURL = "http://" + h.ReplicaID
	}
	return h
}

func (m *memHomes) ClaimHome(_ context.Context, org, me string) (Home, error) {
	m.claims.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return Home{}, errors.New("database down")
	}
	h, ok := m.homes[org]
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

func TestHomesWhere(t *testing.T) {
	ctx := context.Background()
	db := newMemHomes()
	var lost []string
	a := NewHomes(db, "a", HomesOptions{Lost: func(org string) { lost = append(lost, org) }})
	b := NewHomes(db, "b", HomesOptions{})

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
	b := NewHomes(db, "b", HomesOptions{})
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
