// Package pgstore is svc's storage on PostgreSQL, for gateways that run
// as several replicas sharing one database: accounts, the rental ledger,
// the rental rate limit, and the leader lease with its fencing epoch.
// Every expiry is compared with the database's clock, never a replica's.
package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/svc-dev/svc/internal/clock"
)

// DefaultMaxConns is the pool size when Options.MaxConns is zero: small,
// because every replica holds one pool (and one listening connection)
// against the database's connection limit.
const DefaultMaxConns = 8

// Options configure Open.
type Options struct {
	// URL is a libpq connection string, URL or key=value form. A password
	// may come from it, from PasswordFile, or from what libpq's
	// environment names (PGPASSWORD, PGPASSFILE, ~/.pgpass).
	URL string
	// PasswordFile, when set, holds the password (one line). It must not
	// be readable by group or others.
	PasswordFile string
	// MaxConns bounds the pool; zero is DefaultMaxConns.
	MaxConns int32
	Logger   *slog.Logger
	// Inspect opens the database as it is, for reading: it neither creates
	// nor migrates the schema, and fails where there is none.
	Inspect bool
}

// Store is an open connection pool to the database, with its schema
// migrated. Its methods are safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig // for connections of their own, outside the pool
	log     *slog.Logger
	clk     *dbClock
	schema  int
	// listenPing is how long a listening connection waits for a
	// notification before it checks the connection is alive.
	listenPing time.Duration
}

// Open connects, migrates the schema to this build's version under a lock
// (so replicas starting together are safe) and refuses a schema newer
// than this build can use.
func Open(ctx context.Context, opts Options) (*Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(opts.URL)
	if err != nil {
		// pgx already hides the password of a URL it quotes; the key=value
		// form is scrubbed again in case.
		return nil, fmt.Errorf("pgstore: parse store URL: %s", Redact(err.Error()))
	}
	if opts.PasswordFile != "" {
		pw, err := readPasswordFile(opts.PasswordFile)
		if err != nil {
			return nil, err
		}
		cfg.ConnConfig.Password = pw
	}
	cfg.MaxConns = opts.MaxConns
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "svc"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s", Redact(err.Error()))
	}
	s := &Store{pool: pool, connCfg: cfg.ConnConfig.Copy(), log: log, clk: newDBClock(), listenPing: 30 * time.Second}
	if opts.Inspect {
		s.schema, err = readSchema(ctx, pool)
	} else {
		s.schema, err = migrate(ctx, pool, migrations())
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := s.Now(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	c := cfg.ConnConfig
	log.Info("store", "engine", "postgres", "host", c.Host, "port", c.Port, "database", c.Database,
		"user", c.User, "schema", s.schema, "clock_offset", s.clk.Offset())
	return s, nil
}

// Close waits for the pool's connections to be returned and closes them.
func (s *Store) Close() { s.pool.Close() }

// Pool is the connection pool, for the parts of the store kept in files
// of their own.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// SchemaVersion is the schema version the database is at: this build's,
// or newer when a newer build that this one can still use migrated it.
func (s *Store) SchemaVersion() int { return s.schema }

func readPasswordFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("pgstore: password file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("pgstore: password file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("pgstore: password file %s is readable by others (mode %04o); chmod 600 it", path, perm)
	}
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil && n == 0 {
		return "", fmt.Errorf("pgstore: password file %s: %w", path, err)
	}
	pw, _, _ := strings.Cut(string(b[:n]), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("pgstore: password file %s is empty", path)
	}
	return pw, nil
}

var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// Redact hides any password in a connection string, in URL or key=value
// form, or in a message quoting one; for logs and errors.
func Redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			s = u.Redacted()
		}
	}
	if i := strings.Index(s, "://"); i >= 0 {
		// A URL inside a longer message: scrub user:password@.
		s = urlPassword.ReplaceAllString(s, "$1:xxxxx@")
	}
	return kvPassword.ReplaceAllString(s, "${1}xxxxx")
}

var urlPassword = regexp.MustCompile(`(://[^:/@\s]*):[^@\s]*@`)

// Now reads the database's clock, and corrects Clock with the reading.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	sent := time.Now()
	var now time.Time
	if err := s.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("pgstore: read the database clock: %w", err)
	}
	s.ObserveDBNow(now, sent, time.Now())
	return now, nil
}

// Clock is the local clock with its wall time moved onto the database's:
// what the rental ledger stamps, so that records written by different
// replicas agree. Every database reading (Now, Beat) corrects it.
func (s *Store) Clock() clock.Clock { return s.clk }

// ObserveDBNow corrects Clock with a reading dbNow of the database's clock
// taken by a statement sent at sentAt and answered at recvAt: the reading
// is taken to be of the midpoint.
func (s *Store) ObserveDBNow(dbNow, sentAt, recvAt time.Time) { s.clk.observe(dbNow, sentAt, recvAt) }
