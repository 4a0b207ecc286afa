package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrSchemaTooNew means a newer build migrated the database past what this
// build can use.
var ErrSchemaTooNew = errors.New("the database schema is newer than this build of svc can use")

// Advisory lock keys ("svc" followed by a number), each serialising one
// kind of write across replicas.
const (
	lockSchema   int64 = 0x7376630000000001
	lockAccounts int64 = 0x7376630000000002
)

type migration struct {
	version   int
	minReader int
	name      string
	sql       string
	// run, when set, runs after sql in the same transaction: a change of
	// data that SQL alone cannot make.
	run func(ctx context.Context, tx pgx.Tx) error
}

// SchemaVersion is the version this build migrates the database to.
func SchemaVersion() int {
	m := migrations()
	return m[len(m)-1].version
}

// migrate brings the schema to the last of ms in one transaction, under a
// lock that makes concurrent starts of several replicas wait for each
// other, and returns the version the database is at.
func migrate(ctx context.Context, pool *pgxpool.Pool, ms []migration) (int, error) {
	latest := ms[len(ms)-1].version
	var version int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockSchema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS svc_schema (
			one        boolean PRIMARY KEY DEFAULT true CHECK (one),
			version    integer NOT NULL,
			min_reader integer NOT NULL)`); err != nil {
			return err
		}
		var minReader int
		err := tx.QueryRow(ctx, "SELECT version, min_reader FROM svc_schema").Scan(&version, &minReader)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err := usableBy(version, minReader, latest); err != nil {
			return err
		}
		if version >= latest {
			return nil
		}
		for _, m := range ms {
			if m.version <= version {
				continue
			}
			if m.sql != "" {
				if _, err := tx.Exec(ctx, m.sql); err != nil {
					return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
				}
			}
			if m.run != nil {
				if err := m.run(ctx, tx); err != nil {
					return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
				}
			}
			version = m.version
			minReader = max(minReader, m.minReader)
		}
		_, err = tx.Exec(ctx, `INSERT INTO svc_schema (version, min_reader) VALUES ($1, $2)
			ON CONFLICT (one) DO UPDATE SET version = excluded.version, min_reader = excluded.min_reader`,
			version, minReader)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrSchemaTooNew) {
			return 0, fmt.Errorf("pgstore: %w", err)
		}
		return 0, fmt.Errorf("pgstore: migrate the schema: %w", err)
	}
	return version, nil
}

// readSchema is the version the database's schema is at, without changing
// it.
func readSchema(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var version int
	err := pool.QueryRow(ctx, "SELECT version FROM svc_schema").Scan(&version)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01" /* undefined_table */, errors.Is(err, pgx.ErrNoRows):
		return 0, errors.New("pgstore: the database holds no svc schema: no replica has started on it")
	case err != nil:
		return 0, fmt.Errorf("pgstore: read the schema version: %s", Redact(err.Error()))
	}
	return version, nil
}

// schemaCore is version 1. Account records are kept whole as JSON, as
// bbolt keeps them, with the columns the database itself must check or
// merge (names unique, last-used times only moving forward) apart.
const schemaCore = `
CREATE TABLE svc_orgs (
	id     text PRIMARY KEY,
	name   text NOT NULL UNIQUE,
	record jsonb NOT NULL
);
CREATE TABLE svc_users (
	id     text PRIMARY KEY,
	name   text NOT NULL UNIQUE,
	record jsonb NOT NULL
);
CREATE TABLE svc_members (
	org_id  text NOT NULL,
	user_id text NOT NULL,
	record  jsonb NOT NULL,
	PRIMARY KEY (org_id, user_id)
);
CREATE TABLE svc_api_keys (
	id     text PRIMARY KEY,
	org_id text NOT NULL,
	record jsonb NOT NULL
);
CREATE TABLE svc_worker_tokens (
	id     text PRIMARY KEY,
	org_id text NOT NULL,
	record jsonb NOT NULL
);
-- Moved by every change of the records above, so that a replica writes
-- only what it decided on the latest records (account.SharedStore).
CREATE TABLE svc_accounts_version (
	one     boolean PRIMARY KEY DEFAULT true CHECK (one),
	version bigint NOT NULL
);
INSERT INTO svc_accounts_version (version) VALUES (0);
CREATE TABLE svc_last_used (
	prefix text PRIMARY KEY,
	at     timestamptz NOT NULL
);

CREATE TABLE svc_rentals (
	id         text PRIMARY KEY,
	record     jsonb NOT NULL,
	-- Billing is counted between these; each is written once.
	started_at        timestamptz,
	stop_requested_at timestamptz,
	stopped_at        timestamptz,
	saved_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE svc_rent_limits (
	key_id text PRIMARY KEY,
	at     timestamptz NOT NULL
);

CREATE TABLE svc_replicas (
	id             text PRIMARY KEY,
	advertise_url  text NOT NULL,
	version        text NOT NULL,
	role           text NOT NULL,
	outbox_records bigint NOT NULL DEFAULT 0,
	outbox_oldest  timestamptz,
	started_at     timestamptz NOT NULL,
	seen_at        timestamptz NOT NULL,
	expires_at     timestamptz NOT NULL
);

-- One row, there from the start, so that taking the lease is an UPDATE.
CREATE TABLE svc_leader (
	one           boolean PRIMARY KEY DEFAULT true CHECK (one),
	replica_id    text NOT NULL,
	advertise_url text NOT NULL,
	epoch         bigint NOT NULL,
	expires_at    timestamptz NOT NULL
);
INSERT INTO svc_leader (replica_id, advertise_url, epoch, expires_at) VALUES ('', '', 0, 'epoch');

CREATE TABLE svc_cluster (
	one    boolean PRIMARY KEY DEFAULT true CHECK (one),
	secret text NOT NULL
);
`

// Usable checks that this build can still use the database: a replica of a
// newer release may have migrated it, while this one runs, past what this
// build reads. It is ErrSchemaTooNew then, and nil or the database's own
// error otherwise.
func (s *Store) Usable(ctx context.Context) error {
	var version, minReader int
	if err := s.pool.QueryRow(ctx, "SELECT version, min_reader FROM svc_schema").Scan(&version, &minReader); err != nil {
		return fmt.Errorf("pgstore: read the schema version: %w", err)
	}
	if err := usableBy(version, minReader, SchemaVersion()); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	return nil
}

// usableBy is ErrSchemaTooNew, saying why, when a build that migrates to
// latest cannot use a schema at version that builds from minReader on
// can.
func usableBy(version, minReader, latest int) error {
	if minReader > latest {
		return fmt.Errorf("%w: it is at version %d, usable by builds of version %d and later; this build is version %d: upgrade svc",
			ErrSchemaTooNew, version, minReader, latest)
	}
	return nil
}
