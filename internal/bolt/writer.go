package bolt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// recordKind is what a pending write holds, which decides what becomes of
// it when the backlog is at its bound.
type recordKind uint8

const (
	// kindUsage is a usage row and its totals: never dropped. At the bound
	// the server refuses new inference instead (Backlog.Refusing), and the
	// rows of requests already running are still queued.
	kindUsage recordKind = iota
	// kindEvent is a worker event: dropped and counted at the bound.
	kindEvent
	// kindPower is a power report: dropped and counted at the bound.
	kindPower
	numKinds
)

// record is one pending write: put applies it to tx, and may be run again
// in a later transaction when the one it ran in failed; size is roughly
// what it holds in memory.
type record struct {
	kind recordKind
	size int
	seq  uint64
	put  func(tx *txn) error
}

// txn is a commit's transaction, and what its usage rows add to the
// totals, written once per aggregate after every record is applied.
type txn struct {
	*bbolt.Tx
	totals *totalsBatch
}

// recordOverhead is added to what a record's caller counts of it (its
// encoded keys and values) for what holding it costs beside them: the
// closure and its captured values, the queue's slot and the slack of the
// allocations. Measured by TestBacklogSizeEstimate: a realistic usage
// row held 835 bytes of heap, of which its keys and values are 359. Since
// a commit builds the aggregates' keys, a row holds 571, of which 263 are
// counted: the estimate (743) errs a third high, so the bound is reached
// early rather than late.
const recordOverhead = 480

// maxRetryDelay caps the wait between tries of a failing commit: when
// space comes back, the backlog is written within about this long.
const maxRetryDelay = time.Second

// DefaultBacklog bounds the bytes of records waiting to be written (see
// WriterOptions.Backlog): about 80,000 usage rows, several minutes of a
// busy gateway's traffic held while the disk is full.
const DefaultBacklog = 64 << 20

// keyWriterToken, in bucketMeta, holds the token of the writer's last
// commit, so that a commit reported as failed that was written after all
// is recognised, and its records are not applied twice.
var keyWriterToken = []byte("writer_token")

// errLanded ends a transaction that found the previous, failed, commit
// written after all.
var errLanded = errors.New("the previous commit was written")

// ErrBehind means records are waiting for the store to take a write.
var ErrBehind = errors.New("records are waiting to be written")

// Writer commits records in groups, every interval or once enough are
// pending, so that a burst of requests costs one transaction (two fsyncs)
// instead of one each. A crash loses at most the records of one interval.
//
// A commit that fails (a full disk, an I/O error) loses nothing: its
// records stay at the head of the queue and are tried again, oldest
// first, after a delay that doubles up to maxRetryDelay, so they are
// written in order and once each when the store takes writes again. The
// backlog is bounded by bytes: at the bound, events and power reports are
// dropped and counted, usage rows never are, and Backlog says so, for the
// server to refuse new inference rather than serve it unaccounted.
type Writer struct {
	db    *bbolt.DB
	every time.Duration
	batch int
	limit int64
	log   *slog.Logger
	// update runs a write transaction: the database's Update, or in tests
	// one that fails as a full disk would.
	update func(fn func(*bbolt.Tx) error) error

	mu sync.Mutex
	// pending is oldest first; its head may have been tried and failed.
	// Only a commit, holding cmu, removes records, and only from the head
	// or from among the records it is trying.
	pending []record
	// writing is how many records at the head the commit in progress is
	// writing.
	writing int
	bytes   int64
	held    [numKinds]int
	// queued numbers the records ever added; each record holds its number.
	queued uint64
	wake   chan struct{}
	// settled is closed, and replaced, when a commit ends, for Sync.
	settled chan struct{}

	// The state of the store's writes, for Backlog.
	failing  bool // the last commit failed
	since    time.Time
	lastErr  error
	failures uint64
	dropped  [numKinds]uint64
	rejected uint64

	// cmu makes commits one at a time. What it guards besides:
	// totals, the running commit's sums of usage totals; unsure is the token of the last failed commit, which may have been
	// written after all (a failed fsync of its meta page), and unsureN how
	// many records at the head it held; 0 when none is in doubt.
	cmu     sync.Mutex
	totals  totalsBatch
	token   uint64
	unsure  uint64
	unsureN int
}

