package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/svc-dev/svc/internal/bolt"
)

// ShipBatch is how many outbox records one shipment takes: one
// transaction, whose cost is mostly per statement rather than per row.
const ShipBatch = 5000

// Retry delays of a failing shipment: the first, doubled per failure up
// to the last.
const (
	shipRetryFirst = 100 * time.Millisecond
	shipRetryMax   = 2 * time.Second
)

// Local is what a replica records through its outbox and reads from the
// database: the stores the server uses in cluster mode, and the shipper
// that moves the outbox's records into the database. The server runs
// Shipper.Run, and the outbox's writer, for as long as it runs.
type Local struct {
	Shipper *Shipper
	Usage   *Usage
	Events  *Events
	Power   *Power
}

// Local returns the stores recording through box, whose Writer must be
// running, and shipping to s. There must be one per outbox.
func (s *Store) Local(box *bolt.Outbox, log *slog.Logger) *Local {
	if log == nil {
		log = s.log
	}
	parts := newPartitions()
	sh := &Shipper{s: s, box: box, w: box.Writer(), parts: parts, log: log, batch: ShipBatch,
		wake: make(chan struct{}, 1), settled: make(chan struct{})}
	return &Local{
		Shipper: sh,
		Usage:   &Usage{s: s, box: box, ship: sh, parts: parts, pruneBatch: usagePruneBatch},
		Events:  &Events{s: s, box: box},
		Power:   &Power{s: s, box: box, log: log},
	}
}

// Shipper moves the outbox's records into the database, oldest first, in
// shipments of up to ShipBatch records, each one transaction, and lets
// them go from the outbox once committed. A crash between the commit and
// letting them go sends them again on restart, which changes nothing:
// usage rows and events are keyed, and power reports apply only past the
// worker's stored through (see insertUsage, insertEvents,
// addPowerThrough).
//
// While the database fails, the records wait in the outbox on the local
// disk, and the shipment is tried again after a delay that doubles from
// 0.1 s to 2 s.
type Shipper struct {
	s     *Store
	box   *bolt.Outbox
	w     *bolt.Writer
	parts *partitions
	log   *slog.Logger
	batch int
	wake  chan struct{}

	mu sync.Mutex
	// shipped is the sequence of the last record committed to the
	// database; the outbox may still hold it when letting it go failed.
	shipped uint64
	failing bool
	since   time.Time
	lastErr error
	// settled is closed, and replaced, when a shipment ends, for Sync.
	settled chan struct{}
	stats   ShipStats

	// afterCommit, when set (by tests), runs after a shipment's commit
	// and before the outbox lets its records go: an error it returns
	// stands for a crash there.
	afterCommit func(items []bolt.OutboxItem) error
}

// ShipStats count what shipments did, since the shipper started.
type ShipStats struct {
	// Shipments counts the committed transactions; Records the records
	// they held.
	Shipments, Records uint64
	// Duplicates counts usage rows the database had already: sent again
	// after a crash or an unsure commit.
	Duplicates uint64
	// Dropped counts records given up: unreadable in the outbox, or
	// refused by the database on their own (a value it cannot hold).
	Dropped uint64
}

// ShipState is the shipper's state now, for metrics and cluster status.
type ShipState struct {
	// Records wait in the outbox, the oldest recorded at Oldest (zero
	// when none waits).
	Records int
	Oldest  time.Time
	// Failing is true while shipments fail, since Since; Err is the last
	// failure.
	Failing bool
	Since   time.Time
	Err     error
	ShipStats
}

// State returns the shipper's state now.
func (sh *Shipper) State() ShipState {
	records, oldest := sh.Depth()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := ShipState{Records: records, Oldest: oldest, Failing: sh.failing, Err: sh.lastErr, ShipStats: sh.stats}
	if sh.failing {
		st.Since = sh.since
	}
	return st
}

