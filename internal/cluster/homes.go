package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Home is an organisation's home: the one replica that holds its worker
// links and schedules its requests. Every other replica forwards the
// organisation's requests there.
type Home struct {
	OrgID string
	// ReplicaID is the home replica; "" when the organisation has none.
	ReplicaID    string
	AdvertiseURL string
	// Epoch grows by one at each change of home.
	Epoch int64
	// Alive: the home replica's registration had not expired when the
	// database was last asked.
	Alive bool
	// Misplaced: the organisation's home_region names another region,
	// where a replica runs that can take it.
	Misplaced bool
}

// HomeStore is the database's side of the homes.
type HomeStore interface {
	// ClaimHome makes replicaID the home of orgID unless a live replica
	// is, and returns the home as it then stands.
	ClaimHome(ctx context.Context, orgID, replicaID string) (Home, error)
	// Homes lists every organisation's home.
	Homes(ctx context.Context) ([]Home, error)
	// ReleaseHomes gives up every home replicaID holds.
	ReleaseHomes(ctx context.Context, replicaID string) (int64, error)
	// ReleaseHome gives up orgID's home if replicaID holds it.
	ReleaseHome(ctx context.Context, orgID, replicaID string) (bool, error)
}

// ErrReleased is the answer for an organisation without a home on a
// replica that has released its homes to stop: it claims none.
var ErrReleased = errors.New("this replica is stopping and takes no organisation's home")

// HomesOptions tune Homes.
type HomesOptions struct {
	// Every is how often the homes are read again; default 2 s.
	Every time.Duration
	// Lost is told of each organisation this replica was the home of and
	// no longer is: another replica claimed it once this one's
	// registration lapsed. Its worker links should go.
	Lost func(orgID string)
	// Gained is told of each organisation this replica claimed, on the
	// claim's path: what it does must not wait.
	Gained func(orgID string)
	// Moved is told of each organisation this replica gave up because
	// it asks for another region, where a replica runs: its workers
	// should finish their running requests and reconnect, to be sent
	// there.
	Moved func(orgID string)
	// Grace is how long, after a reading that follows failed ones, a
	// home that was live before them is still taken for live though the
	// database reads its replica's registration as expired: while the
	// database was down no replica could renew, and the home renews
	// within its next beat. Without it, the first replica to ask after a
	// database restart would take every organisation whose home had not
	// renewed yet, and their workers would move. Its registration's TTL
	// is the natural value; 0 turns it off.
	Grace time.Duration
	// Listen, when set, calls changed whenever a replica releases its
	// homes, until ctx ends: the homes are read again at once.
	Listen func(ctx context.Context, changed func()) error
	// Read, when set, is called after each reading of the homes, once
	// Lost has been told of those this replica lost.
	Read   func()
	Logger *slog.Logger
}

// Homes is a replica's view of every organisation's home, read from the
// database every Every and when an organisation with no live home needs
// one, which this replica then claims. The inference path asks it on
// every request and is answered from memory; only the first request (or
// worker) of an organisation without a live home waits on the database.
type Homes struct {
	store HomeStore
	me    string
	o     HomesOptions
	log   *slog.Logger
	claim singleflight.Group

	// mu is read on every request (Where) and written only by claims
	// and readings of the homes.
	mu    sync.RWMutex
	homes map[string]Home
	// claimed is when this replica last claimed each organisation: a
	// reading of the homes begun before it is older than the claim.
	claimed  map[string]time.Time
	released bool
	// unreachable is when each organisation's home was last forgotten
	// because it could not be reached.
	unreachable map[string]time.Time
	// failing is set when a reading fails; graceUntil ends the Grace the
	// next successful one begins.
	failing    bool
	graceUntil time.Time
	// readBegan is when the last reading that succeeded began.
	readBegan time.Time
}

