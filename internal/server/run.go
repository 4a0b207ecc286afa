package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/clock"
	"github.com/svc-dev/svc/internal/cluster"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/relay"
	"github.com/svc-dev/svc/internal/rental"
	"github.com/svc-dev/svc/internal/store"
)

// Files the server keeps in its data directory beside the database.
const (
	AdminKeyFile    = "admin.key"
	WorkerTokenFile = "worker.token"
	SocketFile      = "admin.sock"
)

// Config is what `svc serve` runs with.
type Config struct {
	Addr         string
	DataDir      string
	DrainTimeout time.Duration
	// Hurry, once closed, ends the drain as its timeout would: what is
	// running is answered and its usage written at once (a second
	// interrupt). Nil never hurries.
	Hurry <-chan struct{}
	// StoreWait bounds the wait for the store that another server on the
	// data directory holds: the one this server replaces, draining.
	StoreWait time.Duration
	Build     buildinfo.Info
	Logger    *slog.Logger
	// Fleet tunes routing and worker health; its Logger and Events are set
	// by Run.
	Fleet fleet.Config
	// Timing tunes the relay's clocks (keep-alives, waits, request cap).
	Timing relay.Timing
	// MaxConnections bounds the client connections served at once; the
	// open-file limit is checked against it at start.
	MaxConnections int
	// StallTimeout is how long a client may leave its response unread
	// before it is cut off; 0 is DefaultStallTimeout.
	StallTimeout time.Duration
	// LiveIdle is how long a live transcription waits for the client's
	// next frame; 0 is the documented minute.
	LiveIdle time.Duration
	// UsageRetention is how long usage rows are kept; 0 is
	// DefaultUsageRetention. Totals are kept regardless.
	UsageRetention time.Duration
	// StoreBacklog bounds, in bytes, the records kept in memory while the
	// store cannot write; 0 is bolt.DefaultBacklog. At the bound new
	// inference is refused.
	StoreBacklog int64
	// BodyMemory bounds, in bytes, what the large request bodies held
	// whole take together; 0 is 1 GiB.
	BodyMemory int64
	// MetricsToken, when set, is the bearer token GET /metrics asks for;
	// "" serves the metrics to whoever reaches the address.
	MetricsToken string
	// Rental configures GPU rental.
	Rental RentalConfig
	// Cluster, when its StoreURL is set, makes this server a replica of a
	// cluster on that database; the data directory then holds only the
	// outbox of what is still to be shipped there.
	Cluster ClusterConfig
	// Ready, when set, is called with the public address once the server
	// accepts requests.
	Ready func(addr string)
	// Tracer makes each inference request's span; nil traces nothing.
	// Its provider belongs to the caller, who flushes it after Run.
	Tracer trace.Tracer
}

// RentalConfig is how the gateway rents GPUs (see rental.Config).
type RentalConfig struct {
	Providers []rental.Provider
	// Gateway is the URL rentals' workers dial; "" is this server's own
	// address, which only machines on this host can reach.
	Gateway           string
	Boot              rental.BootOptions
	Rates             map[string]float64
	Margin            float64
	ProvisionDeadline time.Duration
	RentEvery         time.Duration
	Tick              time.Duration
}

