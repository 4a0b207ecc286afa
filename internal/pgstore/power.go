package pgstore

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/powerlog"
	"github.com/svc-dev/svc/internal/store"
)

// powerMeta is how a worker's channels are stored: as bbolt stores them.
type powerMeta struct {
	Machine  string             `json:"machine,omitempty"`
	Channels []api.PowerChannel `json:"channels"`
}

// bucketsUpsert adds a report's channel sums ($4 to $9) to the buckets of
// worker $1, as powerlog.AddSums adds them: joules and covered seconds
// summed, the peak the highest. It is the tail of each of the statements
// below, which decide whether the report applies.
const bucketsUpsert = `
INSERT INTO svc_power_buckets AS b (worker_id, res, start, channel, joules, covered, peak)
SELECT $1, u.res, u.start, u.channel, u.joules, u.covered, u.peak
FROM unnest($4::integer[], $5::bigint[], $6::bytea[], $7::double precision[], $8::double precision[],
	$9::double precision[]) AS u(res, start, channel, joules, covered, peak)
%s
ORDER BY u.res, u.start, u.channel
ON CONFLICT (worker_id, res, start, channel) DO UPDATE SET
	joules = b.joules + excluded.joules, covered = b.covered + excluded.covered, peak = greatest(b.peak, excluded.peak)`

// addPowerThrough applies a report whose windows end at through ($2):
// the worker's through moves to it, its channels ($3, NULL: unchanged)
// are stored and its sums added only if through is after the stored one,
// all in one statement. A report stored already, sent again after a
// crash or by the outbox of a replica whose view of the worker was stale
// (a failover), changes nothing: its windows are stored once.
var addPowerThrough = `
WITH w AS (
	INSERT INTO svc_power_workers AS p (worker_id, through, meta) VALUES ($1, $2, $3::json)
	ON CONFLICT (worker_id) DO UPDATE SET through = excluded.through, meta = coalesce(excluded.meta, p.meta)
	WHERE p.through < excluded.through
	RETURNING 1
)` + fmt.Sprintf(bucketsUpsert, "WHERE EXISTS (SELECT FROM w)")

// addPowerMeta stores a worker's channels and adds sums that come with
// no through: a report that only names channels (what powerlog sends
// when it has no new window). Only its channels are ever sent, which
// storing twice leaves as they are.
var addPowerMeta = `
WITH w AS (
	INSERT INTO svc_power_workers AS p (worker_id, through, meta) VALUES ($1, $2, $3::json)
	ON CONFLICT (worker_id) DO UPDATE SET meta = excluded.meta
)` + fmt.Sprintf(bucketsUpsert, "")

// addPowerSums adds sums that come with neither a through nor channels.
var addPowerSums = `WITH w AS (SELECT $2::bigint, $3::json)` + fmt.Sprintf(bucketsUpsert, "")

// queuePower queues the statement applying a report.
func queuePower(b *pgx.Batch, p *bolt.PowerAddition) error {
	// Merge the deltas of one bucket: a row may be upserted once per
	// statement.
	type bucket struct{ res, start int64 }
	merged := map[bucket][]powerlog.Sum{}
	var order []bucket
	for _, d := range p.Deltas {
		k := bucket{d.Res, d.Start}
		if _, ok := merged[k]; !ok {
			order = append(order, k)
		}
		// One sum at a time, so that sums of one key, even within a
		// delta, are merged into one, and in key order.
		for _, s := range d.Sums {
			merged[k] = powerlog.AddSums(merged[k], []powerlog.Sum{s}, 1)
		}
	}
	var cols bucketColumns
	for _, k := range order {
		for _, s := range merged[k] {
			cols.add(k.res, k.start, s)
		}
	}
	var meta *string
	if p.Meta != nil {
		data, err := json.Marshal(powerMeta{Machine: p.Meta.Machine, Channels: p.Meta.Channels})
		if err != nil {
			return fmt.Errorf("encode power channels: %w", err)
		}
		m := string(data)
		meta = &m
	}
	sql := addPowerThrough
	switch {
	case p.Through != 0:
	case meta != nil:
		sql = addPowerMeta
	case len(cols.res) == 0:
		return nil // nothing to store
	default:
		sql = addPowerSums
	}
	b.Queue(sql, append([]any{pgText(p.WorkerID), p.Through, meta}, cols.args()...)...)
	return nil
}

// bucketColumns are channels' sums in power buckets as the arrays the
// statements take.
type bucketColumns struct {
	res                   []int32
	start                 []int64
	channel               [][]byte
	joules, covered, peak []float64
}

