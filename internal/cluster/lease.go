// Package cluster runs a gateway replica's part in a cluster of replicas
// sharing one database: its registration, the leader lease that decides
// which replica runs the cluster's once-only duties (the rentals,
// reconciliation, retention), and the organisations' homes (homes.go),
// which decide which replica holds each organisation's workers and serves
// its requests. Every replica serves; a standby, which does not hold the
// lease, takes it over when it lapses.
//
// The lease lives in the database and every expiry is compared with the
// database's clock, so replicas' clocks need not agree. A leader learns it
// was replaced only from the database: cut off from it, it goes on serving
// the workers linked to it (nothing else could), and its singleton duties'
// writes, which carry its epoch, are refused once another replica leads.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc/internal/clock"
)

// Replica is how a replica registers itself.
type Replica struct {
	ID           string
	AdvertiseURL string
	// Region is where the replica runs; "" for none.
	Region  string
	Version string
	// Role is "leader" or "standby", as the replica last knew it.
	Role string
	// OutboxRecords and OutboxOldest are what the replica has still to
	// ship to the database.
	OutboxRecords int64
	OutboxOldest  time.Time
	// UnreachablePeers are the peers the replica could not reach lately.
	UnreachablePeers []string
	StartedAt        time.Time
	// UsageRetention is how long the replica keeps usage rows when it
	// leads (retention is the leader's duty); zero reports none.
	UsageRetention time.Duration
}

// Leader is the lease as the database holds it.
type Leader struct {
	ReplicaID    string
	AdvertiseURL string
	Epoch        int64
	ExpiresAt    time.Time
	// DBNow is the database's clock when the statement ran.
	DBNow time.Time
	// Displaced is the registration the renewal overwrote when another
	// live process had written it under the same id: started at another
	// time and advertising another URL. Nil otherwise.
	Displaced *Replica
	// PeerTTLs are the registration TTLs of the other live replicas, by
	// id, read from their last renewals.
	PeerTTLs map[string]time.Duration
	// PeerRetentions are the usage retentions of the other live replicas
	// that report one, by id.
	PeerRetentions map[string]time.Duration
}

// ErrIDShared is why a replica stops on finding that another live
// process, started before it, registers under its id: one of their data
// directories, which keep the id (replica.id), was copied from the
// other's. They would take each other's organisations and lease turn
// about. The one started first goes on.
var ErrIDShared = errors.New("cluster: another replica registers under this one's id")

// Store is the database's side of the lease.
type Store interface {
	// Beat renews me's registration for ttl and, when want, takes the
	// lease if it is free or has expired, or renews it if it is me's. It
	// returns the lease as it stands after the statement.
	Beat(ctx context.Context, me Replica, ttl time.Duration, want bool) (Leader, error)
	// Resign ends me's lease now, if it is still me's at that epoch.
	Resign(ctx context.Context, replicaID string, epoch int64) error
}

// Roles.
const (
	RoleLeader  = "leader"
	RoleStandby = "standby"
)

// State is the replica's view of the lease.
type State struct {
	// Leading: this replica holds the lease, or held it last and has not
	// been told otherwise by the database.
	Leading bool
	Epoch   int64
	// LeaderID and LeaderURL name the leader; empty when none is known.
	LeaderID  string
	LeaderURL string
	// Confirmed is when the database last answered, on the local wall
	// clock; zero before it ever has.
	Confirmed time.Time
	// Unconfirmed is how long the database has not answered, measured
	// on the monotonic clock; zero while it answers.
	Unconfirmed time.Duration
}

// Options tune a Lease.
type Options struct {
	// TTL is how long a lease lasts unless renewed; a dead leader is
	// replaced within it (plus one Every). Default 10 s.
	TTL time.Duration
	// Every is how often the replica renews; default TTL/5.
	Every  time.Duration
	Clock  clock.Clock
	Logger *slog.Logger
	// Outbox reports what the replica has yet to ship, for its
	// registration; nil reports nothing.
	Outbox func() (records int64, oldest time.Time)
	// Unreachable reports the peers the replica could not reach lately,
	// for its registration; nil reports none.
	Unreachable func() []string
}

