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

// schemaRegions is version 5: the region each replica runs in, which an
// organisation's home_region setting asks for, and whether the replica is
// stopping (it released its homes and takes no more). A replica that
// starts again under the same id is not stopping: Beat clears the flag
// when started_at changes.
const schemaRegions = `
ALTER TABLE svc_replicas ADD COLUMN region text NOT NULL DEFAULT '';
ALTER TABLE svc_replicas ADD COLUMN stopping boolean NOT NULL DEFAULT false;
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
	// Misplaced: the organisation's home_region names another region
	// than its home's, and a live replica that is not stopping runs
	// there. The home should give the organisation up, to be claimed
	// there.
	Misplaced bool
}

// homeColumns and homeFrom read a home; pr.region is the region its
// organisation asks for, empty when none.
const homeColumns = `h.org_id, h.replica_id, COALESCE(r.advertise_url, ''), h.epoch,
	COALESCE(h.replica_id <> '' AND r.expires_at > now(), false),
	COALESCE(h.replica_id <> '' AND pr.region NOT IN ('', r.region) AND ` + servedIn + `, false)`

const homeFrom = `svc_org_homes h LEFT JOIN svc_replicas r ON r.id = h.replica_id
	LEFT JOIN LATERAL (` + prefers + ` WHERE o.id = h.org_id) pr ON true`

// prefers is an organisation's home_region, as pr.region.
const prefers = `SELECT COALESCE(o.record->'settings'->>'home_region', '') AS region FROM svc_orgs o`

// servedIn holds when a live replica that is not stopping runs in the
// region pr.region: only then does a home_region keep a home from
// elsewhere.
const servedIn = `EXISTS (SELECT 1 FROM svc_replicas p WHERE p.region = pr.region AND p.expires_at > now() AND NOT p.stopping)`

func scanHome(row pgx.Row) (Home, error) {
	var h Home
	err := row.Scan(&h.OrgID, &h.ReplicaID, &h.AdvertiseURL, &h.Epoch, &h.Alive, &h.Misplaced)
	return h, err
}

// ClaimHome makes replicaID the home of orgID unless a live replica is:
// when the organisation has no home, or its home's registration has
// expired. It returns the home as the statement left it, replicaID's or
// the live one's. Replicas racing for one organisation are ordered by its
// row's lock, and each looks at the row again once it holds it: exactly
// one wins.
//
// An organisation whose home_region names another region than
// replicaID's, where a live replica that is not stopping runs, is not
// claimed: the answer is then that region's replica with the fewest homes
// (Alive, at the organisation's current epoch), which claims it when the
// request or worker sent there arrives. With no such replica the region
// is only a preference, and replicaID claims as usual.
func (s *Store) ClaimHome(ctx context.Context, orgID, replicaID string) (Home, error) {
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO svc_org_homes AS h (org_id, replica_id, epoch, claimed_at)
		SELECT $1, $2, 1, now() FROM (SELECT COALESCE((`+prefers+` WHERE o.id = $1), '') AS region) pr
		WHERE pr.region IN ('', (SELECT region FROM svc_replicas WHERE id = $2)) OR NOT `+servedIn+`
		ON CONFLICT (org_id) DO UPDATE SET replica_id = excluded.replica_id, epoch = h.epoch + 1, claimed_at = now()
		WHERE h.replica_id <> excluded.replica_id AND (h.replica_id = '' OR NOT EXISTS
			(SELECT 1 FROM svc_replicas r WHERE r.id = h.replica_id AND r.expires_at > now()))`, orgID, replicaID)
	h := Home{OrgID: orgID}
	found := false
	b.Queue(`SELECT `+homeColumns+` FROM `+homeFrom+` WHERE h.org_id = $1`, orgID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var err error
			if h, err = scanHome(rows); err != nil {
				return err
			}
			found = true
		}
		return rows.Err()
	})
	var pref Home
	b.Queue(`SELECT p.id, p.advertise_url FROM svc_replicas p, (`+prefers+` WHERE o.id = $1) pr
		WHERE p.region = pr.region AND p.region <> '' AND p.expires_at > now() AND NOT p.stopping
		ORDER BY (SELECT count(*) FROM svc_org_homes x WHERE x.replica_id = p.id), p.id LIMIT 1`, orgID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&pref.ReplicaID, &pref.AdvertiseURL); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Home{}, fmt.Errorf("pgstore: claim the home of %s: %w", orgID, err)
	}
	if (!found || !h.Alive) && pref.ReplicaID != "" {
		// Not claimed here: the organisation's region has a replica to
		// claim it.
		h.ReplicaID, h.AdvertiseURL, h.Alive, h.Misplaced = pref.ReplicaID, pref.AdvertiseURL, true, false
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
		// Marked stopping, it is no longer offered to organisations
		// that ask for its region.
		if _, err := tx.Exec(ctx, `UPDATE svc_replicas SET stopping = true WHERE id = $1`, replicaID); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", HomesChannel, replicaID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: release homes: %w", err)
	}
	return n, nil
}

// ReleaseHome gives up orgID's home if replicaID holds it, so that a
// replica in the organisation's region claims it, and tells the replicas
// listening on HomesChannel. It reports whether it did.
func (s *Store) ReleaseHome(ctx context.Context, orgID, replicaID string) (bool, error) {
	var done bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE svc_org_homes SET replica_id = '', epoch = epoch + 1, claimed_at = now()
			WHERE org_id = $1 AND replica_id = $2`, orgID, replicaID)
		if err != nil {
			return err
		}
		done = tag.RowsAffected() == 1
		_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", HomesChannel, replicaID)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("pgstore: release the home of %s: %w", orgID, err)
	}
	return done, nil
}

// ListenHomes calls changed whenever a replica releases its homes, and
// once after every (re)connection, until ctx ends (see ListenAccounts).
func (s *Store) ListenHomes(ctx context.Context, changed func()) error {
	return s.listen(ctx, HomesChannel, changed)
}

// schemaReplicaRetention is version 10: each replica's --usage-retention,
// so that replicas can tell the operator when theirs differ (the leader's
// prunes). Older builds leave it NULL.
const schemaReplicaRetention = `
ALTER TABLE svc_replicas ADD COLUMN IF NOT EXISTS usage_retention_ms bigint;
`
