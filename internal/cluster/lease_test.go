package cluster

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// memStore is the lease table in memory, on a clock the test moves.
type memStore struct {
	mu   sync.Mutex
	now  time.Time
	lead Leader
	down bool
	// regs are the registrations, by id, with when each expires.
	regs map[string]registration
}

type registration struct {
	Replica
	expires time.Time
	ttl     time.Duration
}

func (m *memStore) Beat(_ context.Context, me Replica, ttl time.Duration, want bool) (Leader, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return Leader{}, errors.New("connection refused")
	}
	var displaced *Replica
	if r, ok := m.regs[me.ID]; ok && m.now.Before(r.expires) && r.AdvertiseURL != me.AdvertiseURL && !r.StartedAt.Equal(me.StartedAt) {
		displaced = &r.Replica
	}
	if m.regs == nil {
		m.regs = map[string]registration{}
	}
	m.regs[me.ID] = registration{me, m.now.Add(ttl), ttl}
	defer func() { m.lead.Displaced, m.lead.PeerTTLs, m.lead.PeerRetentions = nil, nil, nil }()
	m.lead.Displaced = displaced
	for id, r := range m.regs {
		if id != me.ID && m.now.Before(r.expires) {
			if m.lead.PeerTTLs == nil {
				m.lead.PeerTTLs, m.lead.PeerRetentions = map[string]time.Duration{}, map[string]time.Duration{}
			}
			m.lead.PeerTTLs[id] = r.ttl
			if r.UsageRetention > 0 {
				m.lead.PeerRetentions[id] = r.UsageRetention
			}
		}
	}
	switch {
	case !want:
	case m.lead.ReplicaID == me.ID:
		m.lead.ExpiresAt = m.now.Add(ttl)
	case m.lead.ReplicaID == "" || !m.now.Before(m.lead.ExpiresAt):
		m.lead = Leader{ReplicaID: me.ID, AdvertiseURL: me.AdvertiseURL, Epoch: m.lead.Epoch + 1, ExpiresAt: m.now.Add(ttl)}
	}
	l := m.lead
	l.DBNow = m.now
	return l, nil
}

func (m *memStore) Resign(_ context.Context, id string, epoch int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lead.ReplicaID == id && m.lead.Epoch == epoch {
		m.lead.ExpiresAt = m.now
	}
	return nil
}

func (m *memStore) advance(d time.Duration) {
	m.mu.Lock()
	m.now = m.now.Add(d)
	m.mu.Unlock()
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

func (c *fakeClock) Mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.wall, c.mono = c.wall.Add(d), c.mono+d
	c.mu.Unlock()
}

func TestLeaseFailover(t *testing.T) {
	ctx := context.Background()
	db := &memStore{now: time.Unix(1_800_000_000, 0)}
	clk := &fakeClock{wall: time.Unix(1_700_000_000, 0), mono: time.Hour}
	o := Options{TTL: 10 * time.Second, Every: 2 * time.Second, Clock: clk}
	a := New(db, Replica{ID: "a", AdvertiseURL: "http://a"}, o)
	b := New(db, Replica{ID: "b", AdvertiseURL: "http://b"}, o)
	tick := func(d time.Duration, ls ...*Lease) {
		db.advance(d)
		clk.advance(d)
		for _, l := range ls {
			l.Beat(ctx)
		}
	}

	bChanged := b.Changed()
	// The first two renewals see the lease free; the next claims it.
	tick(0, a, b)
	tick(0, a, b)
	tick(0, a, b)
	if st := a.State(); !st.Leading || st.Epoch != 1 {
		t.Fatalf("a = %+v, want leading at epoch 1", st)
	}
	if st := b.State(); st.Leading || st.LeaderURL != "http://a" {
		t.Fatalf("b = %+v, want standing by for http://a", st)
	}
	select {
	case <-bChanged:
	default:
		t.Fatal("b's Changed was not closed when it learnt the leader")
	}

	// a stops renewing: b takes over only at the renewal after the one
	// that saw the lease expired.
	for range 5 {
		tick(2*time.Second, b)
		if b.State().Leading {
			t.Fatalf("b took the lease at %v, before it had seen it expired", db.now)
		}
	}
	tick(2*time.Second, b)
	if st := b.State(); !st.Leading || st.Epoch != 2 {
		t.Fatalf("b = %+v, want leading at epoch 2 once a's lease expired", st)
	}

	// a comes back: the database tells it that it no longer leads.
	aChanged := a.Changed()
	tick(0, a)
	if st := a.State(); st.Leading || st.LeaderID != "b" || st.Epoch != 2 {
		t.Fatalf("a = %+v, want standing by for b at epoch 2", st)
	}
	select {
	case <-aChanged:
	default:
		t.Fatal("a's Changed was not closed when it stood down")
	}
}