// NewHomes returns the homes as replica me sees them; Run keeps them.
func NewHomes(store HomeStore, me string, o HomesOptions) *Homes {
	if o.Every <= 0 {
		o.Every = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Homes{store: store, me: me, o: o, log: o.Logger, homes: map[string]Home{}, claimed: map[string]time.Time{},
		unreachable: map[string]time.Time{}}
}

// Run reads the homes every Every, and when told of a release, until ctx
// ends.
func (h *Homes) Run(ctx context.Context) error {
	kick := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	if h.o.Listen != nil {
		wg.Go(func() {
			err := h.o.Listen(ctx, func() {
				select {
				case kick <- struct{}{}:
				default: // a reading is due already
				}
			})
			if err != nil {
				h.log.Warn("cluster: listening for released homes stopped", "err", err)
			}
		})
	}
	t := time.NewTicker(h.o.Every)
	defer t.Stop()
	for {
		h.Refresh(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-kick:
		}
	}
}

// Refresh reads every home from the database now. A failure keeps the
// homes as they were: a replica cut off from the database serves on.
func (h *Homes) Refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, h.o.Every)
	defer cancel()
	began := time.Now()
	hs, err := h.store.Homes(rctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Debug("cluster: read the organisations' homes", "err", err)
			h.mu.Lock()
			h.failing = true
			h.mu.Unlock()
		}
		return
	}
	next := make(map[string]Home, len(hs))
	for _, x := range hs {
		next[x.OrgID] = x
	}
	var lost []string
	h.mu.Lock()
	h.readBegan = began
	if h.failing {
		h.failing = false
		h.graceUntil = time.Now().Add(h.o.Grace)
	}
	if time.Now().Before(h.graceUntil) {
		for org, x := range next {
			if was := h.homes[org]; !x.Alive && was.Alive && x.ReplicaID != "" && x.ReplicaID == was.ReplicaID && x.Epoch == was.Epoch {
				x.Alive = true
				next[org] = x
			}
		}
	}
	for org, at := range h.claimed {
		if at.After(began) {
			next[org] = h.homes[org]
		} else {
			delete(h.claimed, org)
		}
	}
	for org, was := range h.homes {
		if was.ReplicaID == h.me && next[org].ReplicaID != h.me && !h.released {
			lost = append(lost, org)
		}
	}
	var moving []string
	for org, x := range next {
		if x.ReplicaID == h.me && x.Misplaced && !h.released {
			moving = append(moving, org)
		}
	}
	h.homes = next
	h.mu.Unlock()
	sort.Strings(lost)
	for _, org := range lost {
		h.log.Warn("cluster: another replica took an organisation's home", "org", org, "home", next[org].ReplicaID)
		if h.o.Lost != nil {
			h.o.Lost(org)
		}
	}
	sort.Strings(moving)
	for _, org := range moving {
		h.move(ctx, org)
	}
	if h.o.Read != nil {
		h.o.Read()
	}
}

// ReadBegan is when the last reading of the homes that succeeded began;
// zero before one has.
func (h *Homes) ReadBegan() time.Time {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.readBegan
}

// move gives up orgID, which asks for a region where another replica
// runs. The home is released in the database before its workers are sent
// away, so that wherever they reconnect the organisation is claimed in
// its region rather than here again.
func (h *Homes) move(ctx context.Context, orgID string) {
	rctx, cancel := context.WithTimeout(ctx, h.o.Every)
	defer cancel()
	ok, err := h.store.ReleaseHome(rctx, orgID, h.me)
	if err != nil {
		h.log.Warn("cluster: give up an organisation's home for its region", "org", orgID, "err", err)
		return
	}
	h.mu.Lock()
	if x, mine := h.homes[orgID]; mine && x.ReplicaID == h.me {
		x.ReplicaID, x.AdvertiseURL, x.Alive, x.Misplaced = "", "", false, false
		h.homes[orgID] = x
	}
	h.mu.Unlock()
	if !ok {
		return
	}
	h.log.Info("cluster: gave up an organisation's home for its home_region", "org", orgID)
	if h.o.Moved != nil {
		h.o.Moved(orgID)
	}
}

// claimTimeout bounds a claim: a request waits on it.
const claimTimeout = 3 * time.Second

