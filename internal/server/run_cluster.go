package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/cluster"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/netguard"
	"github.com/svc-dev/svc/internal/pgstore"
	"github.com/svc-dev/svc/internal/rental"
	"github.com/svc-dev/svc/internal/store"
)

// ClusterConfig makes `svc serve` a replica of a cluster.
type ClusterConfig struct {
	// StoreURL is the PostgreSQL database the replicas share
	// (postgres://…); "" runs a single host on bbolt.
	StoreURL string
	// PasswordFile holds the database password, so that it is never on a
	// command line.
	PasswordFile string
	// AdvertiseURL is where the other replicas send workers to this one
	// when it leads; "" is http:// and the public address, with the
	// host name for an unspecified address.
	AdvertiseURL string
	// Region is where the replica runs, for the organisations whose
	// home_region names it; "" for none.
	Region string
	// LeaseTTL is how long the leader's lease lasts unless renewed; 0 is
	// DefaultLeaseTTL.
	LeaseTTL time.Duration
}

// DefaultLeaseTTL bounds how long a dead leader holds the cluster.
const DefaultLeaseTTL = 10 * time.Second

// ReplicaIDFile keeps a replica's id in its data directory, so that it is
// the same replica across restarts.
const ReplicaIDFile = "replica.id"

// clusterParts are what a replica runs beyond a single host's server.
type clusterParts struct {
	cfg ClusterConfig
	// usageRetention is the replica's, for its registration.
	usageRetention time.Duration
	log            *slog.Logger
	id             string
	version        string
	db             *pgstore.Store
	secret         string
	ship           *pgstore.Shipper
	events         *pgstore.Events
	// fence records the fleet's worker events of the organisations this
	// replica is the home of.
	fence *cluster.Fence
	lease *cluster.Lease
	homes *cluster.Homes
	// leave sends away the workers of an organisation homed elsewhere
	// now; set once the server exists.
	leave atomic.Pointer[func(orgID string)]
	// moved sends away the workers of an organisation this replica gave
	// up for its home_region.
	moved atomic.Pointer[func(orgID string)]
	// peers reports the peers the server could not reach lately; set
	// once the server exists.
	peers atomic.Pointer[func() []string]
	// gained holds the organisations this replica claimed, whose last
	// home's workers runAdoptions lists here.
	gained chan string
}

