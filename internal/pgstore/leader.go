package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replica is one `svc serve` process of a cluster, as it reports itself.
type Replica struct {
	ID           string
	AdvertiseURL string
	Version      string // the build's
	Role         string // as the replica sees itself: "leader", "standby"
	// Region is where the replica runs, for the organisations whose
	// home_region names it; empty for none.
	Region string
	// Stopping is read back: the replica released its homes to stop.
	Stopping bool
	// OutboxRecords and OutboxOldest describe what the replica holds
	// locally that the database does not have yet (zero: nothing).
	OutboxRecords int64
	OutboxOldest  time.Time
	// UnreachablePeers are the advertised URLs of the peers the replica
	// could not reach lately.
	UnreachablePeers []string
	// StartedAt is when the process started; zero is the first Beat's time.
	StartedAt time.Time
	// UsageRetention is the replica's --usage-retention, which the leader
	// prunes by; zero reports none.
	UsageRetention time.Duration
	// SeenAt and ExpiresAt are read back: the last Beat, and when the
	// replica counts as gone without another.
	SeenAt    time.Time
	ExpiresAt time.Time
}

// Leader is the leader row: who holds the lease, under which epoch and
// until when, with the database's clock when it was read. A holder should
// act as leader only until its own monotonic clock, read when it sent the
// Beat, has moved on by ExpiresAt-DBNow less a safety margin: no replica's
// wall clock enters into it.
type Leader struct {
	ReplicaID    string // "" when nobody ever held it or the holder resigned
	AdvertiseURL string
	Epoch        int64
	ExpiresAt    time.Time
	DBNow        time.Time
	// Displaced is the registration a Beat overwrote when it was another
	// live process's under the same id: started at another time and
	// advertising another URL. Nil otherwise. A process that replaced a
	// dead one sees it once; two that share an id see each other at
	// every Beat.
	Displaced *Replica
	// PeerTTLs are the other live replicas' registration TTLs, by id:
	// each one's expiry less its last renewal.
	PeerTTLs map[string]time.Duration
	// PeerRetentions are the other live replicas' usage retentions, by
	// id, of those that report one (builds of schema 10 and later).
	PeerRetentions map[string]time.Duration
}

// Held reports whether replicaID holds the lease at the time it was read.
func (l Leader) Held(replicaID string) bool {
	return replicaID != "" && l.ReplicaID == replicaID && l.ExpiresAt.After(l.DBNow)
}

// Beat records that me is alive for ttl more and, when want, takes the
// lease if nobody holds it (or it expired), with the epoch moved on, or
// renews it, same epoch, if me holds it. It returns the leader row as the
// statement left it. When replicas race for an expired lease exactly one
// takes it: the row's lock orders them, and each re-reads it before
// writing.
func (s *Store) Beat(ctx context.Context, me Replica, ttl time.Duration, want bool) (Leader, error) {
	var started *time.Time
	if !me.StartedAt.IsZero() {
		started = &me.StartedAt
	}
	var oldest *time.Time
	if !me.OutboxOldest.IsZero() {
		oldest = &me.OutboxOldest
	}
	b := &pgx.Batch{}
	// A batch runs as one implicit transaction: all of it or nothing.
	peers := me.UnreachablePeers
	if peers == nil {
		peers = []string{}
	}
	// A replica that starts again under its id (kept in its data
	// directory) is not stopping any more: its started_at changed.
	// The registration as it was is read in the statement's snapshot,
	// before the write: one another live process wrote is Displaced.
	var displaced *Replica
	b.Queue(`WITH prev AS (SELECT advertise_url, started_at FROM svc_replicas
			WHERE id = $1 AND expires_at > now() AND advertise_url <> $2 AND started_at <> COALESCE($7, started_at)),
		up AS (INSERT INTO svc_replicas AS r (id, advertise_url, version, role, outbox_records, outbox_oldest,
			started_at, seen_at, expires_at, unreachable_peers, region, usage_retention_ms)
		VALUES ($1, $2, $3, $4, $5, $6, COALESCE($7, now()), now(), now() + $8 * interval '1 microsecond', $9, $10,
			NULLIF($11::bigint, 0))
		ON CONFLICT (id) DO UPDATE SET advertise_url = excluded.advertise_url, version = excluded.version,
			role = excluded.role, outbox_records = excluded.outbox_records, outbox_oldest = excluded.outbox_oldest,
			started_at = COALESCE($7, r.started_at), seen_at = excluded.seen_at, expires_at = excluded.expires_at,
			unreachable_peers = excluded.unreachable_peers, region = excluded.region,
			usage_retention_ms = excluded.usage_retention_ms,
			stopping = r.stopping AND r.started_at = COALESCE($7, r.started_at))
		SELECT advertise_url, started_at FROM prev`,
		me.ID, me.AdvertiseURL, me.Version, me.Role, me.OutboxRecords, oldest, started, ttl.Microseconds(), peers, me.Region,
		me.UsageRetention.Milliseconds()).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				displaced = &Replica{ID: me.ID}
				if err := rows.Scan(&displaced.AdvertiseURL, &displaced.StartedAt); err != nil {
					return err
				}
			}
			return rows.Err()
		})
	if want {
		b.Queue(`UPDATE svc_leader SET
				epoch = CASE WHEN replica_id = $1 THEN epoch ELSE epoch + 1 END,
				replica_id = $1, advertise_url = $2,
				expires_at = now() + $3 * interval '1 microsecond'
			WHERE replica_id = $1 OR expires_at <= now()`,
			me.ID, me.AdvertiseURL, ttl.Microseconds())
	}
	// Replicas gone for a day are forgotten.
	b.Queue(`DELETE FROM svc_replicas WHERE expires_at < now() - interval '1 day'`)
	// Each live peer's TTL is its registration's expiry less its renewal.
	peerTTLs, peerRetentions := map[string]time.Duration{}, map[string]time.Duration{}
	b.Queue(`SELECT id, (extract(epoch FROM expires_at - seen_at) * 1000000)::bigint, usage_retention_ms FROM svc_replicas
		WHERE id <> $1 AND expires_at > now()`, me.ID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id string
			var us int64
			var retention *int64
			if err := rows.Scan(&id, &us, &retention); err != nil {
				return err
			}
			peerTTLs[id] = time.Duration(us) * time.Microsecond
			if retention != nil {
				peerRetentions[id] = time.Duration(*retention) * time.Millisecond
			}
		}
		return rows.Err()
	})
	var l Leader
	b.Queue(leaderQuery).QueryRow(func(row pgx.Row) error { return scanLeader(row, &l) })
	sent := time.Now()
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Leader{}, fmt.Errorf("pgstore: beat: %w", err)
	}
	s.ObserveDBNow(l.DBNow, sent, time.Now())
	l.Displaced, l.PeerTTLs, l.PeerRetentions = displaced, peerTTLs, peerRetentions
	return l, nil
}