// Lease keeps a replica's registration and its claim on the lease.
type Lease struct {
	store Store
	me    Replica
	o     Options
	log   *slog.Logger

	mu       sync.Mutex
	st       State
	lastOK   time.Duration // Mono of the last answer; valid when answered
	answered bool
	// liveSince is when the registration was last renewed after it may
	// have lapsed (zero: it never has): another replica may have taken
	// this one's homes before then, and not since.
	liveSince time.Time
	// free: the last answer showed the lease free or expired. A standby
	// claims it only on the renewal after one that saw it so, and only
	// with two answers in a row behind it: after an outage of the
	// database every replica comes back at once, and the leader, which
	// renews as often as they do, gets its renewal in first rather than
	// losing its workers to one that happened to reach the database
	// sooner.
	free bool
	// streak counts the answers in a row since the last failure.
	streak int
	// expiresIn is how long the lease another replica holds had left at
	// the last answer; a standby renews again just after it, rather than
	// up to a whole period later.
	expiresIn time.Duration
	changed   chan struct{}
	// shared is told, once, that this replica is the later of two
	// sharing an id; Run then returns without resigning, as the lease
	// it holds is the other's too.
	shared   chan error
	isShared atomic.Bool
	// warnedTTL and warnedRetention are the peers' TTLs and usage
	// retentions last warned of; Beat's alone.
	warnedTTL, warnedRetention warned
}

// New returns a lease for me; Run drives it.
func New(store Store, me Replica, o Options) *Lease {
	if o.TTL <= 0 {
		o.TTL = 10 * time.Second
	}
	if o.Every <= 0 {
		o.Every = o.TTL / 5
	}
	if o.Clock == nil {
		o.Clock = clock.System()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Lease{store: store, me: me, o: o, log: o.Logger, changed: make(chan struct{}), shared: make(chan error, 1)}
}

// Shared tells, once, that another live process, started before this
// one, registers under its id (ErrIDShared): this one must stop, and
// must not give up the homes or the lease held under the id on the way.
func (l *Lease) Shared() <-chan error { return l.shared }

// Every is how often the replica renews.
func (l *Lease) Every() time.Duration { return l.o.Every }

// TTL is the lease's length.
func (l *Lease) TTL() time.Duration { return l.o.TTL }

// State is the replica's view of the lease now.
func (l *Lease) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.st
	if l.answered {
		if d := l.o.Clock.Mono() - l.lastOK; d > l.o.Every*2 {
			st.Unconfirmed = d
		}
	} else {
		st.Unconfirmed = l.o.Clock.Mono()
	}
	return st
}

// LiveSince reports whether the replica's registration is live now
// (renewed within its TTL), and since when it has been without a lapse;
// zero when it never lapsed. Another replica takes this one's homes only
// while its registration has lapsed, so a reading of the homes begun
// since then is still true of this replica's own.
func (l *Lease) LiveSince() (since time.Time, live bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.liveSince, l.answered && l.o.Clock.Mono()-l.lastOK < l.o.TTL
}

// Changed is closed when the state's leader or epoch next changes; call
// it again for the change after.
func (l *Lease) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// Run renews the registration and the lease every Options.Every until ctx
// ends, then resigns the lease if it holds it so that a standby takes over
// at once rather than after the TTL.
func (l *Lease) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if !l.isShared.Load() {
				l.resign()
			}
			return nil
		case <-t.C:
		}
		l.Beat(ctx)
		t.Reset(l.next())
	}
}