// Run serves until ctx ends, then drains in-flight requests for at most
// DrainTimeout and closes the store. It returns once everything it started
// has stopped.
//
// A server started on the data directory of one that runs replaces it:
// it takes over the other's listening socket (handover), waits up to
// StoreWait for the other to drain and close the store, then accepts the
// connections that queued meanwhile, while the workers reconnect.
func Run(ctx context.Context, cfg Config) (err error) {
	log := cfg.Logger
	if err := bolt.EnsureDir(cfg.DataDir); err != nil {
		return err
	}
	taken, err := activated()
	if err != nil {
		return err
	}
	// systemd holds its socket through a stop, and what queues on it
	// starts the next server.
	fromSystemd := taken != nil
	if fromSystemd {
		log.Info("listening on the socket systemd passed", "addr", taken.Addr().String())
	}
	// The database lock comes first: it is what tells a second server on the
	// same data directory to wait before it touches the admin socket or binds
	// the port.
	local, err := bolt.OpenContext(ctx, cfg.DataDir, bolt.Options{LockTimeout: cfg.StoreWait, Waiting: func(path string) {
		if taken == nil {
			taken = takeOverFrom(cfg, log)
		}
		log.Info("waiting for the store: another svc serve holds it, the one this server replaces; it is released when that one has drained",
			"path", path, "store_wait", cfg.StoreWait.String())
	}})
	// A socket taken over is closed on the way out until it is served.
	dropTaken := func() {
		if taken != nil {
			_ = taken.Close()
		}
	}
	if err != nil {
		dropTaken()
		return fmt.Errorf("open store: %w", err)
	}
	defer func() {
		if err := local.Close(); err != nil {
			log.Error("close store", "err", err)
		}
	}()
	// A damaged page is found as the start reads the store: the error
	// that says so, not bbolt's panic.
	defer local.GuardPanic(&err)
	returning, err := local.TakeReturning()
	if err != nil {
		log.Warn("read the workers the previous server had", "err", err)
	}
	var listed map[string][]fleet.Remembered
	if err := local.TakeListed(&listed); err != nil {
		log.Warn("read the workers the previous server listed", "err", err)
	}
	if alive, err := local.TakeAlive(); err != nil {
		log.Warn("read when the previous server was last running", "err", err)
	} else {
		fleet.StillConnectedAt(listed, alive)
	}

	var cl *clusterParts
	var accountStore account.Store = local
	if cfg.Cluster.StoreURL != "" {
		if cl, err = openCluster(ctx, cfg, log); err != nil {
			dropTaken()
			return err
		}
		defer cl.close()
		accountStore = cl.db
	}
	accounts, err := account.New(accountStore, account.Options{Logger: log})
	if err != nil {
		dropTaken()
		return err
	}
	checkOpenFiles(log, cfg.MaxConnections)
	public, err := listenPublic(cfg.Addr, taken)
	if err != nil {
		return err
	}
	// Once the address is ours: a server that cannot listen leaves no
	// organisation or keys behind it.
	if err := bootstrap(cfg.DataDir, accounts, cl != nil, log); err != nil {
		_, _ = public.release(fromSystemd || taken != nil)
		return err
	}
	if cl != nil {
		cl.start(public.Addr())
		public.drainAnswer = errReplicaStopping
	}
	// Closed last but the store: until then a server replacing this one
	// can still take the socket over, and no connection is refused.
	var ho *handover
	defer func() {
		answered, err := public.release(fromSystemd || ho != nil && ho.handedOver())
		if answered > 0 {
			log.Info("answered the connections made during the drain with 503 and Retry-After", "connections", answered)
		}
		if err != nil {
			log.Warn("close the listening socket", "err", err)
		}
	}()
	sock := filepath.Join(cfg.DataDir, SocketFile)
	consoleLn, err := listenSocket(sock, log)
	if err != nil {
		return err
	}
	defer os.Remove(sock)
	ho, err = startHandover(filepath.Join(cfg.DataDir, HandoverFile), public.TCPListener, public.stopRefusing, public.resumeRefusing, log)
	if err != nil {
		_ = consoleLn.Close()
		return err
	}
	defer ho.close()

	writer := local.NewWriter(bolt.WriterOptions{Backlog: cfg.StoreBacklog, Logger: log})
	var (
		events     store.Events = local.Events(writer)
		usageStore store.Usage  = local.Usage(writer)
		powerStore store.Power  = local.Power(writer)
	)
	if cl != nil {
		if events, usageStore, powerStore, err = cl.local(local, writer); err != nil {
			_ = consoleLn.Close()
			return fmt.Errorf("outbox: %w", err)
		}
	}
	power := NewPowerBook(powerStore, log)
	fan := &eventFan{store: events}
	if cl != nil {
		fan.store = fencedEvents{Events: events, fence: cl.fence}
	}
	fcfg := cfg.Fleet
	fcfg.Logger, fcfg.Events, fcfg.Power = log, fan, power
	fcfg.Returning, fcfg.Remembered = returning, listed
	fcfg.LastEvent, fcfg.SettleReturning = events.LastEvent, cl == nil
	fcfg.Approval = approvalGate(accounts)
	fcfg.TokenLive = accounts.WorkerTokenLive
	fl := fleet.New(fcfg)
	rc := cfg.Rental
	gateway := rc.Gateway
	if gateway == "" {
		gateway = "http://" + public.Addr().String()
	}
	// Billing, deadlines and pruning measure elapsed time on the
	// monotonic clock; the watch logs steps of the wall clock.
	clk := clock.System()
	clockWatch := clock.NewWatch(clk, log)
	rentalConfig := rental.Config{Providers: rc.Providers, Ledger: local.Rentals(), Accounts: accounts, Fleet: fl,
		WorkerID: fleet.WorkerID, Gateway: gateway, Boot: rc.Boot, Rates: rc.Rates, Margin: rc.Margin,
		ProvisionDeadline: rc.ProvisionDeadline, RentEvery: rc.RentEvery, Tick: rc.Tick, Clock: clk, Logger: log.With("component", "rental"),
		// The count of rental requests outlives a restart, refused calls
		// included (a cluster keeps it in its database instead).
		Limiter: local.RentLimiter(clk.Now)}
	if cl != nil {
		rentalConfig = cl.rentals(rentalConfig)
	}
	rentals, err := rental.New(rentalConfig)
	if err != nil {
		_ = consoleLn.Close()
		return fmt.Errorf("rentals: %w", err)
	}
	// Before the first worker can connect: the rentals follow their
	// workers through the fleet's events.
	fan.rentals = rentals
	// Uploads are spooled beside the database, on disk rather than a /tmp
	// that may be memory; a file left by a crash is never read again.
	spoolDir := filepath.Join(cfg.DataDir, "uploads")
	if err := os.RemoveAll(spoolDir); err != nil {
		log.Warn("clear the upload spool", "dir", spoolDir, "err", err)
	}
	if err := os.MkdirAll(spoolDir, 0o700); err != nil {
		_ = consoleLn.Close()
		return fmt.Errorf("upload spool: %w", err)
	}
	srv := New(Deps{Logger: log, Build: cfg.Build, Accounts: accounts, Fleet: fl, Events: events, Usage: usageStore,
		Writes: writer, Power: power, Rentals: rentals, Timing: cfg.Timing, MaxConns: cfg.MaxConnections, SpoolDir: spoolDir,
		ClockSteps: clockWatch.Steps, StallTimeout: cfg.StallTimeout, LiveIdle: cfg.LiveIdle, BodyMemory: cfg.BodyMemory, Cluster: cl.serverCluster(),
		MetricsToken: cfg.MetricsToken, Tracer: cfg.Tracer})
	log.Info("listening", "addr", public.Addr().String(), "url", "http://"+public.Addr().String(),
		"admin_socket", sock, "data", cfg.DataDir, "version", cfg.Build.Version)

	// Background work runs until the listeners have drained, so the last
	// requests are still served and accounted for. The writer stops last:
	// the fleet records events as it closes the worker links.
	bgCtx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	writerCtx, stopWriter := context.WithCancel(context.Background())
	defer stopWriter()
	var bg, wg errgroup.Group
	var finishCluster func()
	wg.Go(func() error { return writer.Run(writerCtx) })
	bg.Go(func() error { return accounts.Run(bgCtx, time.Minute) })
	bg.Go(func() error { return fl.Run(bgCtx) })
	bg.Go(func() error { return cutRevokedLinks(bgCtx, accounts.TokensRevoked(), fl) })
	// The fleet as it stands is recorded every few seconds, for a server
	// that starts after a crash, and once more after the drain.
	checkpointCtx, stopCheckpoints := context.WithCancel(context.Background())
	defer stopCheckpoints()
	checkpointsDone := make(chan struct{})
	go func() {
		defer close(checkpointsDone)
		checkpointFleet(checkpointCtx, local, fl, fleetCheckpointEvery, log)
	}()
	pruner := bolt.NewPruner(events, usageStore, powerStore, bolt.Retention{Events: eventRetention, Usage: cfg.usageRetention()}, clk, log)
	bg.Go(func() error { return rentals.Run(bgCtx) })
	if cl == nil {
		bg.Go(func() error { return pruner.Run(bgCtx, time.Hour) })
	} else {
		// The lease and the shipper outlive the drain and the writer's
		// last commit: the leader ships what its last requests recorded,
		// then resigns, and a standby takes over.
		clusterCtx, stopCluster := context.WithCancel(context.Background())
		defer stopCluster()
		var cg errgroup.Group
		cg.Go(func() error { return cl.runLease(clusterCtx) })
		cg.Go(func() error { return cl.runShipper(clusterCtx) })
		cg.Go(func() error { return cl.runHomes(clusterCtx) })
		cl.serve(srv)
		cg.Go(func() error { return cl.runAdoptions(clusterCtx, fl) })
		bg.Go(func() error { return cl.followAccounts(bgCtx, accounts) })
		bg.Go(func() error {
			return cl.lead(bgCtx, term{pruner: pruner, providers: rentalConfig.Providers, accounts: accounts})
		})
		finishCluster = func() {
			cl.flush()
			stopCluster()
			if err := cg.Wait(); err != nil {
				log.Error("cluster", "err", err)
			}
		}
	}
	bg.Go(func() error { return clockWatch.Run(bgCtx, 10*time.Second) })
	outdated := make(chan error, 1)
	var idShared <-chan error
	if cl != nil {
		idShared = cl.lease.Shared()
		bg.Go(func() error {
			if err := cl.watchSchema(bgCtx); err != nil {
				outdated <- err
			}
			return nil
		})
	}

	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.ServePublic(public) }()
	go func() { serveErr <- srv.ServeConsole(consoleLn) }()
	if cfg.Ready != nil {
		cfg.Ready(public.Addr().String())
	}

	running := 2
	var failed error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "drain_timeout", cfg.DrainTimeout.String())
	case failed = <-serveErr:
		running--
		log.Error("listener failed", "err", failed)
	case failed = <-outdated:
		log.Error("cluster: this replica can no longer use the database; draining and stopping", "err", failed)
	case failed = <-idShared:
		log.Error("cluster: draining and stopping", "err", failed)
	}
	// A replica stopping because another registers under its id gives
	// up nothing held under the id: it is the other's.
	if cl != nil && !errors.Is(failed, cluster.ErrIDShared) {
		// Other replicas take the organisations homed here as their
		// requests and workers come; this one refuses what it is
		// forwarded from now on and finishes what it runs, and its
		// workers move as soon as their running requests are done.
		cl.release()
		if n := srv.SendWorkersAway(); n > 0 {
			log.Info("cluster: sent the workers away to their organisations' new homes", "workers", n)
		}
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cancel()
	if cfg.Hurry != nil {
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			select {
			case <-cfg.Hurry:
				log.Warn("stopping now: what is running is cut off")
				cancel()
			case <-drainCtx.Done():
			}
		}()
		defer func() {
			cancel()
			<-watched
		}()
	}
	if err := srv.Shutdown(drainCtx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	for range running {
		if err := <-serveErr; err != nil {
			log.Warn("listener", "err", err)
		}
	}
	// The server that replaces this one expects these workers back, and
	// lists them offline until they reconnect, and those offline already,
	// as this one does.
	stopCheckpoints()
	<-checkpointsDone
	if err := local.SaveFleet(fl.Connected(), fl.Remember(false)); err != nil {
		log.Warn("record the workers", "err", err)
	}
	stopBackground()
	if err := bg.Wait(); err != nil {
		log.Error("background", "err", err)
	}
	srv.Close()
	stopWriter()
	if err := wg.Wait(); err != nil {
		log.Error("final commit", "err", err)
	}
	if finishCluster != nil {
		finishCluster()
	}
	log.Info("stopped")
	return failed
}