const leaderQuery = `SELECT replica_id, advertise_url, epoch, expires_at, now() FROM svc_leader`

func scanLeader(row pgx.Row, l *Leader) error {
	return row.Scan(&l.ReplicaID, &l.AdvertiseURL, &l.Epoch, &l.ExpiresAt, &l.DBNow)
}

// Resign gives up the lease now if replicaID still holds it under epoch,
// so that another replica takes it at its next Beat rather than after the
// TTL; writes under the old fence fail from then on.
func (s *Store) Resign(ctx context.Context, replicaID string, epoch int64) error {
	if _, err := s.pool.Exec(ctx, `UPDATE svc_leader SET replica_id = '', advertise_url = '', expires_at = now()
		WHERE replica_id = $1 AND epoch = $2`, replicaID, epoch); err != nil {
		return fmt.Errorf("pgstore: resign: %w", err)
	}
	return nil
}

// Deregister removes a replica's row, when it stops.
func (s *Store) Deregister(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, "DELETE FROM svc_replicas WHERE id = $1", id); err != nil {
		return fmt.Errorf("pgstore: deregister: %w", err)
	}
	return nil
}

// Replicas lists every replica that beat in the last day, by id, with the
// leader row.
func (s *Store) Replicas(ctx context.Context) ([]Replica, Leader, error) {
	var l Leader
	var rs []Replica
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := scanLeader(tx.QueryRow(ctx, leaderQuery), &l); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `SELECT id, advertise_url, version, role, outbox_records, outbox_oldest,
			started_at, seen_at, expires_at, unreachable_peers, region, stopping FROM svc_replicas ORDER BY id`)
		var err error
		rs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Replica, error) {
			var r Replica
			var oldest *time.Time
			err := row.Scan(&r.ID, &r.AdvertiseURL, &r.Version, &r.Role, &r.OutboxRecords, &oldest,
				&r.StartedAt, &r.SeenAt, &r.ExpiresAt, &r.UnreachablePeers, &r.Region, &r.Stopping)
			if oldest != nil {
				r.OutboxOldest = *oldest
			}
			return r, err
		})
		return err
	})
	if err != nil {
		return nil, Leader{}, fmt.Errorf("pgstore: list replicas: %w", err)
	}
	return rs, l, nil
}

// ClusterSecret is a secret shared by the replicas, made by whichever asks
// first and the same for every replica after.
func (s *Store) ClusterSecret(ctx context.Context) (string, error) {
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("pgstore: cluster secret: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue("INSERT INTO svc_cluster (secret) VALUES ($1) ON CONFLICT (one) DO NOTHING", base64.RawURLEncoding.EncodeToString(buf))
	var secret string
	b.Queue("SELECT secret FROM svc_cluster").QueryRow(func(row pgx.Row) error { return row.Scan(&secret) })
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return "", fmt.Errorf("pgstore: cluster secret: %w", err)
	}
	return secret, nil
}