// Beat renews once.
func (l *Lease) Beat(ctx context.Context) {
	me := l.me
	st := l.State()
	me.Role = RoleStandby
	if st.Leading {
		me.Role = RoleLeader
	}
	l.mu.Lock()
	want := st.Leading || l.claimable()
	l.mu.Unlock()
	if l.o.Outbox != nil {
		me.OutboxRecords, me.OutboxOldest = l.o.Outbox()
	}
	if l.o.Unreachable != nil {
		me.UnreachablePeers = l.o.Unreachable()
	}
	bctx, cancel := context.WithTimeout(ctx, l.o.Every)
	defer cancel()
	mono := l.o.Clock.Mono()
	lead, err := l.store.Beat(bctx, me, l.o.TTL, want)
	if err != nil {
		if ctx.Err() == nil {
			l.failed(err)
		}
		return
	}
	l.mu.Lock()
	renewed := l.answered
	l.mu.Unlock()
	// The first renewal may overwrite a process that died, under the
	// same id and within its TTL; only one that lives renews again.
	if d := lead.Displaced; d != nil && renewed {
		l.displaced(*d)
	}
	l.checkTTLs(lead.PeerTTLs)
	l.checkRetentions(lead.PeerRetentions)
	l.apply(lead, mono)
}

// checkTTLs warns, once per peer and TTL, of a live replica whose
// registration lasts otherwise than this one's: the lease and homes hold
// (every expiry is the database's), but a replica with the longer TTL is
// replaced that much more slowly when it dies, which the operator chose
// for none of them (docs/cluster.md: give them all the same).
func (l *Lease) checkTTLs(peers map[string]time.Duration) {
	for id, ttl := range peers {
		if d := ttl - l.o.TTL; l.warnedTTL.due(id, ttl, d > -ttlSlack && d < ttlSlack) {
			l.log.Warn("cluster: another replica's --lease-ttl differs from this one's; give every replica the same",
				"peer", id, "peer_lease_ttl", ttl.String(), "lease_ttl", l.o.TTL.String())
		}
	}
}

// checkRetentions warns, once per peer and value, of a live replica whose
// --usage-retention differs from this one's: retention is the leader's
// duty, run with its own value, so the usage log would be kept for as
// long as whichever replica leads says (docs/cluster.md: give them all
// the same).
func (l *Lease) checkRetentions(peers map[string]time.Duration) {
	mine := l.me.UsageRetention
	if mine <= 0 {
		return
	}
	for id, d := range peers {
		if l.warnedRetention.due(id, d, d == mine) {
			l.log.Warn("cluster: another replica's --usage-retention differs from this one's; the leader's prunes the usage log, so give every replica the same",
				"peer", id, "peer_usage_retention", days(d), "usage_retention", days(mine))
		}
	}
}

// warned holds, by peer, the value of a setting last warned of, so that
// a peer whose setting differs from this replica's is warned of once for
// each value it takes.
type warned map[string]time.Duration

// due reports whether peer id's value v, the same as this replica's or
// not, is to be warned of now, and notes it.
func (w *warned) due(id string, v time.Duration, same bool) bool {
	switch {
	case same:
		delete(*w, id)
		return false
	case (*w)[id] == v:
		return false
	case *w == nil:
		*w = warned{}
	}
	(*w)[id] = v
	return true
}

// days writes a retention as the flag takes it: whole days as "400d".
func days(d time.Duration) string {
	const day = 24 * time.Hour
	if d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}

// ttlSlack is how far a peer's TTL, read as its registration's expiry
// less its renewal, may be from this one's and count as the same.
const ttlSlack = 5 * time.Millisecond

// displaced reports another live process under this replica's id: the
// one started later stops.
func (l *Lease) displaced(other Replica) {
	if !other.StartedAt.Before(l.me.StartedAt) {
		l.log.Error("cluster: another process registers under this replica's id; it was started later, and stops when it sees this one",
			"id", l.me.ID, "other_url", other.AdvertiseURL, "other_started_at", other.StartedAt)
		return
	}
	err := fmt.Errorf("%w %s: the one at %s, started at %s; each replica needs a data directory of its own (remove replica.id from this one's to give it a new id)",
		ErrIDShared, l.me.ID, other.AdvertiseURL, other.StartedAt.UTC().Format(time.RFC3339))
	if l.isShared.CompareAndSwap(false, true) {
		l.shared <- err
	}
}

