package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/engine/sim"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/money"
	"github.com/svc-dev/svc/internal/power"
	"github.com/svc-dev/svc/internal/relay"
	gpurent "github.com/svc-dev/svc/internal/rental"
	"github.com/svc-dev/svc/internal/rental/lambda"
	"github.com/svc-dev/svc/internal/rental/local"
	"github.com/svc-dev/svc/internal/server"
	"github.com/svc-dev/svc/internal/worker"
)

// ServeOptions are the flags of `svc serve`.
type ServeOptions struct {
	Addr         string
	DataDir      string
	DrainTimeout time.Duration
	// StoreWait bounds the wait for the store of the server this one
	// replaces; 0 is DrainTimeout plus storeWaitMargin.
	StoreWait time.Duration
	// StartGrace bounds how long requests wait for the workers the
	// replaced server had to reconnect.
	StartGrace  time.Duration
	QueueHold   time.Duration
	WorkerGrace time.Duration
	// WorkerConnectRate is the worker links an organisation opens a
	// second after a burst.
	WorkerConnectRate float64
	LogLevel          string
	LogFormat         string
	// Demo runs a simulated worker in the same process.
	Demo bool
	// Timing shortens the relay's and live sessions' clocks; hidden
	// flags, for tests.
	KeepAliveAfter time.Duration
	KeepAliveEvery time.Duration
	LiveIdle       time.Duration
	PprofAddr      string
	// OTLPEndpoint is where traces go; "" leaves it to the OTEL_ variables.
	OTLPEndpoint string

	MaxConnections int
	// StallTimeout is how long a client may leave its response unread.
	StallTimeout time.Duration
	// UsageRetention is how long usage rows are kept.
	UsageRetention time.Duration
	// Store is the cluster's PostgreSQL database; "" runs a single host.
	Store             string
	StorePasswordFile string
	AdvertiseURL      string
	Region            string
	LeaseTTL          time.Duration
	// StoreBacklogMB bounds the records waiting while the store cannot
	// write, MiB.
	StoreBacklogMB int
	// BodyMemoryMB bounds the large request bodies held whole, MiB.
	BodyMemoryMB int
	// MetricsTokenFile holds the bearer token GET /metrics asks for.
	MetricsTokenFile string

	// GPU rental.
	RentalProviders []string
	PublicURL       string
	RentalWorkerURL string
	RentalUSDGBP    float64
	RentalMargin    float64
	RentalDeadline  time.Duration
	LocalCapacity   map[string]int
	LocalEngine     string
	LambdaSSHKey    string
	// Hidden, for tests: the Lambda API's URL, the rental clocks.
	LambdaURL     string
	RentalTick    time.Duration
	RentalEvery   time.Duration
	LocalBootStep time.Duration
}