func TestLeaseServesOnWhileTheDatabaseIsDown(t *testing.T) {
	ctx := context.Background()
	db := &memStore{now: time.Unix(1_800_000_000, 0)}
	clk := &fakeClock{wall: time.Unix(1_700_000_000, 0), mono: time.Hour}
	a := New(db, Replica{ID: "a"}, Options{TTL: 10 * time.Second, Every: 2 * time.Second, Clock: clk})
	b := New(db, Replica{ID: "b"}, Options{TTL: 10 * time.Second, Every: 2 * time.Second, Clock: clk})
	a.Beat(ctx)
	a.Beat(ctx)
	a.Beat(ctx)
	b.Beat(ctx)
	db.down = true
	for range 15 {
		db.advance(2 * time.Second)
		clk.advance(2 * time.Second)
		a.Beat(ctx)
		b.Beat(ctx)
	}
	st := a.State()
	if !st.Leading || st.Unconfirmed < 20*time.Second {
		t.Fatalf("a = %+v after 30 s without the database, want still leading, unconfirmed for 30 s", st)
	}
	// The database is back, and b happens to reach it first: it sees the
	// lease expired, but a renews before b's next renewal would claim it.
	db.down = false
	b.Beat(ctx)
	a.Beat(ctx)
	b.Beat(ctx)
	if st := a.State(); !st.Leading || st.Epoch != 1 || st.Unconfirmed != 0 {
		t.Fatalf("a = %+v once the database is back, want leading at epoch 1 again, confirmed", st)
	}
	if st := b.State(); st.Leading || st.LeaderID != "a" {
		t.Fatalf("b = %+v, want standing by for a", st)
	}
}

