package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/powerlog"
	"github.com/svc-dev/svc/internal/usage"
)

// What is here copies a bbolt store into the database, for `svc cluster
// migrate`: bolt.Store's Each functions read everything out, these write
// it, and Inventory counts both sides. Every import can run again, over
// a copy interrupted or complete, and changes nothing the second time.

// ImportedRow is a usage row read out of a bbolt store.
type ImportedRow struct {
	OrgID string
	Row   api.UsageRow
	// Data is the row's compact encoding (bolt.EncodeUsageRow).
	Data []byte
}

// ImportUsageRows copies rows into the database without adding them to
// any total: a copy of a bbolt store copies its totals as they are
// (ImportUsageTotals), since they count rows pruned long ago too. A row
// there already is left as it is, so running it again changes nothing.
// It returns how many rows were new.
func (s *Store) ImportUsageRows(ctx context.Context, rows []ImportedRow) (int, error) {
	var c usageColumns
	times := make([]time.Time, 0, len(rows))
	for i := range rows {
		r := rows[i].Row
		usage.Clean(&r)
		c.add(rows[i].OrgID, &r, rows[i].Data)
		times = append(times, r.CreatedAt)
	}
	if err := newPartitions().ensure(ctx, s, times...); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, importUsageRows, c.args()[:12]...)
	if err != nil {
		return 0, fmt.Errorf("import usage rows: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// ImportUsageTotals copies totals into the database as they are, each
// replacing any stored of its key: running it again changes nothing.
// It is for a database no replica ships to yet: totals shipped since
// would be replaced.
func (s *Store) ImportUsageTotals(ctx context.Context, totals []bolt.UsageTotal) error {
	// One statement per table, each taking a column per field.
	type table struct {
		name              string
		org, day, key, nm []string
		counts            [11][]int64
		audio, energy     []float64
		speech            []float64
		unmetered         []int64
	}
	tables := []*table{{name: "svc_usage_days"}, {name: "svc_usage_models"}, {name: "svc_usage_workers"}}
	for _, t := range totals {
		if t.Kind < bolt.TotalsDay || t.Kind > bolt.TotalsWorker {
			return fmt.Errorf("import usage totals: unknown kind %d", t.Kind)
		}
		tb := tables[t.Kind-bolt.TotalsDay]
		tb.org = append(tb.org, pgText(t.OrgID))
		tb.day = append(tb.day, t.Day)
		tb.key = append(tb.key, pgText(t.Key))
		tb.nm = append(tb.nm, pgText(t.Name))
		v := &t.Totals
		for i, n := range [...]int64{v.Requests, v.Succeeded, v.Failed, v.Cancelled, v.PromptTokens,
			v.CompletionTokens, v.TotalTokens, v.ReasoningTokens, v.CachedTokens, v.Images, v.RequestDurationMs} {
			tb.counts[i] = append(tb.counts[i], n)
		}
		tb.audio = append(tb.audio, v.AudioSeconds)
		tb.energy = append(tb.energy, v.EnergyWh)
		tb.speech = append(tb.speech, v.SpeechSeconds)
		tb.unmetered = append(tb.unmetered, v.UnmeteredTokens)
	}
	b := &pgx.Batch{}
	for _, tb := range tables {
		if len(tb.org) == 0 {
			continue
		}
		args := []any{tb.org, tb.day, tb.key, tb.nm}
		var arrays, set []string
		for i := range tb.counts {
			args = append(args, tb.counts[i])
			arrays = append(arrays, fmt.Sprintf("$%d::bigint[]", len(args)))
		}
		for _, fs := range [][]float64{tb.audio, tb.energy, tb.speech} {
			args = append(args, fs)
			arrays = append(arrays, fmt.Sprintf("$%d::double precision[]", len(args)))
		}
		args = append(args, tb.unmetered)
		arrays = append(arrays, fmt.Sprintf("$%d::bigint[]", len(args)))
		keys := pkOf(tb.name)
		sel := []string{"u.org_id", "u.day::date"}
		cols := append([]string{}, keys...)
		switch tb.name {
		case "svc_usage_models":
			sel = append(sel, "u.key")
		case "svc_usage_workers":
			sel = append(sel, "u.key", "u.name")
			cols = append(cols, "name")
			set = append(set, "name = excluded.name")
		}
		for _, c := range totalsColumns {
			sel = append(sel, "u."+c)
			set = append(set, c+" = excluded."+c)
		}
		cols = append(cols, totalsColumns...)
		b.Queue(fmt.Sprintf(`INSERT INTO %s (%s)
			SELECT %s FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], %s)
				AS u(org_id, day, key, name, %s)
			ON CONFLICT (%s) DO UPDATE SET %s`,
			tb.name, strings.Join(cols, ", "), strings.Join(sel, ", "), strings.Join(arrays, ", "),
			strings.Join(totalsColumns, ", "), strings.Join(keys, ", "), strings.Join(set, ", ")), args...)
	}
	if b.Len() == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
	if err != nil {
		return fmt.Errorf("import usage totals: %w", err)
	}
	return nil
}

// pkOf is the primary key of a totals table.
func pkOf(table string) []string {
	switch table {
	case "svc_usage_models":
		return []string{"org_id", "day", "model"}
	case "svc_usage_workers":
		return []string{"org_id", "day", "worker_id"}
	}
	return []string{"org_id", "day"}
}

// Inventory counts what the database holds, as bolt.Store.Inventory
// counts a bbolt store, for a copy to be checked against its source.
func (s *Store) Inventory(ctx context.Context) (bolt.Inventory, error) {
	var inv bolt.Inventory
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM svc_usage_rows),
		(SELECT count(*) FROM svc_usage_days),
		(SELECT count(*) FROM svc_usage_models),
		(SELECT count(*) FROM svc_usage_workers),
		(SELECT count(*) FROM svc_worker_events),
		(SELECT count(*) FROM (SELECT DISTINCT worker_id, res, start FROM svc_power_buckets) b),
		(SELECT count(*) FROM svc_power_workers)`).Scan(&inv.UsageRows, &inv.UsageDays, &inv.UsageModels,
		&inv.UsageWorkers, &inv.Events, &inv.PowerBuckets, &inv.PowerWorkers)
	if err != nil {
		return inv, fmt.Errorf("count what the database holds: %w", err)
	}
	return inv, nil
}

// ImportedEvent is a worker event read out of a bbolt store.
type ImportedEvent struct {
	OrgID string
	Event api.WorkerEvent
	// JSON is the event as bbolt stored it.
	JSON []byte
}

// ImportEvents copies events into the database, each once however often
// it is run, and returns how many were new.
func (s *Store) ImportEvents(ctx context.Context, events []ImportedEvent) (int, error) {
	var c eventColumns
	for i := range events {
		c.add(events[i].OrgID, &events[i].Event, events[i].JSON)
	}
	tag, err := s.pool.Exec(ctx, insertEvents, c.args()...)
	if err != nil {
		return 0, fmt.Errorf("import worker events: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// ImportPowerBuckets copies buckets into the database as they are, each
// channel's figures replacing any stored: running it again changes
// nothing. It returns how many buckets it wrote.
func (s *Store) ImportPowerBuckets(ctx context.Context, buckets []bolt.PowerBucket) (int, error) {
	var worker []string
	var cols bucketColumns
	for _, b := range buckets {
		if err := layerRes(b.Res); err != nil {
			return 0, err
		}
		for _, sum := range b.Sums {
			worker = append(worker, pgText(b.WorkerID))
			cols.add(b.Res, b.Start, sum)
		}
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO svc_power_buckets (worker_id, res, start, channel, joules, covered, peak)
		SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::bytea[], $5::double precision[],
			$6::double precision[], $7::double precision[])
		ON CONFLICT (worker_id, res, start, channel) DO UPDATE SET
			joules = excluded.joules, covered = excluded.covered, peak = excluded.peak`,
		append([]any{worker}, cols.args()...)...)
	if err != nil {
		return 0, fmt.Errorf("import power buckets: %w", err)
	}
	return len(buckets), nil
}