// While the server runs, the fleet is recorded within fleetCheckpointEvery
// of a change and at least every fleetCheckpointMaxAge: after a crash,
// the workers connected at the last record are expected back. A fleet of a
// thousand workers records megabytes, which are not written every few
// seconds for nothing; in between, a stamp of a few bytes says every
// fleetCheckpointEvery that the server still runs with that fleet, and
// those workers are listed offline since the last stamp, within a few
// seconds of the crash: their rentals' billing ends there.
const (
	fleetCheckpointEvery  = 5 * time.Second
	fleetCheckpointMaxAge = time.Minute
)

// checkpointFleet records the fleet as it changes until ctx ends.
func checkpointFleet(ctx context.Context, st *bolt.Store, fl *fleet.Fleet, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	var recorded uint64
	var at time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Read before the changes: the fleet unchanged, its workers were
		// linked at now.
		now := time.Now()
		changes := fl.Changes()
		if !failing && changes == recorded && now.Sub(at) < fleetCheckpointMaxAge {
			if err := st.SaveAlive(now); err != nil {
				log.Warn("record the workers for a restart after a crash", "err", err)
				failing = true
			}
			continue
		}
		err := st.SaveFleet(fl.Connected(), fl.Remember(true))
		if err == nil {
			recorded, at = changes, time.Now()
		}
		switch {
		case err != nil && !failing:
			// Once per failure, not every few seconds of a full disk.
			log.Warn("record the workers for a restart after a crash", "err", err)
		case err == nil && failing:
			log.Info("recording the workers for a restart after a crash again")
		}
		failing = err != nil
	}
}