// openCluster connects to the cluster's database.
func openCluster(ctx context.Context, cfg Config, log *slog.Logger) (*clusterParts, error) {
	id, err := replicaID(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	db, err := pgstore.Open(ctx, pgstore.Options{URL: cfg.Cluster.StoreURL, PasswordFile: cfg.Cluster.PasswordFile, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("open the cluster's database: %w", err)
	}
	secret, err := db.ClusterSecret(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	if cfg.Cluster.LeaseTTL <= 0 {
		cfg.Cluster.LeaseTTL = DefaultLeaseTTL
	}
	log.Info("cluster: replica on a shared database", "replica_id", id, "lease_ttl", cfg.Cluster.LeaseTTL.String())
	return &clusterParts{cfg: cfg.Cluster, usageRetention: cfg.usageRetention(), log: log, id: id, version: cfg.Build.Version, db: db,
		secret: secret, gained: make(chan string, 1024)}, nil
}

// replicaID reads the replica's id from the data directory, making one
// the first time.
func replicaID(dir string) (string, error) {
	path := filepath.Join(dir, ReplicaIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read the replica id: %w", err)
	}
	var raw [6]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	host, _ := os.Hostname()
	id := "r_" + hex.EncodeToString(raw[:])
	if host != "" {
		id = host + "-" + hex.EncodeToString(raw[:3])
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the replica id: %w", err)
	}
	return id, nil
}

func (c *clusterParts) close() { c.db.Close() }

// local is the replica's usage, event and power stores: written to the
// outbox in the local store, shipped to the database and read from it.
func (c *clusterParts) local(db *bolt.Store, w *bolt.Writer) (store.Events, store.Usage, store.Power, error) {
	box, err := db.Outbox(w)
	if err != nil {
		return nil, nil, nil, err
	}
	l := c.db.Local(box, c.log)
	c.ship, c.events = l.Shipper, l.Events
	c.fence = cluster.NewFence(l.Events, c.id, cluster.FreshView(c.lease, c.homes), c.homes.Lookup, c.log)
	return l.Events, l.Usage, l.Power, nil
}

// fencedEvents is an event store whose writes pass through the fence.
type fencedEvents struct {
	store.Events
	fence *cluster.Fence
}

func (e fencedEvents) RecordEvent(orgID string, ev api.WorkerEvent) { e.fence.RecordEvent(orgID, ev) }

// start makes the replica's lease once its public address is known.
func (c *clusterParts) start(public net.Addr) {
	url := c.cfg.AdvertiseURL
	if url == "" {
		url = advertiseURL(public)
	}
	if unreachableAdvert(public, url) {
		c.log.Warn("cluster: this replica listens on loopback alone, but advertises another address: the other replicas and the workers cannot reach it there unless a proxy on this host forwards it",
			"listen", public.String(), "advertise_url", url)
	}
	c.lease = cluster.New(leaseStore{c.db}, cluster.Replica{ID: c.id, AdvertiseURL: url, Region: c.cfg.Region, Version: c.version,
		StartedAt:      time.Now().Truncate(time.Microsecond), // as the database keeps it
		UsageRetention: c.usageRetention},
		cluster.Options{TTL: c.cfg.LeaseTTL, Logger: c.log, Outbox: c.outbox, Unreachable: c.unreachable})
	c.homes = cluster.NewHomes(homeStore{c.db}, c.id, cluster.HomesOptions{Every: c.lease.Every(), Grace: c.lease.TTL(), Logger: c.log, Listen: c.db.ListenHomes,
		Lost: func(org string) {
			if l := c.leave.Load(); l != nil {
				(*l)(org)
			}
		},
		Moved: func(org string) {
			if m := c.moved.Load(); m != nil {
				(*m)(org)
			}
		},
		Read: func() {
			// Set before the homes are first read.
			if c.fence != nil {
				c.fence.Settle()
			}
		},
		Gained: func(org string) {
			select {
			case c.gained <- org:
			default:
				c.log.Warn("cluster: too many organisations claimed at once to list their last homes' workers", "org", org)
			}
		}})
	c.log.Info("cluster: advertising this replica", "url", url)
}

// unreachableAdvert reports a listener on a loopback address with an
// advertised URL naming a host that is not one.
func unreachableAdvert(listen net.Addr, advertised string) bool {
	tcp, ok := listen.(*net.TCPAddr)
	if !ok || tcp.IP == nil || !tcp.IP.IsLoopback() {
		return false
	}
	u, err := url.Parse(advertised)
	return err == nil && !netguard.LoopbackHost(u.Hostname())
}

// advertiseURL is http:// and addr, with the host's name for an
// unspecified address.
func advertiseURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	host := tcp.IP.String()
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

// unreachable is the peers the server could not reach lately; none until
// the server exists.
func (c *clusterParts) unreachable() []string {
	if f := c.peers.Load(); f != nil {
		return (*f)()
	}
	return nil
}

func (c *clusterParts) outbox() (int64, time.Time) {
	if c.ship == nil {
		return 0, time.Time{}
	}
	n, oldest := c.ship.Depth()
	return int64(n), oldest
}

// serverCluster is what the server is told of the cluster; nil on a
// single host.
func (c *clusterParts) serverCluster() *Cluster {
	if c == nil {
		return nil
	}
	return &Cluster{ReplicaID: c.id, Lease: c.lease, Homes: c.homes, Outbox: c.outbox, Secret: c.secret}
}

// rentals is a replica's rental configuration: it runs the rentals of the
// organisations it is the home of, writing them under each home's epoch,
// on the database's clock, with the rental limit kept in the database.
func (c *clusterParts) rentals(rc rental.Config) rental.Config {
	rc.Homes = c.homes
	rc.Ledger = c.db.Rentals(c.id)
	rc.Limiter = c.db
	rc.Clock = c.db.Clock()
	return rc
}

// serve wires the server in: the workers of an organisation whose home
// moved elsewhere are sent away.
func (c *clusterParts) serve(srv *Server) {
	leave := srv.LeaveOrg
	c.leave.Store(&leave)
	moved := srv.SendOrgAway
	c.moved.Store(&moved)
	peers := srv.UnreachablePeers
	c.peers.Store(&peers)
}

func (c *clusterParts) runHomes(ctx context.Context) error { return c.homes.Run(ctx) }

// adoptFor is how far back a new home looks for its organisation's
// workers: as long as a fleet lists one offline.
const adoptFor = 24 * time.Hour

// runAdoptions lists, for each organisation this replica claims, the
// workers its last home listed that are not linked here, read from the
// worker events (fleet.Adopt): a home that died took its list with it,
// and a worker that died with it would otherwise vanish from the listing,
// its events ending at a connect.
func (c *clusterParts) runAdoptions(ctx context.Context, fl *fleet.Fleet) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case org := <-c.gained:
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			now := time.Now()
			hist, err := c.events.RecentWorkers(qctx, org, now.Add(-adoptFor))
			cancel()
			if err != nil {
				c.log.Warn("cluster: read the workers of an organisation's last home", "org", org, "err", err)
				continue
			}
			ws, back := adoptedWorkers(hist, now)
			fl.Adopt(org, ws, back, now)
		}
	}
}