func TestLeaseResignsOnTheWayOut(t *testing.T) {
	db := &memStore{now: time.Unix(1_800_000_000, 0)}
	a := New(db, Replica{ID: "a"}, Options{TTL: 10 * time.Second})
	b := New(db, Replica{ID: "b"}, Options{TTL: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	a.Beat(ctx)
	a.Beat(ctx)
	a.Beat(ctx)
	b.Beat(context.Background())
	b.Beat(context.Background())
	if !a.State().Leading {
		t.Fatal("a does not lead")
	}
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	b.Beat(context.Background())
	b.Beat(context.Background())
	if st := b.State(); !st.Leading || st.Epoch != 2 {
		t.Fatalf("b = %+v, want leading at its second renewal after a resigned", st)
	}
}

// A standby looks again just after the lease it saw should expire, and
// claims it at once once it has seen it expired, so that a dead leader is
// replaced within the TTL and two short delays, not two more periods.
func TestLeaseStandbyRenewsAtTheExpiry(t *testing.T) {
	ctx := context.Background()
	db := &memStore{now: time.Unix(1_800_000_000, 0)}
	clk := &fakeClock{wall: time.Unix(1_700_000_000, 0), mono: time.Hour}
	o := Options{TTL: 10 * time.Second, Every: 2 * time.Second, Clock: clk}
	a := New(db, Replica{ID: "a"}, o)
	b := New(db, Replica{ID: "b"}, o)
	for range 3 {
		a.Beat(ctx)
	}
	b.Beat(ctx)
	if d := b.next(); d != 2*time.Second {
		t.Fatalf("next = %v with 10 s of lease left, want the period", d)
	}
	// a dies; 9 s on, b has a second of the lease left to wait.
	db.advance(9 * time.Second)
	clk.advance(9 * time.Second)
	b.Beat(ctx)
	if d := b.next(); d != time.Second+claimDelay {
		t.Fatalf("next = %v with 1 s of lease left, want just after it", d)
	}
	db.advance(time.Second + claimDelay)
	clk.advance(time.Second + claimDelay)
	b.Beat(ctx)
	if d := b.next(); d != claimDelay || b.State().Leading {
		t.Fatalf("next = %v, leading %v once the lease expired; want a claim after %v", d, b.State().Leading, claimDelay)
	}
	db.advance(claimDelay)
	clk.advance(claimDelay)
	b.Beat(ctx)
	if st := b.State(); !st.Leading || st.Epoch != 2 {
		t.Fatalf("b = %+v, want leading at epoch 2", st)
	}
	if d := b.next(); d != 2*time.Second {
		t.Fatalf("the leader renews after %v, want the period", d)
	}
}

// Of two processes registering under one id, the one started later learns
// it must stop, at its second renewal; the first goes on. A process that
// replaced a dead one under the same id within its TTL, at another
// address, is not told to.
func TestSharedID(t *testing.T) {
	ctx := context.Background()
	db := &memStore{now: time.Unix(1_800_000_000, 0)}
	clk := &fakeClock{wall: time.Unix(1_700_000_000, 0), mono: time.Hour}
	started := time.Unix(1_700_000_000, 0)
	lease := func(url string, at time.Time) *Lease {
		return New(db, Replica{ID: "r1", AdvertiseURL: url, StartedAt: at}, Options{TTL: 10 * time.Second, Clock: clk})
	}
	shared := func(l *Lease) error {
		select {
		case err := <-l.Shared():
			return err
		default:
			return nil
		}
	}
	first, copied := lease("http://a:8080", started), lease("http://b:8080", started.Add(time.Hour))
	first.Beat(ctx)
	copied.Beat(ctx) // over a registration that might be a dead process's
	first.Beat(ctx)
	copied.Beat(ctx)
	first.Beat(ctx)
	if err := shared(first); err != nil {
		t.Fatalf("the replica started first was told to stop: %v", err)
	}
	err := shared(copied)
	if !errors.Is(err, ErrIDShared) || !strings.Contains(err.Error(), "http://a:8080") {
		t.Fatalf("the replica started later: %v, want ErrIDShared naming the other", err)
	}
	copied.Beat(ctx)
	if err := shared(copied); err != nil {
		t.Fatalf("told twice: %v", err)
	}

	// A process that died, and the one restarted in its place within
	// its TTL, at another address.
	db.advance(time.Minute)
	dead := lease("http://c:8080", started.Add(2*time.Hour))
	dead.Beat(ctx)
	restarted := lease("http://d:8080", started.Add(3*time.Hour))
	for range 5 {
		restarted.Beat(ctx)
		db.advance(2 * time.Second)
	}
	if err := shared(restarted); err != nil {
		t.Fatalf("a restart over a dead process's registration: %v", err)
	}
}

// A replica whose registration lasts otherwise than this one's is warned
// of, once for each TTL it is seen with, and not while the two agree.
func TestPeerWithAnotherTTLIsWarnedOf(t *testing.T) {
	ctx := context.Background()
	db := &memStore{now: time.Unix(1_800_000_000, 0)}
	clk := &fakeClock{wall: time.Unix(1_700_000_000, 0), mono: time.Hour}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
	me := New(db, Replica{ID: "a", AdvertiseURL: "http://a"}, Options{TTL: 10 * time.Second, Clock: clk, Logger: log})
	peer := func(ttl time.Duration) *Lease {
		return New(db, Replica{ID: "b", AdvertiseURL: "http://b"}, Options{TTL: ttl, Clock: clk})
	}
	warnings := func() int { return strings.Count(logged.String(), "lease-ttl differs") }
	peer(10 * time.Second).Beat(ctx)
	me.Beat(ctx)
	if n := warnings(); n != 0 {
		t.Fatalf("%d warnings of a peer with the same TTL:\n%s", n, logged.String())
	}
	slow := peer(30 * time.Second)
	for range 3 {
		slow.Beat(ctx)
		me.Beat(ctx)
	}
	if n := warnings(); n != 1 || !strings.Contains(logged.String(), "peer_lease_ttl=30s") {
		t.Fatalf("%d warnings of a peer with a 30 s TTL, want 1:\n%s", n, logged.String())
	}
	peer(10 * time.Second).Beat(ctx)
	me.Beat(ctx)
	peer(30 * time.Second).Beat(ctx)
	me.Beat(ctx)
	if n := warnings(); n != 2 {
		t.Fatalf("%d warnings after the peer's TTL changed back and again, want 2:\n%s", n, logged.String())
	}
}

// A replica warns, once for each peer and value, of a live peer whose
// --usage-retention differs from its own, and not of one that reports
// none (an older build).
func TestPeerWithAnotherUsageRetentionIsWarnedOf(t *testing.T) {
	ctx := context.Background()
	db := &memStore{now: time.Unix(1_800_000_000, 0)}
	clk := &fakeClock{wall: time.Unix(1_700_000_000, 0), mono: time.Hour}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
	const day = 24 * time.Hour
	me := New(db, Replica{ID: "a", AdvertiseURL: "http://a", UsageRetention: 400 * day}, Options{Clock: clk, Logger: log})
	peer := func(retention time.Duration) {
		New(db, Replica{ID: "b", AdvertiseURL: "http://b", UsageRetention: retention}, Options{Clock: clk}).Beat(ctx)
		me.Beat(ctx)
	}
	warnings := func() int { return strings.Count(logged.String(), "usage-retention differs") }
	peer(400 * day)
	peer(0)
	if n := warnings(); n != 0 {
		t.Fatalf("%d warnings of a peer with the same retention, or none:\n%s", n, logged.String())
	}
	for range 3 {
		peer(30 * day)
	}
	if n := warnings(); n != 1 || !strings.Contains(logged.String(), "peer_usage_retention=30d usage_retention=400d") {
		t.Fatalf("%d warnings of a peer keeping 30 days, want 1:\n%s", n, logged.String())
	}
	peer(400 * day)
	peer(30 * day)
	if n := warnings(); n != 2 {
		t.Fatalf("%d warnings after the peer's retention changed back and again, want 2:\n%s", n, logged.String())
	}
}

// A registration renewed on time has been live since the replica began;
// one renewed after longer than its TTL without a renewal is live again
// only from that renewal, and not live at all while it has lapsed.
func TestLeaseLiveSince(t *testing.T) {
	ctx := context.Background()
	db := &memStore{now: time.Unix(1_800_000_000, 0)}
	clk := &fakeClock{wall: time.Unix(1_700_000_000, 0), mono: time.Hour}
	l := New(db, Replica{ID: "a"}, Options{TTL: 10 * time.Second, Every: 2 * time.Second, Clock: clk})
	if _, live := l.LiveSince(); live {
		t.Fatal("live before any renewal")
	}
	for range 5 {
		l.Beat(ctx)
		clk.advance(2 * time.Second)
		db.advance(2 * time.Second)
	}
	if since, live := l.LiveSince(); !live || !since.IsZero() {
		t.Fatalf("renewed on time: since %v, live %v", since, live)
	}
	// Frozen, or cut off, for longer than the TTL.
	clk.advance(30 * time.Second)
	db.advance(30 * time.Second)
	if _, live := l.LiveSince(); live {
		t.Fatal("live 30 s after the last renewal")
	}
	l.Beat(ctx)
	renewed := clk.Now()
	if since, live := l.LiveSince(); !live || !since.Equal(renewed) {
		t.Fatalf("renewed after the lapse: since %v, live %v, want since %v", since, live, renewed)
	}
	// A wait shorter than the TTL is no lapse.
	clk.advance(8 * time.Second)
	db.advance(8 * time.Second)
	l.Beat(ctx)
	if since, live := l.LiveSince(); !live || !since.Equal(renewed) {
		t.Fatalf("renewed within the TTL: since %v, live %v, want since %v", since, live, renewed)
	}
}