// eventFan gives the fleet's worker events to the store and to the
// rentals, which follow their workers' connections and installs.
type eventFan struct {
	store store.Events
	// rentals is set once the manager exists, which needs the fleet,
	// which needs the fan; before any worker can connect.
	rentals *rental.Manager
}

func (f *eventFan) RecordEvent(orgID string, ev api.WorkerEvent) {
	f.store.RecordEvent(orgID, ev)
	f.rentals.RecordEvent(orgID, ev)
}

// Worker events are kept for 30 days.
const eventRetention = 30 * 24 * time.Hour

// Usage rows are kept for DefaultUsageRetention unless configured, and for
// at least MinUsageRetention. Summary, daily and breakdown read the
// per-day totals, which are never pruned, so a retention shorter than their
// 365-day window shortens only the log. The default keeps the log a little
// longer than that window, so every total it reports can still be traced
// to its rows.
const (
	DefaultUsageRetention = 400 * 24 * time.Hour
	MinUsageRetention     = 24 * time.Hour
)

// usageRetention is how long usage rows are kept.
func (c Config) usageRetention() time.Duration {
	if c.UsageRetention <= 0 {
		return DefaultUsageRetention
	}
	return c.UsageRetention
}

// bootstrap creates the default organisation on an empty store and writes
// its credentials to files only the server's user can read.
func bootstrap(dir string, accounts *account.Service, shared bool, log *slog.Logger) error {
	keyPath := filepath.Join(dir, AdminKeyFile)
	tokenPath := filepath.Join(dir, WorkerTokenFile)
	created, err := accounts.Bootstrap(func(s account.Secrets) error {
		if err := writeSecret(keyPath, s.AdminKey); err != nil {
			return err
		}
		return writeSecret(tokenPath, s.WorkerToken)
	})
	if err != nil {
		return err
	}
	if created {
		// Only where the key is: logs are kept, shipped and read by more
		// people than the file, which only the server's user can read.
		log.Info("first start: created organisation "+account.DefaultOrg+" (plan pro) with owner "+account.DefaultUser+
			"; its unrestricted API key is in admin_key_file",
			"admin_key_file", keyPath, "worker_token_file", tokenPath)
		return nil
	}
	for _, path := range []string{keyPath, tokenPath} {
		tightenSecret(path, log)
	}
	if _, err := os.Stat(keyPath); errors.Is(err, os.ErrNotExist) && shared {
		log.Info("the cluster's database already holds the organisations; the first replica wrote the admin key into its own data directory, or create one with `svc admin keys create`")
	} else if errors.Is(err, os.ErrNotExist) {
		log.Warn("admin key file is missing; create a new key with `svc admin keys create`", "path", keyPath)
	}
	return nil
}