// adoptedWorkers makes the fleet's record of each worker from its
// history: offline since its disconnect, or, for one still connected as
// far as the events say (to the home that died), since now, and awaited
// back. The release, concurrency and engines are its last connect's. Its
// models are left out: the events name them without their capabilities,
// and a model listed without them would be answered as one that cannot
// chat, where a request should hear that no worker is online.
func adoptedWorkers(hist map[string]pgstore.WorkerHistory, now time.Time) (ws []fleet.Remembered, back []string) {
	for id, h := range hist {
		if h.Last.EventType == api.EventApprovalPending {
			continue // never served, as Remember leaves it out
		}
		r := fleet.Remembered{ID: id, Name: h.Last.WorkerName, LastSeen: h.Last.CreatedAt, OfflineSince: h.Last.CreatedAt}
		if h.Last.EventType != api.EventDisconnected {
			r.OfflineSince = now
			back = append(back, id)
		}
		meta := h.Connected.Metadata
		r.Version, _ = meta["version"].(string)
		if n, ok := meta["max_concurrent"].(float64); ok {
			r.MaxConcurrent = int(n)
		}
		if raw, err := json.Marshal(meta["engines"]); err == nil {
			_ = json.Unmarshal(raw, &r.Engines)
		}
		if private, ok := meta["private_inference"].(bool); ok {
			r.Private = &private
			if raw, err := json.Marshal(meta["features"]); err == nil {
				_ = json.Unmarshal(raw, &r.Features)
			}
		}
		ws = append(ws, r)
	}
	return ws, back
}

// release gives up the replica's homes: it is stopping.
func (c *clusterParts) release() { c.homes.Release(context.Background()) }

func (c *clusterParts) runLease(ctx context.Context) error { return c.lease.Run(ctx) }

// watchSchema checks, once a lease period, that this build can still use
// the database, and returns the error when a newer replica migrated it
// past that: what this replica would write or read from then on is in a
// shape it does not know. It returns nil when ctx ends.
func (c *clusterParts) watchSchema(ctx context.Context) error {
	t := time.NewTicker(c.lease.Every())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, c.lease.Every())
		err := c.db.Usable(qctx)
		cancel()
		if errors.Is(err, pgstore.ErrSchemaTooNew) {
			return err
		}
	}
}

func (c *clusterParts) runShipper(ctx context.Context) error { return c.ship.Run(ctx) }

// flushTimeout bounds how long a stopping replica waits to ship its
// outbox; what is left ships when it starts again.
const flushTimeout = 10 * time.Second

// flush ships what the outbox holds, once the writer's last commit is in.
func (c *clusterParts) flush() {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if err := c.ship.Sync(ctx); err != nil {
		n, _ := c.ship.Depth()
		c.log.Warn("cluster: the outbox could not be shipped before stopping; it ships when this replica starts again", "records", n, "err", err)
	}
}

// accountResync is how often a replica reloads the accounts whatever it
// was told: a notification missed while its listening connection was down
// is caught within it.
const accountResync = 30 * time.Second

// followAccounts reloads the accounts when another replica changes them.
func (c *clusterParts) followAccounts(ctx context.Context, accounts *account.Service) error {
	return accounts.Follow(ctx, accountResync, c.db.ListenAccounts)
}

// term is what a leader runs only while it leads.
type term struct {
	pruner *bolt.Pruner
	// providers are swept for machines no rental accounts for.
	providers []rental.Provider
	accounts  *account.Service
}

// leading is one term of leadership: its epoch, and its duties' stop.
type leading struct {
	epoch int64
	stop  context.CancelFunc
	done  *errgroup.Group
}

// termRetry is how soon a leader tries again to begin its term when the
// database did not let it.
const termRetry = 2 * time.Second

// sweepEvery is how often the leader looks for machines at the providers
// that no rental accounts for (a placement whose answer was lost, a
// rental's machine its home failed to destroy).
const sweepEvery = 10 * time.Minute