// ImportedPowerWorker is what a bbolt store holds of a worker beyond its
// buckets.
type ImportedPowerWorker struct {
	WorkerID string
	Stored   powerlog.Stored
}

// ImportPowerWorkers copies workers' through and channels: the later
// through is kept, channels replace those stored.
func (s *Store) ImportPowerWorkers(ctx context.Context, workers []ImportedPowerWorker) error {
	ids := make([]string, 0, len(workers))
	through := make([]int64, 0, len(workers))
	metas := make([]*string, 0, len(workers))
	for _, w := range workers {
		var meta *string
		if w.Stored.Meta != nil {
			data, err := json.Marshal(powerMeta{Machine: w.Stored.Meta.Machine, Channels: w.Stored.Meta.Channels})
			if err != nil {
				return fmt.Errorf("encode power channels of %s: %w", w.WorkerID, err)
			}
			m := string(data)
			meta = &m
		}
		ids = append(ids, pgText(w.WorkerID))
		through = append(through, w.Stored.Through)
		metas = append(metas, meta)
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO svc_power_workers AS p (worker_id, through, meta)
		SELECT u.id, u.through, u.meta::json FROM unnest($1::text[], $2::bigint[], $3::text[]) AS u(id, through, meta)
		ON CONFLICT (worker_id) DO UPDATE SET through = greatest(p.through, excluded.through),
			meta = coalesce(excluded.meta, p.meta)`, ids, through, metas)
	if err != nil {
		return fmt.Errorf("import power workers: %w", err)
	}
	return nil
}

// ImportCounts are what ImportLogs read from the bbolt store and what of
// it was new to the database.
type ImportCounts struct {
	// Read from the bbolt store.
	UsageRows, UsageTotals, Events, PowerBuckets, PowerWorkers int
	// New to the database: rows and events not there before. Totals,
	// buckets and workers are written over, so have no such count.
	NewUsageRows, NewEvents int
}

// importBatch is how many records one import statement takes.
const importBatch = 5000

// batches gathers records and hands them to flush size at a time.
type batches[T any] struct {
	size  int
	items []T
	flush func([]T) error
}

func newBatches[T any](flush func([]T) error) *batches[T] {
	return &batches[T]{size: importBatch, flush: flush}
}

// add gathers v and flushes a full batch.
func (b *batches[T]) add(v T) error {
	b.items = append(b.items, v)
	if len(b.items) < b.size {
		return nil
	}
	return b.done()
}

// done flushes the records gathered since the last batch, if any.
func (b *batches[T]) done() error {
	if len(b.items) == 0 {
		return nil
	}
	err := b.flush(b.items)
	b.items = b.items[:0]
	return err
}

// ImportLogs copies the usage log and its totals, the worker events and
// the power history of src into the database, in statements of
// importBatch records, and returns the counts. It reads src in one read
// transaction per kind, so src must not be written meanwhile (a stopped
// gateway's store). Running it again changes nothing; Inventory of both
// sides tells whether the copy is whole.
func (s *Store) ImportLogs(ctx context.Context, src *bolt.Store) (ImportCounts, error) {
	var c ImportCounts
	rows := newBatches(func(rows []ImportedRow) error {
		n, err := s.ImportUsageRows(ctx, rows)
		c.NewUsageRows += n
		return err
	})
	err := src.EachUsageRow(func(orgID string, row api.UsageRow, data []byte) error {
		c.UsageRows++
		return rows.add(ImportedRow{OrgID: orgID, Row: row, Data: data})
	})
	if err == nil {
		err = rows.done()
	}
	if err != nil {
		return c, err
	}

	totals := newBatches(func(totals []bolt.UsageTotal) error { return s.ImportUsageTotals(ctx, totals) })
	err = src.EachUsageTotal(func(t bolt.UsageTotal) error {
		c.UsageTotals++
		return totals.add(t)
	})
	if err == nil {
		err = totals.done()
	}
	if err != nil {
		return c, err
	}

	events := newBatches(func(events []ImportedEvent) error {
		n, err := s.ImportEvents(ctx, events)
		c.NewEvents += n
		return err
	})
	err = src.EachEvent(func(orgID string, ev api.WorkerEvent, data []byte) error {
		c.Events++
		return events.add(ImportedEvent{OrgID: orgID, Event: ev, JSON: data})
	})
	if err == nil {
		err = events.done()
	}
	if err != nil {
		return c, err
	}

	buckets := newBatches(func(buckets []bolt.PowerBucket) error {
		_, err := s.ImportPowerBuckets(ctx, buckets)
		return err
	})
	err = src.EachPowerBucket(func(b bolt.PowerBucket) error {
		c.PowerBuckets++
		return buckets.add(b)
	})
	if err == nil {
		err = buckets.done()
	}
	if err != nil {
		return c, err
	}

	var workers []ImportedPowerWorker
	err = src.EachPowerWorker(func(id string, st powerlog.Stored) error {
		workers = append(workers, ImportedPowerWorker{WorkerID: id, Stored: st})
		return nil
	})
	c.PowerWorkers = len(workers)
	if err == nil && len(workers) > 0 {
		err = s.ImportPowerWorkers(ctx, workers)
	}
	return c, err
}