// Depth is how many records wait in the outbox and when the oldest was
// recorded (zero when none waits). The outbox cannot be read only if the
// local store is broken: that is logged and counted as empty.
func (sh *Shipper) Depth() (records int, oldest time.Time) {
	records, oldest, err := sh.box.Depth()
	if err != nil {
		sh.log.Error("outbox depth", "err", err)
	}
	return records, oldest
}

func (sh *Shipper) signal() {
	select {
	case sh.wake <- struct{}{}:
	default:
	}
}

// Run ships until ctx ends. What it has not shipped stays in the outbox,
// for the next run.
func (sh *Shipper) Run(ctx context.Context) error {
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	var (
		failures int
		failedAt time.Time
	)
	for {
		more, err := sh.shipOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			failures++
			if failures == 1 {
				failedAt = time.Now()
				records, oldest := sh.Depth()
				sh.log.Error("shipping to PostgreSQL failing: records kept in the outbox and retried",
					"err", err, "outbox_records", records, "outbox_oldest", oldest)
			}
			retry.Reset(shipRetryDelay(failures))
			select {
			case <-ctx.Done():
				return nil
			case <-retry.C:
			}
			continue
		}
		if failures > 0 {
			sh.log.Warn("shipping to PostgreSQL recovered", "failures", failures,
				"for", time.Since(failedAt).Round(time.Millisecond).String())
			failures = 0
		}
		if more {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sh.box.Committed():
		case <-sh.wake:
		}
	}
}

// shipRetryDelay is the wait before try n+1 of a failing shipment.
func shipRetryDelay(n int) time.Duration {
	d := shipRetryFirst
	for i := 1; i < n && d < shipRetryMax; i++ {
		d *= 2
	}
	return min(d, shipRetryMax)
}

// Sync returns once every record committed to the outbox before the
// call, and every one its writer held then, is in the database: for a
// read that follows to see them. While shipments fail it returns an
// error wrapping bolt.ErrBehind at once, as the writer's Sync does while
// the local disk fails.
func (sh *Shipper) Sync(ctx context.Context) error {
	if err := sh.w.Sync(ctx); err != nil {
		return err
	}
	target, err := sh.box.Last()
	if err != nil {
		return err
	}
	sh.mu.Lock()
	for sh.shipped < target {
		if sh.failing {
			err := fmt.Errorf("%w (shipping to PostgreSQL failing since %s): %w", bolt.ErrBehind,
				sh.since.UTC().Format(time.RFC3339), sh.lastErr)
			sh.mu.Unlock()
			return err
		}
		ch := sh.settled
		sh.mu.Unlock()
		sh.signal()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		sh.mu.Lock()
	}
	sh.mu.Unlock()
	return nil
}

// settle records how a shipment ended and wakes Sync's waiters.
func (sh *Shipper) settle(err error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if err != nil && !sh.failing {
		sh.since = time.Now()
	}
	sh.failing, sh.lastErr = err != nil, err
	close(sh.settled)
	sh.settled = make(chan struct{})
}

// shipOnce ships the oldest records of the outbox and lets them go; more
// is true when it took a full batch, so more may wait.
func (sh *Shipper) shipOnce(ctx context.Context) (more bool, err error) {
	defer func() { sh.settle(err) }()
	items, err := sh.box.Peek(sh.batch)
	if err != nil || len(items) == 0 {
		return false, err
	}
	sh.mu.Lock()
	shipped := sh.shipped
	sh.mu.Unlock()
	// Records up to shipped are in the database already: letting them go
	// failed last time.
	fresh := items
	for len(fresh) > 0 && fresh[0].Seq <= shipped {
		fresh = fresh[1:]
	}
	if len(fresh) > 0 {
		if err := sh.ship(ctx, fresh); err != nil {
			return false, err
		}
		sh.mu.Lock()
		sh.shipped = fresh[len(fresh)-1].Seq
		sh.stats.Shipments++
		sh.stats.Records += uint64(len(fresh))
		sh.mu.Unlock()
		if sh.afterCommit != nil {
			if err := sh.afterCommit(fresh); err != nil {
				return false, err
			}
		}
	}
	if err := sh.box.Ack(items[len(items)-1].Seq); err != nil {
		return false, err
	}
	return len(items) == sh.batch, nil
}