// Where is orgID's home: this replica's, another live replica's, or, when
// it has none that lives, this replica's once it has claimed it. Only the
// claim waits on the database.
func (h *Homes) Where(ctx context.Context, orgID string) (Home, error) {
	h.mu.RLock()
	cur, ok := h.homes[orgID]
	released := h.released
	h.mu.RUnlock()
	switch {
	case ok && cur.ReplicaID == h.me:
		// Its own homes a replica keeps while it cannot reach the
		// database: nothing else could serve them meanwhile.
		return cur, nil
	case ok && cur.ReplicaID != "" && cur.Alive:
		return cur, nil
	case released:
		return cur, ErrReleased
	}
	v, err, _ := h.claim.Do(orgID, func() (any, error) {
		// Those waiting on the claim are not all the caller: it is not
		// abandoned when the caller goes.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
		defer cancel()
		got, err := h.store.ClaimHome(cctx, orgID, h.me)
		if err != nil {
			return Home{}, err
		}
		h.mu.Lock()
		released := h.released
		if !released || got.ReplicaID != h.me {
			h.homes[orgID] = got
			h.claimed[orgID] = time.Now()
		}
		h.mu.Unlock()
		if released && got.ReplicaID == h.me {
			// Claimed as the replica began to stop, perhaps after its
			// release: given back, or the organisation would wait out
			// this replica's registration.
			if _, err := h.store.ReleaseHomes(cctx, h.me); err != nil {
				h.log.Warn("cluster: release a home claimed while stopping", "org", orgID, "err", err)
			}
			return Home{}, ErrReleased
		}
		if got.ReplicaID == h.me {
			h.log.Info("cluster: this replica is now an organisation's home", "org", orgID, "epoch", got.Epoch)
			if h.o.Gained != nil {
				h.o.Gained(orgID)
			}
		}
		return got, nil
	})
	if err != nil {
		return Home{}, err
	}
	return v.(Home), nil
}

// Lookup is orgID's home as this replica knows it, without claiming one.
func (h *Homes) Lookup(orgID string) (Home, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	x, ok := h.homes[orgID]
	return x, ok && x.ReplicaID != ""
}

// Forget drops what this replica knows of orgID's home, which a peer said
// is not where this replica thought: the next Where asks the database.
func (h *Homes) Forget(orgID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.homes[orgID]; ok && cur.ReplicaID != h.me {
		delete(h.homes, orgID)
	}
}

// recheckEvery bounds how often an organisation's unreachable home is
// looked up again in the database: while a dead home's registration
// lasts, every request of the organisation would otherwise ask.
const recheckEvery = 250 * time.Millisecond

// ForgetUnreachable forgets orgID's home, which this replica could not
// reach, so that the next Where asks the database, unless it did so
// within recheckEvery; it reports whether it forgot.
func (h *Homes) ForgetUnreachable(orgID string) bool {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if now.Sub(h.unreachable[orgID]) < recheckEvery {
		return false
	}
	for org, at := range h.unreachable {
		if now.Sub(at) >= recheckEvery {
			delete(h.unreachable, org)
		}
	}
	h.unreachable[orgID] = now
	if cur, ok := h.homes[orgID]; ok && cur.ReplicaID != h.me {
		delete(h.homes, orgID)
	}
	return true
}

// Count is how many organisations this replica is the home of.
func (h *Homes) Count() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for _, x := range h.homes {
		if x.ReplicaID == h.me {
			n++
		}
	}
	return n
}

// Mine lists the organisations this replica is the home of, each with its
// home's epoch.
func (h *Homes) Mine() map[string]int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := map[string]int64{}
	for org, x := range h.homes {
		if x.ReplicaID == h.me {
			out[org] = x.Epoch
		}
	}
	return out
}

// Epoch is orgID's home epoch when this replica is its home.
func (h *Homes) Epoch(orgID string) (int64, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	x, ok := h.homes[orgID]
	if !ok || x.ReplicaID != h.me {
		return 0, false
	}
	return x.Epoch, true
}

// Release gives up this replica's homes, for good: it is stopping. The
// organisations are claimed again by the replica their next request or
// worker reaches.
func (h *Homes) Release(ctx context.Context) {
	h.mu.Lock()
	h.released = true
	for org, x := range h.homes {
		if x.ReplicaID == h.me {
			x.ReplicaID, x.AdvertiseURL, x.Alive = "", "", false
			h.homes[org] = x
		}
	}
	h.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	n, err := h.store.ReleaseHomes(rctx, h.me)
	if err != nil {
		h.log.Warn("cluster: release the organisations' homes; they pass to other replicas when this one's registration lapses", "err", err)
		return
	}
	h.log.Info("cluster: released the organisations' homes", "homes", n)
}