// NewCmdServe builds `svc serve`; runF replaces the server in tests.
func NewCmdServe(f *Factory, runF func(context.Context, *ServeOptions) error) *cobra.Command {
	opts := &ServeOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Long: `Run the OpenAI-compatible gateway on --addr, with its database and admin
socket in the data directory.

On first start with an empty data directory it creates the organisation
'default' (plan pro) with owner 'admin', writes an unrestricted API key to
<data>/admin.key and a worker token to <data>/worker.token (both mode 0600),
and logs where they are, never the secrets. Later starts reuse them.

SIGINT, SIGTERM or SIGHUP (unless started under nohup) stops accepting
connections, lets in-flight requests finish for up to --drain-timeout, then
closes the database. A second SIGINT stops it at once.

To restart or upgrade without refusing a connection, start the new server
with the same --data and --addr, then send SIGTERM to the old one (or the
other way round, within the drain). The new one takes over the old one's
listening socket, waits for it to drain and release the database (for up to
--store-wait), then serves the connections that queued meanwhile; requests
wait up to --start-grace for the old one's workers to reconnect.

--demo also runs a worker on the built-in simulator in the same process, so
a chat completion can be sent at once; it prints the base URL, where the key
is and a ready curl command.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := applyEnv(cmd, f.Getenv,
				envFlag{"addr", "SVC_ADDR"}, envFlag{"data", "SVC_DATA"},
				envFlag{"drain-timeout", "SVC_DRAIN_TIMEOUT"}, envFlag{"queue-hold", "SVC_QUEUE_HOLD"},
				envFlag{"store-wait", "SVC_STORE_WAIT"}, envFlag{"start-grace", "SVC_START_GRACE"},
				envFlag{"worker-grace", "SVC_WORKER_GRACE"}, envFlag{"worker-connect-rate", "SVC_WORKER_CONNECT_RATE"},
				envFlag{"log-level", "SVC_LOG_LEVEL"}, envFlag{"log-format", "SVC_LOG_FORMAT"},
				envFlag{"public-url", "SVC_PUBLIC_URL"}, envFlag{"max-connections", "SVC_MAX_CONNECTIONS"},
				envFlag{"usage-retention", "SVC_USAGE_RETENTION"}, envFlag{"store-backlog-mb", "SVC_STORE_BACKLOG_MB"},
				envFlag{"stall-timeout", "SVC_STALL_TIMEOUT"}, envFlag{"body-memory-mb", "SVC_BODY_MEMORY_MB"},
				envFlag{"store-password-file", "SVC_STORE_PASSWORD_FILE"}, envFlag{"advertise-url", "SVC_ADVERTISE_URL"},
				envFlag{"lease-ttl", "SVC_LEASE_TTL"}, envFlag{"region", "SVC_REGION"},
				envFlag{"metrics-token-file", "SVC_METRICS_TOKEN_FILE"})
			if err != nil {
				return err
			}
			// A password on the command line is in every process listing:
			// the URL comes from the flag or the environment, the password
			// from a file.
			if cmd.Flags().Changed("store") && storeURLHasPassword(opts.Store) {
				return usageErrorf("--store carries a password, which any user can read in the process list; put it in --store-password-file or PGPASSFILE, or pass the URL in SVC_STORE_URL")
			}
			if err := applyEnv(cmd, f.Getenv, envFlag{"store", "SVC_STORE_URL"}); err != nil {
				return err
			}
			if opts.Store != "" && !strings.HasPrefix(opts.Store, "postgres://") && !strings.HasPrefix(opts.Store, "postgresql://") {
				return usageErrorf("--store must be a postgres:// URL, got %q", redactURL(opts.Store))
			}
			if opts.Region != "" && !api.ValidRegion(opts.Region) {
				return usageErrorf("--region must be 1 to 64 lower-case letters, digits, '.', '-' and '_', got %q", opts.Region)
			}
			// The settings of a cluster's replica mean nothing without the
			// cluster: one given on a single host is a mistake to say, not
			// to ignore.
			for _, c := range []struct {
				flag string
				set  bool
			}{
				{"region", opts.Region != ""}, {"advertise-url", opts.AdvertiseURL != ""},
				{"store-password-file", opts.StorePasswordFile != ""},
				{"lease-ttl", cmd.Flags().Changed("lease-ttl") || f.Getenv("SVC_LEASE_TTL") != ""},
			} {
				if c.set && opts.Store == "" {
					return usageErrorf("--%s is a setting of a cluster's replica: it needs --store (or SVC_STORE_URL)", c.flag)
				}
			}
			if err := checkListenAddr(opts.Addr); err != nil {
				return err
			}
			if opts.LeaseTTL < 3*time.Second {
				return usageErrorf("--lease-ttl must be at least 3s, got %s", opts.LeaseTTL)
			}
			if opts.DataDir, err = resolveDataDir(opts.DataDir, f.Getenv); err != nil {
				return err
			}
			if opts.MaxConnections < 1 {
				return usageErrorf("--max-connections must be at least 1, got %d", opts.MaxConnections)
			}
			if opts.StoreBacklogMB < 1 {
				return usageErrorf("--store-backlog-mb must be at least 1, got %d", opts.StoreBacklogMB)
			}
			if opts.BodyMemoryMB < 1 {
				return usageErrorf("--body-memory-mb must be at least 1, got %d", opts.BodyMemoryMB)
			}
			if !(opts.WorkerConnectRate > 0) {
				return usageErrorf("--worker-connect-rate must be above 0, got %g", opts.WorkerConnectRate)
			}
			if opts.StallTimeout < time.Second {
				return usageErrorf("--stall-timeout must be at least 1s, got %s", opts.StallTimeout)
			}
			for _, d := range []struct {
				flag string
				v    time.Duration
			}{
				{"drain-timeout", opts.DrainTimeout}, {"queue-hold", opts.QueueHold}, {"worker-grace", opts.WorkerGrace},
				{"store-wait", opts.StoreWait}, {"start-grace", opts.StartGrace},
			} {
				if d.v < 0 {
					return usageErrorf("--%s may not be negative, got %s", d.flag, d.v)
				}
			}
			if opts.PublicURL != "" && !httpURL(opts.PublicURL) {
				return usageErrorf("--public-url must be an http(s)://host:port URL, which rented machines dial, got %q", opts.PublicURL)
			}
			if opts.UsageRetention < server.MinUsageRetention {
				return usageErrorf("--usage-retention must be at least 1d, got %s", daysValue{&opts.UsageRetention})
			}
			if err := checkRentalFlags(opts, f.Getenv); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runServe(cmd.Context(), f, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Addr, "addr", "127.0.0.1:8080", "address to listen on (env SVC_ADDR)")
	fl.StringVar(&opts.DataDir, "data", "", dataFlagHelp)
	fl.DurationVar(&opts.DrainTimeout, "drain-timeout", 30*time.Second, "how long in-flight requests may take to finish on shutdown (env SVC_DRAIN_TIMEOUT)")
	fl.DurationVar(&opts.StoreWait, "store-wait", 0, "how long to wait for another svc serve on the data directory, the one this replaces, to drain and release the database; 0 is --drain-timeout plus 15s (env SVC_STORE_WAIT)")
	fl.DurationVar(&opts.StartGrace, "start-grace", 10*time.Second, "how long after a restart requests wait for the workers the replaced server had to reconnect (env SVC_START_GRACE)")
	fl.DurationVar(&opts.QueueHold, "queue-hold", 2*time.Second, "how long a request waits for a busy model before a 429 (env SVC_QUEUE_HOLD)")
	fl.DurationVar(&opts.WorkerGrace, "worker-grace", 15*time.Second, "how long a dropped worker may take to reconnect before its requests fail or move (env SVC_WORKER_GRACE)")
	fl.Float64Var(&opts.WorkerConnectRate, "worker-connect-rate", 20, "worker links an organisation may open a second, after a burst as large as its fleet (at least 1,024); more are answered 429 with Retry-After, which workers wait out (env SVC_WORKER_CONNECT_RATE)")
	fl.StringVar(&opts.LogLevel, "log-level", "info", "debug, info, warn or error (env SVC_LOG_LEVEL)")
	fl.StringVar(&opts.LogFormat, "log-format", "auto", "text, json, or auto: text on a terminal, JSON otherwise (env SVC_LOG_FORMAT)")
	fl.BoolVar(&opts.Demo, "demo", false, "also run a simulated worker in this process")
	fl.IntVar(&opts.MaxConnections, "max-connections", 10000, "client connections served at once; the open-file limit is checked against it at start (env SVC_MAX_CONNECTIONS)")
	fl.DurationVar(&opts.StallTimeout, "stall-timeout", server.DefaultStallTimeout, "how long a client may leave its response unread (taking under 16 KiB of it) before it is cut off: a stream then ends as a 499, while a whole answer already made keeps its status (env SVC_STALL_TIMEOUT)")
	opts.UsageRetention = server.DefaultUsageRetention
	fl.Var(daysValue{&opts.UsageRetention}, "usage-retention", "how long usage log rows are kept, in days (400d) or as a duration, at least 1d; totals are kept for good (env SVC_USAGE_RETENTION)")
	fl.StringVar(&opts.Store, "store", "", "a PostgreSQL URL (postgres://user@host/db): run as one replica of a cluster sharing that database, instead of on the data directory's own store; the password comes from --store-password-file, PGPASSFILE or SVC_STORE_URL, never this flag (env SVC_STORE_URL)")
	fl.StringVar(&opts.StorePasswordFile, "store-password-file", "", "a file only this user may read, holding the --store database's password (env SVC_STORE_PASSWORD_FILE)")
	fl.StringVar(&opts.AdvertiseURL, "advertise-url", "", "with --store: the URL other replicas send the workers and requests of the organisations homed here to; http:// and --addr (the host name for 0.0.0.0) when empty (env SVC_ADVERTISE_URL)")
	fl.StringVar(&opts.Region, "region", "", "with --store: the region this replica runs in (eu-west-1); organisations whose home_region setting names it are homed on its replicas (env SVC_REGION)")
	fl.DurationVar(&opts.LeaseTTL, "lease-ttl", 10*time.Second, "with --store: how long this replica's registration (its organisations' homes) and the leader's lease last unless renewed; a dead replica is replaced within it (env SVC_LEASE_TTL)")
	fl.StringVar(&opts.MetricsTokenFile, "metrics-token-file", "", "a file holding a token GET /metrics then asks for as a bearer token; without it the metrics, whose labels name every organisation's workers and models, need no key (env SVC_METRICS_TOKEN_FILE)")
	fl.IntVar(&opts.BodyMemoryMB, "body-memory-mb", 1024, "memory, in MiB, that request bodies over 16 KiB may hold together while they arrive and their requests run; past it a request whose body needs more gets 503 to retry (env SVC_BODY_MEMORY_MB)")
	fl.IntVar(&opts.StoreBacklogMB, "store-backlog-mb", bolt.DefaultBacklog>>20, "memory, in MiB, for usage rows, events and power reports waiting while the database cannot be written (a full disk); at the bound new inference gets 503 (env SVC_STORE_BACKLOG_MB)")
	// The keep-alive clocks are the spec's; only tests move them.
	fl.DurationVar(&opts.KeepAliveAfter, "keepalive-after", 80*time.Second, "when a non-streaming reply still waiting starts, to keep the connection alive")
	fl.DurationVar(&opts.KeepAliveEvery, "keepalive-every", 15*time.Second, "how often keep-alive bytes and comments are sent")
	fl.DurationVar(&opts.LiveIdle, "live-idle", time.Minute, "how long a live transcription waits for the client's next frame")
	_ = fl.MarkHidden("keepalive-after")
	_ = fl.MarkHidden("keepalive-every")
	_ = fl.MarkHidden("live-idle")
	fl.StringSliceVar(&opts.RentalProviders, "rental-providers", []string{"local"}, "where GPUs are rented: local (this host, simulated GPUs by default), lambda (Lambda Cloud), or none")
	fl.StringVar(&opts.PublicURL, "public-url", "", "the URL rented machines dial to reach this gateway; the listen address when empty (env SVC_PUBLIC_URL)")
	fl.StringVar(&opts.RentalWorkerURL, "rental-worker-url", "", "where rented cloud machines download svc (linux/amd64); this release's archive when empty")
	fl.Float64Var(&opts.RentalUSDGBP, "rental-usd-gbp", 0.79, "pounds per US dollar for providers that price in dollars")
	fl.Float64Var(&opts.RentalMargin, "rental-margin", 0.10, "margin added to providers' prices (0.10 is 10%)")
	fl.DurationVar(&opts.RentalDeadline, "rental-deadline", 15*time.Minute, "how long a rental's worker may take to connect before the machine is destroyed")
	fl.StringToIntVar(&opts.LocalCapacity, "local-capacity", nil, "rentals of each local GPU that may run at once, e.g. sim-l4=2,sim-a100=1")
	fl.StringVar(&opts.LocalEngine, "local-engine", "sim", "the --engine of local rentals' workers")
	fl.StringVar(&opts.LambdaSSHKey, "lambda-ssh-key", "", "the Lambda Cloud SSH key name rented machines get; the account's first when empty")
	fl.StringVar(&opts.LambdaURL, "lambda-url", "", "the Lambda Cloud API's base URL")
	fl.DurationVar(&opts.RentalTick, "rental-tick", time.Second, "how often rentals are looked after")
	fl.DurationVar(&opts.RentalEvery, "rental-every", time.Minute, "how often one API key may ask for a rental")
	fl.DurationVar(&opts.LocalBootStep, "local-boot-step", local.DefaultBootStep, "the pause between a local rental's boot phases")
	for _, name := range []string{"lambda-url", "rental-tick", "rental-every", "local-boot-step"} {
		_ = fl.MarkHidden(name)
	}
	addPprofFlag(cmd, &opts.PprofAddr)
	addOTLPFlag(cmd, &opts.OTLPEndpoint)
	return cmd
}

// readMetricsToken is the token in path, "" for no path. A file that
// holds none is a mistake to say rather than metrics left open.
func readMetricsToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usageErrorf("--metrics-token-file: %v", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", usageErrorf("--metrics-token-file %s: the file must hold one token, on one line", path)
	}
	return token, nil
}

func runServe(ctx context.Context, f *Factory, opts *ServeOptions) error {
	log, err := newLogger(f.IO.ErrOut, f.IO.IsStderrTTY(), opts.LogLevel, opts.LogFormat)
	if err != nil {
		return err
	}
	metricsToken, err := readMetricsToken(opts.MetricsTokenFile)
	if err != nil {
		return err
	}
	stopPprof, err := servePprof(ctx, opts.PprofAddr, log)
	if err != nil {
		return err
	}
	defer stopPprof()
	defer paceHeap(ctx, f)()
	tracer, stopTracing, err := startTracing(ctx, f, opts.OTLPEndpoint, "svc-gateway", log)
	if err != nil {
		return err
	}
	// Deferred before anything the spans come from: it flushes last.
	defer stopTracing()
	cfg := server.Config{
		Addr:           opts.Addr,
		DataDir:        opts.DataDir,
		DrainTimeout:   opts.DrainTimeout,
		Hurry:          f.TakeHurry(),
		StoreWait:      storeWait(opts),
		MaxConnections: opts.MaxConnections,
		StallTimeout:   opts.StallTimeout,
		LiveIdle:       opts.LiveIdle,
		UsageRetention: opts.UsageRetention,
		StoreBacklog:   int64(opts.StoreBacklogMB) << 20,
		BodyMemory:     int64(opts.BodyMemoryMB) << 20,
		MetricsToken:   metricsToken,
		Cluster: server.ClusterConfig{StoreURL: opts.Store, PasswordFile: opts.StorePasswordFile,
			AdvertiseURL: opts.AdvertiseURL, Region: opts.Region, LeaseTTL: opts.LeaseTTL},
		Build:  f.Build,
		Logger: log,
		Fleet: fleet.Config{Hold: opts.QueueHold, Grace: opts.WorkerGrace, StartGrace: startGrace(opts.StartGrace),
			ConnectRate: opts.WorkerConnectRate},
		Timing: relay.Timing{KeepAliveAfter: opts.KeepAliveAfter, KeepAliveEvery: opts.KeepAliveEvery},
		Tracer: tracer,
	}
	// The local rentals live under the data directory: made first, a
	// directory that cannot be is reported as what it is.
	if err := bolt.EnsureDir(opts.DataDir); err != nil {
		return err
	}
	providers, closeProviders, err := rentalProviders(f, opts, log)
	if err != nil {
		return err
	}
	defer closeProviders()
	cfg.Rental = server.RentalConfig{Providers: providers, Gateway: opts.PublicURL,
		Boot:  gpurent.BootOptions{WorkerURL: workerURL(opts.RentalWorkerURL, f.Build.Version)},
		Rates: map[string]float64{"USD": opts.RentalUSDGBP}, Margin: opts.RentalMargin,
		ProvisionDeadline: opts.RentalDeadline, RentEvery: opts.RentalEvery, Tick: opts.RentalTick}
	var demo errgroup.Group
	if opts.Demo {
		cfg.Ready = func(addr string) {
			demo.Go(func() error { return runDemoWorker(ctx, f, opts, addr, log) })
		}
	}
	err = server.Run(ctx, cfg)
	if derr := demo.Wait(); derr != nil && err == nil {
		err = derr
	}
	return err
}

// storeWaitMargin is what the replaced server may take beyond its drain:
// the handlers' last moments, closing the worker links, the final commit.
const storeWaitMargin = 15 * time.Second

// storeWait is --store-wait, or the drain and a margin: the replaced
// server is assumed to drain as this one would.
func storeWait(opts *ServeOptions) time.Duration {
	if opts.StoreWait > 0 {
		return opts.StoreWait
	}
	return opts.DrainTimeout + storeWaitMargin
}

// startGrace is --start-grace as the fleet takes it, where zero is its
// default and a negative grace none.
func startGrace(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// demoBilling gives the default organisation of a demo a payment card and
// £50 of credit, once, so a rental can be tried at once.
func demoBilling(ctx context.Context, dataDir string) error {
	c := client.NewSocket(filepath.Join(dataDir, server.SocketFile))
	o, err := c.Org(ctx, "default")
	if err != nil || o.Settings.PaymentCardOnFile {
		return err
	}
	if _, err := c.UpdateOrg(ctx, "default", api.OrgPatch{PaymentCardOnFile: api.Some(true)}); err != nil {
		return err
	}
	_, err = c.AddCredit(ctx, "default", money.Pounds(50))
	return err
}

// checkRentalFlags refuses rental settings that would quietly leave the
// catalogue empty (a provider's offer whose price cannot be computed is
// dropped) or fail only once a machine boots.
func checkRentalFlags(opts *ServeOptions, getenv func(string) string) error {
	if !(opts.RentalMargin >= 0) || math.IsInf(opts.RentalMargin, 0) {
		return usageErrorf("--rental-margin must be 0 or more (0.10 is 10%%), got %v", opts.RentalMargin)
	}
	if !(opts.RentalUSDGBP > 0) || math.IsInf(opts.RentalUSDGBP, 0) {
		return usageErrorf("--rental-usd-gbp must be above 0, got %v", opts.RentalUSDGBP)
	}
	if opts.RentalDeadline <= 0 {
		return usageErrorf("--rental-deadline must be above 0, got %s", opts.RentalDeadline)
	}
	if !slices.Contains(opts.RentalProviders, local.Name) {
		return nil
	}
	gpus := local.DefaultGPUs()
	for id, n := range opts.LocalCapacity {
		if !slices.ContainsFunc(gpus, func(g local.GPU) bool { return g.GPUModelID == id }) {
			known := make([]string, len(gpus))
			for i, g := range gpus {
				known[i] = g.GPUModelID
			}
			return usageErrorf("--local-capacity: no local GPU %q (%s)", id, strings.Join(known, ", "))
		}
		if n < 0 {
			return usageErrorf("--local-capacity: %s=%d may not be negative", id, n)
		}
	}
	if _, err := parseEngines([]string{opts.LocalEngine}, getenv, slog.New(slog.DiscardHandler)); err != nil {
		return usageErrorf("--local-engine: %v", err)
	}
	return nil
}

// rentalProviders builds the providers --rental-providers names. close
// stops watching local rentals' workers, which keep running.
func rentalProviders(f *Factory, opts *ServeOptions, log *slog.Logger) (ps []gpurent.Provider, close func(), err error) {
	var closers []func()
	close = func() {
		for _, c := range closers {
			c()
		}
	}
	for _, name := range opts.RentalProviders {
		switch name {
		case "none":
		case local.Name:
			gpus := local.DefaultGPUs()
			for i := range gpus {
				if n, ok := opts.LocalCapacity[gpus[i].GPUModelID]; ok {
					gpus[i].Capacity = n
				}
			}
			p, err := local.New(local.Config{Dir: filepath.Join(opts.DataDir, "rentals", "local"), Engine: opts.LocalEngine,
				GPUs: gpus, BootStep: opts.LocalBootStep, Logger: log.With("component", "rental-local")})
			if err != nil {
				close()
				return nil, nil, fmt.Errorf("local rentals: %w", err)
			}
			ps = append(ps, p)
			closers = append(closers, func() {
				if err := p.Close(); err != nil {
					log.Warn("local rentals", "err", err)
				}
			})
		case "lambda":
			key, err := lambda.LoadAPIKey(opts.DataDir)
			if err != nil {
				close()
				return nil, nil, fmt.Errorf("lambda rentals: %w (set LAMBDA_API_KEY or write the key to %s, mode 0600)",
					err, filepath.Join(opts.DataDir, "lambda.key"))
			}
			p, err := lambda.New(lambda.Config{BaseURL: opts.LambdaURL, APIKey: key, SSHKeyName: opts.LambdaSSHKey,
				Logger: log.With("component", "rental-lambda")})
			if err != nil {
				close()
				return nil, nil, err
			}
			ps = append(ps, p)
		default:
			close()
			return nil, nil, usageErrorf("--rental-providers: unknown provider %q (local, lambda or none)", name)
		}
	}
	return ps, close, nil
}

// workerURL is where rented cloud machines fetch svc: the flag's URL, or
// this release's linux/amd64 archive.
func workerURL(flag, version string) string {
	if flag != "" {
		return flag
	}
	v := strings.TrimPrefix(version, "v")
	return fmt.Sprintf("https://github.com/svc-dev/svc/releases/download/v%s/svc_%s_linux_amd64.tar.gz", v, v)
}

// runDemoWorker runs a simulated worker against the server at addr and
// tells the user how to reach it.
func runDemoWorker(ctx context.Context, f *Factory, opts *ServeOptions, addr string, log *slog.Logger) error {
	token, err := os.ReadFile(filepath.Join(opts.DataDir, server.WorkerTokenFile))
	if err != nil {
		return fmt.Errorf("demo worker: %w", err)
	}
	eng := sim.New(sim.DefaultConfig())
	kp, err := e2ee.GenerateKeyPair()
	if err != nil {
		return fmt.Errorf("demo worker: %w", err)
	}
	// The simulated speech-to-text model answers to the spec's ids, as a
	// real worker's whisper build would.
	const stt = "sim-stt"
	aliases := map[string]string{"stt-large-v3-turbo": stt, "stt-large-v3": stt}
	// The worker's spans are a worker's, as a separate svc worker's are:
	// a provider of its own names their service.
	tracer, stopTracing, err := startTracing(ctx, f, opts.OTLPEndpoint, "svc-worker", log.With("component", "demo-worker"))
	if err != nil {
		return fmt.Errorf("demo worker: %w", err)
	}
	defer stopTracing()
	agent, err := worker.New(worker.Config{
		Gateway: "http://" + addr, Token: strings.TrimSpace(string(token)), Name: "demo-sim",
		MaxConcurrent: 4, Version: f.Build.Version, Engines: []engine.Engine{eng}, Aliases: aliases,
		Power: &power.Config{}, SimulatedPower: true, E2E: kp, Tracer: tracer,
		Logger: log.With("component", "demo-worker"),
	})
	if err != nil {
		return err
	}
	models, _ := eng.Models(ctx)
	var ids []string
	for _, m := range models {
		if m.ID != stt {
			ids = append(ids, m.ID)
		}
	}
	ids = append(ids, slices.Sorted(maps.Keys(aliases))...)
	if err := demoBilling(ctx, opts.DataDir); err != nil {
		log.Warn("demo: could not set up billing for rentals", "err", err)
	}
	keyPath := filepath.Join(opts.DataDir, server.AdminKeyFile)
	fmt.Fprintf(f.IO.Out, `
svc is running with a simulated demo worker (models: %s).

  Base URL  http://%s/v1
  API key   %s

  curl http://%s/v1/chat/completions \
    -H "Authorization: Bearer $(cat %s)" \
    -H "Content-Type: application/json" \
    -d '{"model": "sim-chat", "messages": [{"role": "user", "content": "Hello!"}]}'

%s  svc speak "Hello from svc" -o hello.wav && svc transcribe hello.wav

  Rent a simulated GPU on this host, chat with it and stop it:
  svc rent sim-l4 --tier uk-sovereign --model qwen3-8b-q4 --wait
  svc chat qwen3-8b-q4 "Hello"
  svc stop ID --yes

`, strings.Join(ids, ", "), addr, keyPath, addr, keyPath, clientEnv(f.Getenv, addr, opts.DataDir))
	return agent.Run(ctx)
}

// clientEnv is the line that points the svc commands of another shell at
// this server, when they would not find it by default: its address is not
// the default base URL's, or its data directory (with the key) is not the
// default one.
func clientEnv(getenv func(string) string, addr, dataDir string) string {
	var vars []string
	if base := "http://" + addr; base != DefaultBaseURL {
		vars = append(vars, "SVC_BASE_URL="+base)
	}
	// Where a client looks without SVC_DATA.
	if def, err := defaultDataDir(getenv); err != nil || def != dataDir {
		vars = append(vars, "SVC_DATA="+shellQuote(dataDir))
	}
	if len(vars) == 0 {
		return ""
	}
	return "  In another shell, first: export " + strings.Join(vars, " ") + "\n"
}

// daysValue is a duration flag that also takes whole days ("400d"):
// retention is thought of in days, which time.ParseDuration lacks.
type daysValue struct{ d *time.Duration }

// maxDays is the most days a time.Duration holds.
const maxDays = int64(math.MaxInt64 / (24 * time.Hour))

func (v daysValue) String() string {
	if v.d == nil {
		return ""
	}
	if d := *v.d; d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return v.d.String()
}

func (v daysValue) Set(s string) error {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days < 0 || days > maxDays {
			return fmt.Errorf("invalid duration %q: use whole days (400d) or a Go duration (9600h)", s)
		}
		*v.d = time.Duration(days) * 24 * time.Hour
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: use whole days (400d) or a Go duration (9600h)", s)
	}
	*v.d = d
	return nil
}

func (daysValue) Type() string { return "duration" }

// newLogger logs text to a terminal and JSON to anything else.
func newLogger(w io.Writer, tty bool, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErrorf("invalid --log-level %q: use debug, info, warn or error", level)
	}
	hopts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	case "auto", "":
		if tty {
			return slog.New(slog.NewTextHandler(w, hopts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, usageErrorf("invalid --log-format %q: use text, json or auto", format)
}

// noArgs refuses positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// exactArgs wants n positional arguments, named in the Use line, none of
// them blank: an empty ID or name (an unset shell variable) would
// otherwise reach the gateway as a path with nothing in it.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %d argument(s), got %d: %s", cmd.CommandPath(), n, len(args), cmd.Use)
		}
		for i, a := range args {
			if strings.TrimSpace(a) == "" {
				return usageErrorf("%s: argument %d is empty: %s", cmd.CommandPath(), i+1, cmd.Use)
			}
		}
		return nil
	}
}

// minArgs wants at least n positional arguments.
func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErrorf("%s takes at least %d argument(s): %s", cmd.CommandPath(), n, cmd.Use)
		}
		return nil
	}
}

// storeURLHasPassword reports a database URL that carries a password.
func storeURLHasPassword(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return strings.Contains(raw, "password=")
	}
	_, set := u.User.Password()
	return set || u.Query().Has("password")
}

// redactURL hides a URL's password for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// redactEngines hides the passwords of the URLs in --engine specs
// (KIND=URL) for the log.
func redactEngines(specs []string) []string {
	out := make([]string, len(specs))
	for i, spec := range specs {
		kind, rest, ok := strings.Cut(spec, "=")
		if ok && strings.Contains(rest, "://") {
			spec = kind + "=" + engine.PublicURL(rest)
		}
		out[i] = spec
	}
	return out
}

// httpURL reports an absolute http:// or https:// URL with a host.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// shellQuote quotes s for a POSIX shell when it holds more than letters,
// digits and / . _ -.
func shellQuote(s string) string {
	plain := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-", r))
	}) < 0
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// checkListenAddr refuses an --addr that cannot be listened on whatever
// the host: not host:port, or a port out of range. A port in use is found
// when listening, and is no usage error.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || strings.TrimSpace(port) != port || port == "" {
		return usageErrorf("--addr must be HOST:PORT (127.0.0.1:8080, :8080), got %q", addr)
	}
	if n, err := strconv.Atoi(port); err == nil && (n < 0 || n > 65535) {
		return usageErrorf("--addr's port must be from 0 to 65535, got %q", port)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return usageErrorf("--addr's port must be a number or a service name, got %q", port)
	}
	return nil
}