// WriterOptions tune a Writer.
type WriterOptions struct {
	// Every is the longest a record waits before it is committed.
	Every time.Duration
	// Batch commits early once this many records are pending, and bounds
	// the records of a transaction retried after a failure.
	Batch int
	// Backlog bounds, in bytes, the records waiting to be written: 0 is
	// DefaultBacklog. See Writer for what happens at the bound.
	Backlog int64
	Logger  *slog.Logger
}

// NewWriter returns a writer; Run commits.
func (s *Store) NewWriter(o WriterOptions) *Writer {
	if o.Every <= 0 {
		o.Every = 100 * time.Millisecond
	}
	if o.Batch <= 0 {
		o.Batch = 5000
	}
	if o.Backlog <= 0 {
		o.Backlog = DefaultBacklog
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Writer{db: s.db, update: s.db.Update, every: o.Every, batch: o.Batch, limit: o.Backlog, log: o.Logger,
		wake: make(chan struct{}, 1), settled: make(chan struct{}), token: uint64(time.Now().UnixNano())}
}

// signal asks Run to commit now.
func (w *Writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// add queues a record of kind holding size bytes of keys and values
// without blocking. At the bound, an event or power report is dropped.
func (w *Writer) add(kind recordKind, size int, put func(tx *txn) error) {
	size += recordOverhead
	w.mu.Lock()
	if kind != kindUsage && w.bytes >= w.limit {
		w.dropped[kind]++
		w.mu.Unlock()
		return
	}
	w.queued++
	w.pending = append(w.pending, record{kind: kind, size: size, seq: w.queued, put: put})
	w.bytes += int64(size)
	w.held[kind]++
	full := len(w.pending) >= w.batch && !w.failing
	w.mu.Unlock()
	if full {
		w.signal()
	}
}

// Run commits until ctx ends, then tries once more to commit what is
// left and returns; what it could not write is lost, and its error says
// how much.
func (w *Writer) Run(ctx context.Context) error {
	t := time.NewTicker(w.every)
	defer t.Stop()
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	var (
		waiting    bool // for retry, after a failure
		failures   int  // in a row
		failedAt   time.Time
		loggedAt   time.Time
		reported   [numKinds]uint64
		wasAtLimit bool
	)
	for {
		select {
		case <-ctx.Done():
			if err := w.commit(); err != nil {
				b := w.Backlog()
				return fmt.Errorf("%d usage rows, %d events and %d power reports not written: %w",
					b.UsageRows, b.Events, b.PowerReports, err)
			}
			return nil
		case <-t.C:
		case <-w.wake:
		case <-retry.C:
			waiting = false
		}
		if waiting {
			continue // only the retry timer commits while the store fails
		}
		err := w.commit()
		b := w.Backlog()
		switch {
		case err != nil:
			failures++
			if failures == 1 {
				failedAt = time.Now()
			}
			waiting = true
			retry.Reset(retryDelay(w.every, failures))
			if failures == 1 || time.Since(loggedAt) >= time.Minute {
				loggedAt = time.Now()
				w.log.Error("store writes failing: records kept and retried", "err", err, "failures", failures,
					"usage_rows", b.UsageRows, "events", b.Events, "power_reports", b.PowerReports,
					"backlog_bytes", b.Bytes, "backlog_limit", b.Limit)
			}
		case failures > 0:
			w.log.Warn("store writes recovered", "failures", failures, "for", time.Since(failedAt).Round(time.Millisecond).String())
			failures = 0
		}
		if b.Refusing != wasAtLimit {
			wasAtLimit = b.Refusing
			if b.Refusing {
				w.log.Error("write backlog at its bound: new inference is refused, events and power reports dropped",
					"backlog_bytes", b.Bytes, "backlog_limit", b.Limit)
			} else {
				w.log.Warn("write backlog below its bound again", "backlog_bytes", b.Bytes)
			}
		}
		if b.DroppedEvents != reported[kindEvent] || b.DroppedPower != reported[kindPower] {
			w.log.Error("records dropped: the write backlog is at its bound",
				"events", b.DroppedEvents-reported[kindEvent], "power_reports", b.DroppedPower-reported[kindPower])
			reported[kindEvent], reported[kindPower] = b.DroppedEvents, b.DroppedPower
		}
	}
}

// retryDelay is the wait before try n+1 of a failing commit: every,
// doubled per failure, at most maxRetryDelay.
func retryDelay(every time.Duration, n int) time.Duration {
	d := every
	for i := 1; i < n && d < maxRetryDelay; i++ {
		d *= 2
	}
	return min(d, maxRetryDelay)
}

// Flush commits what is pending now.
func (w *Writer) Flush() error { return w.commit() }

// Sync returns once every record added before the call is committed,
// asking Run to commit at once rather than at its next tick. Readers call
// it so that what a client was answered before it reads (its request's
// usage row) is in what it reads: with nothing pending it returns at once.
// While commits fail it returns an error wrapping ErrBehind at once: the
// records are kept, but a read would not see them.
func (w *Writer) Sync(ctx context.Context) error {
	w.mu.Lock()
	target := w.queued
	for len(w.pending) > 0 && w.pending[0].seq <= target {
		if w.failing {
			err := fmt.Errorf("%w (%d, the store failing since %s): %w", ErrBehind, len(w.pending),
				w.since.UTC().Format(time.RFC3339), w.lastErr)
			w.mu.Unlock()
			return err
		}
		ch := w.settled
		w.mu.Unlock()
		w.signal()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.mu.Lock()
	}
	w.mu.Unlock()
	return nil
}

// commit writes the records pending when it is called, oldest first, and
// stops at the first transaction that fails: its records stay at the head
// of the queue for the next try. A try after a failure writes at most
// batch records, so that a disk with a little room again makes progress;
// otherwise one transaction takes everything, as its fsyncs cost the same
// however much it holds.
func (w *Writer) commit() error {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	defer w.settle()
	w.mu.Lock()
	last := w.queued
	w.mu.Unlock()
	for {
		w.mu.Lock()
		most := len(w.pending)
		if w.failing {
			most = w.batch
		}
		n := 0
		for n < len(w.pending) && n < most && w.pending[n].seq <= last {
			n++
		}
		// Appends never touch the first n records, and only this commit
		// removes any, so they can be read without the lock.
		chunk := w.pending[:n:n]
		w.writing = n
		w.mu.Unlock()
		if n == 0 {
			return nil
		}
		if err := w.commitChunk(chunk); err != nil {
			return err
		}
	}
}

// commitChunk writes chunk, the head of the queue, in one transaction and
// removes from the queue what it settled: the chunk when it was written,
// or the records of a previous failed commit found written after all, or
// a record whose own write failed. It returns an error only when the
// transaction failed, with the chunk kept.
func (w *Writer) commitChunk(chunk []record) error {
	w.token++
	token := w.token
	ran := false
	bad := -1
	err := w.update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if w.unsure != 0 {
			if v := meta.Get(keyWriterToken); len(v) == 8 && binary.BigEndian.Uint64(v) == w.unsure {
				return errLanded
			}
		}
		ran = true
		w.totals.reset()
		t := &txn{Tx: tx, totals: &w.totals}
		for i, r := range chunk {
			if err := r.put(t); err != nil {
				bad = i
				return err
			}
		}
		if err := w.totals.write(tx, w.log); err != nil {
			return err
		}
		return meta.Put(keyWriterToken, u64(token))
	})
	if ran {
		// This transaction found the one in doubt unwritten, so it never
		// will be.
		w.unsure = 0
	}
	switch {
	case err == nil:
		w.settleHead(len(chunk), nil)
		return nil
	case errors.Is(err, errLanded):
		w.log.Warn("a commit reported as failed had been written: its records are not written again", "records", w.unsureN)
		w.settleHead(w.unsureN, nil)
		w.unsure = 0
		return nil
	case bad >= 0:
		// The record's own write failed, before the commit: nothing of the
		// transaction was written. Trying it again would fail every later
		// commit, so it alone is given up.
		w.log.Error("record not written: the store refused it", "kind", chunk[bad].kind.String(), "err", err)
		w.settleHead(0, &bad)
		return nil
	}
	if ran {
		w.unsure, w.unsureN = token, len(chunk)
	}
	w.mu.Lock()
	w.writing = 0
	if !w.failing {
		w.failing, w.since = true, time.Now()
	}
	w.failures++
	w.lastErr = err
	w.mu.Unlock()
	return fmt.Errorf("commit %d records: %w", len(chunk), err)
}