// shipment is a batch of records as the statements that apply them take
// them.
type shipment struct {
	usage  usageColumns
	events eventColumns
	power  []*bolt.PowerAddition
	times  []time.Time
}

func (sh *Shipper) shipmentOf(items []bolt.OutboxItem) *shipment {
	m := &shipment{}
	for i := range items {
		it := &items[i]
		if it.Err != nil {
			sh.log.Error("outbox record unreadable: dropped", "seq", it.Seq, "err", it.Err)
			sh.mu.Lock()
			sh.stats.Dropped++
			sh.mu.Unlock()
			continue
		}
		switch it.Kind {
		case bolt.OutboxUsage:
			m.usage.add(it.OrgID, &it.Row, it.RowData)
			m.times = append(m.times, it.Row.CreatedAt)
		case bolt.OutboxEvent:
			m.events.add(it.OrgID, &it.Event, it.EventJSON)
		case bolt.OutboxPower:
			m.power = append(m.power, &it.Power)
		}
	}
	return m
}

// ship writes items to the database in one transaction. A batch the
// database refuses for what one of its records holds is shipped record by
// record, so that the one it refuses is given up alone, as the writer
// gives up a record bbolt refuses.
func (sh *Shipper) ship(ctx context.Context, items []bolt.OutboxItem) error {
	m := sh.shipmentOf(items)
	if len(m.times) > 0 {
		now := time.Now()
		// This month's and the next are made ahead of their first rows.
		if err := sh.parts.ensure(ctx, sh.s, append(m.times, now, now.AddDate(0, 1, 0))...); err != nil {
			return err
		}
	}
	err := sh.apply(ctx, m)
	if noPartition(err) {
		// A partition known here was dropped (pruned, by this replica or
		// another): make it again for the rows that need it.
		sh.parts.forget()
		if err = sh.parts.ensure(ctx, sh.s, m.times...); err != nil {
			return err
		}
		err = sh.apply(ctx, m)
	}
	switch {
	case err == nil:
		return nil
	case !refused(err):
		return err
	case len(items) == 1:
		sh.log.Error("outbox record refused by PostgreSQL: dropped", "seq", items[0].Seq,
			"kind", items[0].Kind.String(), "err", err)
		sh.mu.Lock()
		sh.stats.Dropped++
		sh.mu.Unlock()
		return nil
	}
	for i := range items {
		if items[i].Err != nil {
			continue // given up above
		}
		if err := sh.ship(ctx, items[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

// refused is true for an error that the same statement would meet again:
// a value the database cannot hold or a constraint it breaks, not a
// connection or a server that failed.
func refused(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	switch pe.Code[:2] {
	case "21", "22", "23", "54":
		return true
	}
	return false
}

// apply writes a shipment in one transaction: its statements are sent
// together, in one round trip.
func (sh *Shipper) apply(ctx context.Context, m *shipment) error {
	var inserted int64
	b := &pgx.Batch{}
	if m.usage.len() > 0 {
		b.Queue(insertUsage, m.usage.args()...).QueryRow(func(row pgx.Row) error { return row.Scan(&inserted) })
	}
	if len(m.events.key) > 0 {
		b.Queue(insertEvents, m.events.args()...)
	}
	for _, p := range m.power {
		if err := queuePower(b, p); err != nil {
			return err
		}
	}
	if b.Len() == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, sh.s.pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("ship %d usage rows, %d events, %d power reports: %w",
			m.usage.len(), len(m.events.key), len(m.power), err)
	}
	sh.mu.Lock()
	sh.stats.Duplicates += uint64(int64(m.usage.len()) - inserted)
	sh.mu.Unlock()
	return nil
}
