package cli

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/pgstore"
)

// storeFlags name a cluster's database the way `svc serve` does.
type storeFlags struct {
	URL          string
	PasswordFile string
}

func (s *storeFlags) add(cmd *cobra.Command, name, help string) {
	cmd.Flags().StringVar(&s.URL, name, "", help)
	cmd.Flags().StringVar(&s.PasswordFile, "store-password-file", "", "a file only this user may read, holding the database's password (env SVC_STORE_PASSWORD_FILE)")
}

// resolve applies the environment and checks the URL.
func (s *storeFlags) resolve(cmd *cobra.Command, f *Factory, name string) error {
	if cmd.Flags().Changed(name) && storeURLHasPassword(s.URL) {
		return usageErrorf("--%s carries a password, which any user can read in the process list; put it in --store-password-file or PGPASSFILE, or pass the URL in SVC_STORE_URL", name)
	}
	if err := applyEnv(cmd, f.Getenv, envFlag{name, "SVC_STORE_URL"}, envFlag{"store-password-file", "SVC_STORE_PASSWORD_FILE"}); err != nil {
		return err
	}
	if s.URL == "" {
		return usageErrorf("name the cluster's database with --%s or SVC_STORE_URL", name)
	}
	return nil
}

func (s *storeFlags) open(ctx context.Context, migrate bool) (*pgstore.Store, error) {
	return pgstore.Open(ctx, pgstore.Options{URL: s.URL, PasswordFile: s.PasswordFile, MaxConns: 2,
		Logger: slog.New(slog.DiscardHandler), Inspect: !migrate})
}

// NewCmdCluster builds `svc cluster`.
func NewCmdCluster(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Look after a cluster of gateway replicas on PostgreSQL",
		Long: `Replicas of svc serve started with the same --store share one PostgreSQL
database and all serve. Each organisation has one home replica, which holds
its workers' links, serves its requests and runs its GPU rentals; the others
forward them there. One replica, the leader, runs the once-only duties
(retention, sweeping the rental providers for orphan machines); another
takes over within --lease-ttl when it dies, as does a new home for the
organisations of a dead one. See docs/cluster.md.`,
		Args: noArgs,
	}
	cmd.AddCommand(newCmdClusterStatus(f), newCmdClusterMigrate(f))
	return cmd
}