// tightenSecret gives a secret file that others may read back the mode
// 0600 it was written with, and says so: a mode loosened by hand, or by a
// copy, shows the credential to every user of the host.
func tightenSecret(path string, log *slog.Logger) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return
	}
	if err := os.Chmod(path, 0o600); err != nil {
		log.Warn("a secret file others may read could not be made private", "path", path, "mode", fi.Mode().Perm().String(), "err", err)
		return
	}
	log.Warn("a secret file others could read is private again (mode 0600)", "path", path, "was", fi.Mode().Perm().String())
}

// writeSecret writes atomically with mode 0600.
func writeSecret(path, secret string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secret-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.WriteString(secret + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// listenSocket opens the admin socket with mode 0600, for the server's
// own user only. A socket left by a crashed server is removed: holding
// the database lock proves no other server is using it.
func listenSocket(path string, log *slog.Logger) (net.Listener, error) {
	// sun_path is 108 bytes on Linux and 104 on macOS.
	if len(path) >= 104 {
		return nil, fmt.Errorf("admin socket path %s is too long for a unix socket (%d bytes); use a shorter --data path", path, len(path))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale admin socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on admin socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict admin socket: %w", err)
	}
	return &peerListener{Listener: ln, allow: sameUser, log: log}, nil
}

// takeOverFrom takes the listening socket of the server that holds the
// store, when it listens on cfg.Addr: connections then queue for this
// server from the moment that one stops accepting.
func takeOverFrom(cfg Config, log *slog.Logger) *net.TCPListener {
	ln, from, err := takeOver(filepath.Join(cfg.DataDir, HandoverFile), cfg.Addr)
	switch {
	case err != nil:
		log.Warn("could not take over the listening socket; listening once the store is open", "err", err)
	case ln != nil:
		log.Info("took over the listening socket of the server this one replaces; connections wait for this one once it stops accepting",
			"addr", ln.Addr().String(), "from_pid", from.PID)
	case from != nil:
		log.Info("the server this one replaces listens on another address; listening once the store is open",
			"its_addr", from.Addr, "addr", cfg.Addr)
	}
	return ln
}
