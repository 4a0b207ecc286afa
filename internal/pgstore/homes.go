package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// schemaHomes is version 3: each organisation's home replica. A home
// lasts as long as its replica's registration (svc_replicas.expires_at,
// renewed at every Beat), so a replica renews all its homes with the one
// row it renews anyway, and a dead replica's homes lapse with it. epoch
// grows at each change of home: what a home writes for its organisation
// can be fenced with it.
const schemaHomes = `
CREATE TABLE svc_org_homes (
	org_id     text COLLATE "C" PRIMARY KEY,
	replica_id text COLLATE "C" NOT NULL,
	epoch      bigint NOT NULL,
	claimed_at timestamptz NOT NULL
);
CREATE INDEX svc_org_homes_replica ON svc_org_homes (replica_id);
`

// schemaPeers is version 4: the peer replicas each replica could not reach
// lately, as it last reported them, for `svc cluster status`.
const schemaPeers = `
ALTER TABLE svc_replicas ADD COLUMN unreachable_peers text[] NOT NULL DEFAULT '{}';
`

// Home is an organisation's home as the database holds it.
type Home struct {
	OrgID string
	// ReplicaID is the home replica; "" when the organisation has none
	// (never had one, or its home released it).
	ReplicaID    string
	AdvertiseURL string // the home replica's
	Epoch        int64
	// Alive: the home replica's registration had not expired when the
	// row was read, on the database's clock.
	Alive bool
}

const homeColumns = `h.org_id, h.replica_id, COALESCE(r.advertise_url, ''), h.epoch,
	COALESCE(h.replica_id <> '' AND r.expires_at > now(), false)`

const homeFrom = `svc_org_homes h LEFT JOIN svc_replicas r ON r.id = h.replica_id`

func scanHome(row pgx.Row) (Home, error) {
	var h Home
	err := row.Scan(&h.OrgID, &h.ReplicaID, &h.AdvertiseURL, &h.Epoch, &h.Alive)
	return h, err
}

// ClaimHome makes replicaID the home of orgID unless a live replica is:
// when the organisation has no home, or its home's registration has
// expired. It returns the home as the statement left it, replicaID's or
// the live one's. Replicas racing for one organisation are ordered by its
// row's lock, and each looks at the row again once it holds it: exactly
// one wins.
func (s *Store) ClaimHome(ctx context.Context, orgID, replicaID string) (Home, error) {
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO svc_org_homes AS h (org_id, replica_id, epoch, claimed_at) VALUES ($1, $2, 1, now())
		ON CONFLICT (org_id) DO UPDATE SET replica_id = excluded.replica_id, epoch = h.epoch + 1, claimed_at = now()
		WHERE h.replica_id <> excluded.replica_id AND (h.replica_id = '' OR NOT EXISTS
			(SELECT 1 FROM svc_replicas r WHERE r.id = h.replica_id AND r.expires_at > now()))`, orgID, replicaID)
	var h Home
	b.Queue(`SELECT `+homeColumns+` FROM `+homeFrom+` WHERE h.org_id = $1`, orgID).QueryRow(func(row pgx.Row) error {
		var err error
		h, err = scanHome(row)
		return err
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Home{}, fmt.Errorf("pgstore: claim the home of %s: %w", orgID, err)
	}
	return h, nil
}

// Homes lists every organisation's home, by organisation.
func (s *Store) Homes(ctx context.Context) ([]Home, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+homeColumns+` FROM `+homeFrom+` ORDER BY h.org_id`)
	hs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Home, error) { return scanHome(row) })
	if err != nil {
		return nil, fmt.Errorf("pgstore: list homes: %w", err)
	}
	return hs, nil
}

// HomesChannel is the channel a release of homes is announced on, so that
// the other replicas read the homes at once rather than at their next
// reading.
const HomesChannel = "svc_homes"

// ReleaseHomes gives up every home replicaID holds, so that another
// replica claims each at once rather than once replicaID's registration
// expires, and tells the replicas listening on HomesChannel. It returns
// how many it released.
func (s *Store) ReleaseHomes(ctx context.Context, replicaID string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE svc_org_homes SET replica_id = '', epoch = epoch + 1, claimed_at = now()
			WHERE replica_id = $1`, replicaID)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", HomesChannel, replicaID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: release homes: %w", err)
	}
	return n, nil
}

// ListenHomes calls changed whenever a replica releases its homes, and
// once after every (re)connection, until ctx ends (see ListenAccounts).
func (s *Store) ListenHomes(ctx context.Context, changed func()) error {
	return s.listen(ctx, HomesChannel, changed)
}