// settleHead removes the first n records of the queue, written, or the
// record at *bad, refused, and ends a run of failures.
func (w *Writer) settleHead(n int, bad *int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writing = 0
	drop := func(r *record) {
		w.bytes -= int64(r.size)
		w.held[r.kind]--
	}
	if bad != nil {
		drop(&w.pending[*bad])
		w.rejected++
		copy(w.pending[*bad:], w.pending[*bad+1:])
		w.pending[len(w.pending)-1] = record{}
		w.pending = w.pending[:len(w.pending)-1]
		return
	}
	for i := range n {
		drop(&w.pending[i])
	}
	clear(w.pending[:n])
	w.pending = w.pending[n:]
	if len(w.pending) == 0 {
		w.pending = nil // let a backlog's array go
	}
	w.failing, w.lastErr = false, nil
}

// settle wakes Sync's waiters after a commit.
func (w *Writer) settle() {
	w.mu.Lock()
	close(w.settled)
	w.settled = make(chan struct{})
	w.mu.Unlock()
}

// Backlog is the state of the writer's queue and of the store's writes.
type Backlog struct {
	// UsageRows, Events and PowerReports are the records waiting.
	UsageRows, Events, PowerReports int
	// Bytes is roughly the memory they hold; Limit the bound on it.
	Bytes, Limit int64
	// Refusing is true at the bound: new inference is refused until the
	// backlog is written.
	Refusing bool
	// Failing is true while commits fail, since Since; Err is the last
	// failure.
	Failing bool
	Since   time.Time
	Err     error
	// FailedCommits counts failed transactions, ever.
	FailedCommits uint64
	// DroppedEvents and DroppedPower count records dropped at the bound;
	// Rejected the records the store refused on their own (never retried).
	DroppedEvents, DroppedPower, Rejected uint64
}

// Backlog returns the writer's state now.
func (w *Writer) Backlog() Backlog {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := Backlog{
		UsageRows: w.held[kindUsage], Events: w.held[kindEvent], PowerReports: w.held[kindPower],
		Bytes: w.bytes, Limit: w.limit, Refusing: w.bytes >= w.limit,
		Failing: w.failing, Err: w.lastErr, FailedCommits: w.failures,
		DroppedEvents: w.dropped[kindEvent], DroppedPower: w.dropped[kindPower], Rejected: w.rejected,
	}
	if w.failing {
		b.Since = w.since
	}
	return b
}

// Cause says in a few words why commits fail: "disk full" for the
// commonest reason, else the error.
func (b Backlog) Cause() string {
	switch {
	case b.Err == nil:
		return ""
	case errors.Is(b.Err, syscall.ENOSPC):
		return "disk full"
	case errors.Is(b.Err, syscall.EDQUOT):
		return "disk quota exceeded"
	}
	return b.Err.Error()
}

func (k recordKind) String() string {
	switch k {
	case kindUsage:
		return "usage row"
	case kindEvent:
		return "worker event"
	}
	return "power report"
}