// lead begins a term whenever the replica takes the lease (or it is given
// a new epoch) and ends it when another replica leads, until ctx ends.
func (c *clusterParts) lead(ctx context.Context, t term) error {
	var cur *leading
	end := func() {
		if cur == nil {
			return
		}
		cur.stop()
		if err := cur.done.Wait(); err != nil {
			c.log.Warn("cluster: end of term", "err", err)
		}
		cur = nil
	}
	defer end()
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	for {
		changed := c.lease.Changed()
		st := c.lease.State()
		switch {
		case st.Leading && (cur == nil || cur.epoch != st.Epoch):
			end()
			var err error
			if cur, err = c.begin(ctx, t, st.Epoch); err != nil {
				c.log.Warn("cluster: begin leading; retrying", "epoch", st.Epoch, "err", err)
				retry.Reset(termRetry)
			}
		case !st.Leading && cur != nil:
			end()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-retry.C:
		}
	}
}

// begin starts a term's duties, the cluster's once-only ones: the
// accounts as the database holds them now, pruning, and sweeping the
// providers for machines no rental accounts for. Each organisation's
// rentals run at its home.
func (c *clusterParts) begin(ctx context.Context, t term, epoch int64) (*leading, error) {
	if err := t.accounts.Reload(); err != nil {
		return nil, fmt.Errorf("reload the accounts: %w", err)
	}
	tctx, stop := context.WithCancel(ctx)
	var g errgroup.Group
	g.Go(func() error { return t.pruner.Run(tctx, time.Hour) })
	if len(t.providers) > 0 {
		g.Go(func() error { return c.sweep(tctx, t.providers) })
	}
	c.log.Info("cluster: leading", "epoch", epoch)
	return &leading{epoch: epoch, stop: stop, done: &g}, nil
}

// sweep runs rental.Sweep at the start of a term and every sweepEvery.
func (c *clusterParts) sweep(ctx context.Context, providers []rental.Provider) error {
	ledger := c.db.Rentals(c.id)
	log := c.log.With("component", "rental")
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		rental.Sweep(ctx, providers, ledger, log)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// leaseStore is the database's lease table as package cluster asks for it.
type leaseStore struct{ db *pgstore.Store }

func (l leaseStore) Beat(ctx context.Context, me cluster.Replica, ttl time.Duration, want bool) (cluster.Leader, error) {
	lead, err := l.db.Beat(ctx, pgstore.Replica{ID: me.ID, AdvertiseURL: me.AdvertiseURL, Region: me.Region, Version: me.Version, Role: me.Role,
		OutboxRecords: me.OutboxRecords, OutboxOldest: me.OutboxOldest, UnreachablePeers: me.UnreachablePeers, StartedAt: me.StartedAt,
		UsageRetention: me.UsageRetention}, ttl, want)
	if err != nil {
		return cluster.Leader{}, err
	}
	out := cluster.Leader{ReplicaID: lead.ReplicaID, AdvertiseURL: lead.AdvertiseURL, Epoch: lead.Epoch,
		ExpiresAt: lead.ExpiresAt, DBNow: lead.DBNow, PeerTTLs: lead.PeerTTLs, PeerRetentions: lead.PeerRetentions}
	if d := lead.Displaced; d != nil {
		out.Displaced = &cluster.Replica{ID: d.ID, AdvertiseURL: d.AdvertiseURL, StartedAt: d.StartedAt}
	}
	return out, nil
}

func (l leaseStore) Resign(ctx context.Context, replicaID string, epoch int64) error {
	return l.db.Resign(ctx, replicaID, epoch)
}

// homeStore is the database's homes as package cluster asks for them.
type homeStore struct{ db *pgstore.Store }

func (h homeStore) ClaimHome(ctx context.Context, orgID, replicaID string) (cluster.Home, error) {
	x, err := h.db.ClaimHome(ctx, orgID, replicaID)
	return cluster.Home(x), err
}

func (h homeStore) Homes(ctx context.Context) ([]cluster.Home, error) {
	xs, err := h.db.Homes(ctx)
	out := make([]cluster.Home, len(xs))
	for i, x := range xs {
		out[i] = cluster.Home(x)
	}
	return out, err
}

func (h homeStore) ReleaseHome(ctx context.Context, orgID, replicaID string) (bool, error) {
	return h.db.ReleaseHome(ctx, orgID, replicaID)
}

func (h homeStore) ReleaseHomes(ctx context.Context, replicaID string) (int64, error) {
	return h.db.ReleaseHomes(ctx, replicaID)
}