func (l *Lease) failed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.streak, l.expiresIn = 0, 0
	if !l.answered || l.o.Clock.Mono()-l.lastOK <= l.o.Every*2 {
		l.log.Warn("cluster: cannot reach the database to renew the lease; serving on", "err", err, "leading", l.st.Leading)
	}
}

// claimable reports whether a standby should claim the lease at its next
// renewal; l.mu is held.
func (l *Lease) claimable() bool { return l.free && l.streak >= 2 }

// claimDelay is how soon a standby that may claim the lease renews, and
// how long after another's lease should have expired it looks again.
const claimDelay = 50 * time.Millisecond

// next is how long to wait before the next renewal: the period, or less
// for a standby about to find the lease expired, or able to claim it.
func (l *Lease) next() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.st.Leading:
		return l.o.Every
	case l.claimable():
		return claimDelay
	case l.expiresIn > 0:
		return min(l.o.Every, l.expiresIn+claimDelay)
	}
	return l.o.Every
}

// apply takes the lease as the database told it, asked at mono.
func (l *Lease) apply(lead Leader, mono time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := l.st
	now := l.o.Clock.Mono()
	wasDown := l.answered && now-l.lastOK > l.o.Every*2
	if l.answered && now-l.lastOK > l.o.TTL {
		// No renewal reached the database for longer than the
		// registration lasts: it lapsed, if only for a moment.
		l.liveSince = l.o.Clock.Now()
	}
	l.answered, l.lastOK = true, mono
	l.free = lead.ReplicaID == "" || !lead.ExpiresAt.After(lead.DBNow)
	l.streak++
	l.expiresIn = 0
	if lead.ReplicaID != l.me.ID && !l.free {
		l.expiresIn = lead.ExpiresAt.Sub(lead.DBNow)
	}
	l.st = State{
		Leading:   lead.ReplicaID == l.me.ID,
		Epoch:     lead.Epoch,
		LeaderID:  lead.ReplicaID,
		LeaderURL: lead.AdvertiseURL,
		Confirmed: l.o.Clock.Now(),
	}
	// An expired lease names no leader to send anyone to: its holder
	// may be dead, and a worker sent there would only come back.
	if l.free && !l.st.Leading {
		l.st.LeaderURL = ""
	}
	if wasDown {
		l.log.Info("cluster: the database answers again", "leader", lead.ReplicaID, "epoch", lead.Epoch)
	}
	if was.Leading == l.st.Leading && was.Epoch == l.st.Epoch && was.LeaderID == l.st.LeaderID && was.LeaderURL == l.st.LeaderURL {
		return
	}
	switch {
	case l.st.Leading && !was.Leading:
		l.log.Info("cluster: this replica leads", "epoch", lead.Epoch)
	case !l.st.Leading && was.Leading:
		l.log.Warn("cluster: another replica leads; standing down", "leader", lead.ReplicaID, "url", lead.AdvertiseURL, "epoch", lead.Epoch)
	case !l.st.Leading:
		l.log.Info("cluster: standing by", "leader", lead.ReplicaID, "url", lead.AdvertiseURL, "epoch", lead.Epoch)
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// resign hands the lease back on the way out.
func (l *Lease) resign() {
	st := l.State()
	if !st.Leading {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.store.Resign(ctx, l.me.ID, st.Epoch); err != nil {
		l.log.Warn("cluster: resign the lease; a standby takes over when it expires", "err", err)
		return
	}
	l.log.Info("cluster: resigned the lease", "epoch", st.Epoch)
}