func newCmdClusterStatus(f *Factory) *cobra.Command {
	var exp Exporter
	var db storeFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the replicas, the leader, the organisations' homes and what each replica has yet to ship",
		Long: `Read the cluster's state from its database, found as svc serve finds it
(--store or SVC_STORE_URL, and the password from --store-password-file,
SVC_STORE_PASSWORD_FILE or PGPASSFILE): every replica registered, its role,
when it last renewed, how many organisations it is the home of, and the
usage rows, events and power reports in its outbox not yet shipped, and
the peers it could not reach lately; the leader lease with its epoch and
expiry; and each organisation's home, all judged by the database's
clock.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := exp.Prepare(); err != nil {
				return err
			}
			if err := db.resolve(cmd, f, "store"); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
			defer cancel()
			s, err := db.open(ctx, false)
			if err != nil {
				return err
			}
			defer s.Close()
			st, err := clusterStatus(ctx, s)
			if err != nil {
				return err
			}
			if exp.Enabled() {
				return exp.Write(f.IO.Out, st)
			}
			return printClusterStatus(f, st)
		},
	}
	db.add(cmd, "store", "the cluster's PostgreSQL URL (env SVC_STORE_URL)")
	exp.AddFlags(cmd, false)
	return cmd
}

func printClusterStatus(f *Factory, st api.ClusterStatus) error {
	out := f.IO.Out
	switch l := st.Leader; {
	case l == nil:
		fmt.Fprintln(out, "Leader: none yet")
	case l.ReplicaID == "":
		// The last leader resigned its lease; another takes it shortly.
		fmt.Fprintf(out, "Leader: none since epoch %d's resigned\n", l.Epoch)
	default:
		lease := "expires in " + st.DatabaseTime.Sub(l.ExpiresAt).Abs().Round(100*time.Millisecond).String()
		if l.Expired {
			lease = "EXPIRED " + st.DatabaseTime.Sub(l.ExpiresAt).Round(100*time.Millisecond).String() + " ago"
		}
		printf(out, "Leader: %s at %s, epoch %d, lease %s\n", l.ReplicaID, l.AdvertiseURL, l.Epoch, lease)
	}
	fmt.Fprintf(out, "Schema: version %d\n\n", st.SchemaVersion)
	t := newTablePrinter(f.IO, "REPLICA", "ROLE", "REGION", "URL", "VERSION", "SEEN", "HOMES", "OUTBOX", "OLDEST")
	t.shrinkable("URL", "VERSION")
	for _, r := range st.Replicas {
		role := r.Role
		switch {
		case !r.Alive:
			// Its registration keeps the role it last had, which another
			// replica may hold now.
			role = "gone (was " + r.Role + ")"
		case r.Stopping:
			role += " (stopping)"
		}
		t.field(r.ID)
		t.field(role)
		t.field(cmp.Or(r.Region, "-"))
		t.field(r.AdvertiseURL)
		t.field(r.Version)
		t.field(fmtAge(st.DatabaseTime.Sub(r.SeenAt)))
		t.field(strconv.Itoa(r.Homes))
		t.field(strconv.FormatInt(r.OutboxRecords, 10))
		if r.OutboxOldest == nil {
			t.field("-")
		} else {
			t.field(fmtAge(st.DatabaseTime.Sub(*r.OutboxOldest)))
		}
		t.endRow()
	}
	if err := t.render(); err != nil {
		return err
	}
	for _, r := range st.Replicas {
		if peers := unreachableWithHomes(st.Replicas, r.UnreachablePeers); len(peers) > 0 {
			printf(out, "%s cannot reach %s: the organisations homed there get 503 through it\n", r.ID, strings.Join(peers, ", "))
		}
	}
	homeless := 0
	for _, h := range st.Homes {
		if !h.Alive {
			homeless++
		}
	}
	fmt.Fprintf(out, "\nOrganisations: %d with a home, %d without a live one (claimed by the replica their next request or worker reaches)\n",
		len(st.Homes)-homeless, homeless)
	for _, h := range st.Homes {
		if h.Misplaced {
			printf(out, "%s is homed on %s outside its home_region; it moves at that replica's next reading of the homes\n", h.OrgID, h.ReplicaID)
		}
	}
	return nil
}

// clusterStatus reads the cluster's replicas and lease.
func clusterStatus(ctx context.Context, s *pgstore.Store) (api.ClusterStatus, error) {
	rs, lead, err := s.Replicas(ctx)
	if err != nil {
		return api.ClusterStatus{}, err
	}
	homes, err := s.Homes(ctx)
	if err != nil {
		return api.ClusterStatus{}, err
	}
	count := map[string]int{}
	st0 := make([]api.ClusterHome, 0, len(homes))
	for _, h := range homes {
		st0 = append(st0, api.ClusterHome{OrgID: h.OrgID, ReplicaID: h.ReplicaID, Epoch: h.Epoch, Alive: h.Alive, Misplaced: h.Misplaced})
		if h.Alive {
			count[h.ReplicaID]++
		}
	}
	now := lead.DBNow
	st := api.ClusterStatus{DatabaseTime: now, SchemaVersion: s.SchemaVersion(), Replicas: []api.ClusterReplica{}, Homes: st0}
	if lead.Epoch > 0 {
		st.Leader = &api.ClusterLeader{ReplicaID: lead.ReplicaID, AdvertiseURL: lead.AdvertiseURL, Epoch: lead.Epoch,
			ExpiresAt: lead.ExpiresAt, Expired: !lead.ExpiresAt.After(now)}
	}
	for _, r := range rs {
		cr := api.ClusterReplica{ID: r.ID, Role: r.Role, Region: r.Region, Stopping: r.Stopping, AdvertiseURL: r.AdvertiseURL, Version: r.Version,
			StartedAt: r.StartedAt, SeenAt: r.SeenAt, ExpiresAt: r.ExpiresAt, Alive: r.ExpiresAt.After(now),
			OutboxRecords: r.OutboxRecords, Homes: count[r.ID], UnreachablePeers: r.UnreachablePeers}
		if !r.OutboxOldest.IsZero() {
			oldest := r.OutboxOldest
			cr.OutboxOldest = &oldest
		}
		st.Replicas = append(st.Replicas, cr)
	}
	return st, nil
}

// migrateCounts is what `svc cluster migrate` read and what the database
// holds after it, kind by kind.
type migrateCounts struct {
	Kind     string `json:"kind"`
	Source   int    `json:"source"`
	Database int    `json:"database"`
}

func newCmdClusterMigrate(f *Factory) *cobra.Command {
	var exp Exporter
	var db storeFlags
	var dataDir string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Copy a single host's store into a cluster's database",
		Long: `Copy everything a single svc serve keeps in its data directory into the
PostgreSQL database named by --to (or SVC_STORE_URL): organisations, users,
members, keys, worker tokens and settings; the usage log and its totals;
worker events; power history; the rental ledger. Stop svc serve first: the
store is read while nothing writes it.

The counts of each kind in the data directory and in the database are
printed side by side, and the command fails when they differ. Records that
are already in the database are not copied twice, so it may be run again.
Then start the replicas with --store.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := exp.Prepare(); err != nil {
				return err
			}
			if err := db.resolve(cmd, f, "to"); err != nil {
				return err
			}
			dir, err := resolveDataDir(dataDir, f.Getenv)
			if err != nil {
				return err
			}
			counts, err := migrateStore(cmd.Context(), dir, &db)
			if err != nil {
				return err
			}
			if exp.Enabled() {
				if err := exp.Write(f.IO.Out, counts); err != nil {
					return err
				}
			} else {
				t := newTablePrinter(f.IO, "KIND", "DATA DIRECTORY", "DATABASE")
				for _, c := range counts {
					t.row(c.Kind, strconv.Itoa(c.Source), strconv.Itoa(c.Database))
				}
				if err := t.render(); err != nil {
					return err
				}
			}
			for _, c := range counts {
				if c.Source != c.Database {
					return fmt.Errorf("the database holds %d %s where the data directory has %d: the copy is not whole", c.Database, c.Kind, c.Source)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data", "", dataFlagHelp)
	db.add(cmd, "to", "the cluster's PostgreSQL URL (env SVC_STORE_URL)")
	exp.AddFlags(cmd, false)
	return cmd
}

// migrateStore copies the bbolt store in dir into the database.
func migrateStore(ctx context.Context, dir string, db *storeFlags) ([]migrateCounts, error) {
	if _, err := os.Stat(filepath.Join(dir, bolt.FileName)); err != nil {
		return nil, fmt.Errorf("no svc store in %s: %w", dir, err)
	}
	src, err := bolt.OpenContext(ctx, dir, bolt.Options{})
	if err != nil {
		return nil, fmt.Errorf("%w; stop svc serve before migrating its store", err)
	}
	defer src.Close()
	dst, err := db.open(ctx, true)
	if err != nil {
		return nil, err
	}
	defer dst.Close()

	recs, err := src.LoadAccounts()
	if err != nil {
		return nil, err
	}
	if err := dst.ImportAccounts(ctx, recs); err != nil {
		return nil, err
	}
	rentals, err := src.Rentals().All()
	if err != nil {
		return nil, err
	}
	if _, err := dst.ImportRentals(ctx, rentals); err != nil {
		return nil, err
	}
	if _, err := dst.ImportLogs(ctx, src); err != nil {
		return nil, err
	}

	got, err := dst.LoadAccounts()
	if err != nil {
		return nil, err
	}
	storedRentals, err := dst.CountRentals(ctx)
	if err != nil {
		return nil, err
	}
	have, err := src.Inventory()
	if err != nil {
		return nil, err
	}
	copied, err := dst.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	return []migrateCounts{
		{"organisations", len(recs.Orgs), len(got.Orgs)},
		{"users", len(recs.Users), len(got.Users)},
		{"members", len(recs.Members), len(got.Members)},
		{"api keys", len(recs.Keys), len(got.Keys)},
		{"worker tokens", len(recs.WorkerTokens), len(got.WorkerTokens)},
		{"rentals", len(rentals), storedRentals},
		{"usage rows", have.UsageRows, copied.UsageRows},
		{"usage day totals", have.UsageDays, copied.UsageDays},
		{"usage model totals", have.UsageModels, copied.UsageModels},
		{"usage worker totals", have.UsageWorkers, copied.UsageWorkers},
		{"worker events", have.Events, copied.Events},
		{"power buckets", have.PowerBuckets, copied.PowerBuckets},
		{"power workers", have.PowerWorkers, copied.PowerWorkers},
	}, nil
}

// unreachableWithHomes is the URLs of urls that matter: a replica gone and
// homing nothing (its organisations were claimed by others) is unreachable
// by every peer until its registration lapses, and says nothing of them.
func unreachableWithHomes(replicas []api.ClusterReplica, urls []string) []string {
	var out []string
	for _, u := range urls {
		moot := false
		for _, r := range replicas {
			if r.AdvertiseURL == u {
				moot = !r.Alive && r.Homes == 0
				break
			}
		}
		if !moot {
			out = append(out, u)
		}
	}
	return out
}