// add appends a channel's sum in the bucket of res seconds from start.
func (c *bucketColumns) add(res, start int64, s powerlog.Sum) {
	c.res = append(c.res, int32(res))
	c.start = append(c.start, start)
	c.channel = append(c.channel, s.Key)
	c.joules = append(c.joules, s.Joules)
	c.covered = append(c.covered, s.Covered)
	c.peak = append(c.peak, s.Peak)
}

func (c *bucketColumns) args() []any {
	return []any{c.res, c.start, c.channel, c.joules, c.covered, c.peak}
}

// Power is the workers' power history in PostgreSQL, recorded through the
// local outbox.
type Power struct {
	s   *Store
	box *bolt.Outbox
	log *slog.Logger
}

var _ store.Power = (*Power)(nil)

// Logger is where the store logs what it could not read.
func (p *Power) Logger() *slog.Logger { return p.log }

// Add queues a report's additions in the outbox; it never blocks.
func (p *Power) Add(workerID string, deltas []powerlog.Delta, through int64, meta *powerlog.Meta) {
	p.box.AddPower(workerID, deltas, through, meta)
}

// Workers calls fn with every worker's through and channels as stored. A
// failed read is logged: the history then starts from nothing, as bbolt's
// does for a value it cannot read.
func (p *Power) Workers(fn func(workerID string, st powerlog.Stored)) {
	ctx, cancel := ctxFor()
	defer cancel()
	type worker struct {
		id string
		st powerlog.Stored
	}
	rows, err := p.s.pool.Query(ctx, `SELECT worker_id, through, meta::text FROM svc_power_workers`)
	var ws []worker
	if err == nil {
		ws, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (worker, error) {
			var w worker
			var meta *string
			if err := row.Scan(&w.id, &w.st.Through, &meta); err != nil {
				return w, err
			}
			if meta != nil {
				var m powerMeta
				if err := json.Unmarshal([]byte(*meta), &m); err != nil {
					p.log.Error("power channels unreadable", "worker", w.id, "err", err)
				} else {
					w.st.Meta = &powerlog.Meta{Channels: m.Channels, Machine: m.Machine}
				}
			}
			return w, nil
		})
	}
	if err != nil {
		p.log.Error("load power worker state", "err", err)
		return
	}
	for _, w := range ws {
		fn(w.id, w.st)
	}
}

// layerRes checks that res is the resolution of a layer.
func layerRes(res int64) error {
	for _, l := range powerlog.Layers() {
		if l.Res == res {
			return nil
		}
	}
	return fmt.Errorf("no power bucket of %d s", res)
}

// Buckets calls fn with the start and sums of each of workerID's buckets
// of res seconds that start in [first, last], oldest first, each
// bucket's sums sorted by key. The sums are valid only during the call.
func (p *Power) Buckets(workerID string, res, first, last int64, fn func(start int64, sums []powerlog.Sum)) error {
	if err := layerRes(res); err != nil {
		return err
	}
	ctx, cancel := ctxFor()
	defer cancel()
	rows, err := p.s.pool.Query(ctx, `SELECT start, channel, joules, covered, peak FROM svc_power_buckets
		WHERE worker_id = $1 AND res = $2 AND start BETWEEN $3 AND $4 ORDER BY start, channel`,
		pgText(workerID), res, first, last)
	if err != nil {
		return fmt.Errorf("read power buckets: %w", err)
	}
	defer rows.Close()
	var sums []powerlog.Sum
	var cur int64
	for rows.Next() {
		var start int64
		var s powerlog.Sum
		if err := rows.Scan(&start, &s.Key, &s.Joules, &s.Covered, &s.Peak); err != nil {
			return fmt.Errorf("read power buckets: %w", err)
		}
		if len(sums) > 0 && start != cur {
			fn(cur, sums)
			sums = sums[:0]
		}
		cur = start
		sums = append(sums, s)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read power buckets: %w", err)
	}
	if len(sums) > 0 {
		fn(cur, sums)
	}
	return nil
}

// Prune deletes the buckets of each layer that start before its
// retention (powerlog.Layers) and returns how many buckets (not channel
// rows) it deleted. Workers' through and channels are kept.
func (p *Power) Prune(now time.Time) (int, error) {
	ctx, cancel := ctxFor()
	defer cancel()
	total := 0
	for _, l := range powerlog.Layers() {
		var n int
		err := p.s.pool.QueryRow(ctx, `WITH d AS (
			DELETE FROM svc_power_buckets WHERE res = $1 AND start < $2 RETURNING worker_id, start)
			SELECT count(*) FROM (SELECT DISTINCT worker_id, start FROM d) x`, l.Res, l.Cutoff(now)).Scan(&n)
		if err != nil {
			return total, fmt.Errorf("prune power history of %d s: %w", l.Res, err)
		}
		total += n
	}
	return total, nil
}
