package bolt

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// record is one pending write.
type record func(tx *bbolt.Tx) error

// Writer commits records in groups, every interval or once enough are
// pending, so that a burst of requests costs one transaction (two fsyncs)
// instead of one each. A crash loses at most the records of one interval.
type Writer struct {
	db    *bbolt.DB
	every time.Duration
	batch int
	limit int
	log   *slog.Logger

	mu      sync.Mutex
	pending []record
	dropped int
	wake    chan struct{}
	// queued counts the records ever added and committed how many of
	// them a finished commit covered; committedCh is closed, and
	// replaced, at each commit, for Sync's waiters.
	queued, committed uint64
	committedCh       chan struct{}

	// cmu makes commits one at a time, so committed only moves past
	// records whose transaction has ended.
	cmu sync.Mutex
}

// WriterOptions tune a Writer.
type WriterOptions struct {
	// Every is the longest a record waits before it is committed.
	Every time.Duration
	// Batch commits early once this many records are pending.
	Batch int
	// Limit bounds the pending records; beyond it records are dropped and
	// counted, so a stuck disk cannot take the server's memory with it.
	Limit  int
	Logger *slog.Logger
}

// NewWriter returns a writer; Run commits.
func (s *Store) NewWriter(o WriterOptions) *Writer {
	if o.Every <= 0 {
		o.Every = 100 * time.Millisecond
	}
	if o.Batch <= 0 {
		o.Batch = 5000
	}
	if o.Limit <= 0 {
		o.Limit = 1_000_000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Writer{db: s.db, every: o.Every, batch: o.Batch, limit: o.Limit, log: o.Logger,
		wake: make(chan struct{}, 1), committedCh: make(chan struct{})}
}

// add queues a record without blocking.
func (w *Writer) add(r record) {
	w.mu.Lock()
	if len(w.pending) >= w.limit {
		w.dropped++
		w.mu.Unlock()
		return
	}
	w.pending = append(w.pending, r)
	w.queued++
	full := len(w.pending) >= w.batch
	w.mu.Unlock()
	if full {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Run commits until ctx ends, then commits what is left and returns.
func (w *Writer) Run(ctx context.Context) error {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return w.commit()
		case <-t.C:
		case <-w.wake:
		}
		if err := w.commit(); err != nil {
			// The records are gone with the failed transaction; say so once
			// per failure and keep serving.
			w.log.Error("group commit failed", "err", err)
		}
	}
}

// Flush commits what is pending now.
func (w *Writer) Flush() error { return w.commit() }

// Sync returns once every record added before the call is committed (or
// its commit failed), asking Run to commit at once rather than at its next
// tick. Readers call it so that what a client was answered before it reads
// (its request's usage row) is in what it reads: with nothing pending it
// returns at once.
func (w *Writer) Sync(ctx context.Context) error {
	w.mu.Lock()
	target := w.queued
	for w.committed < target {
		ch := w.committedCh
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
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

func (w *Writer) commit() error {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	w.mu.Lock()
	batch := w.pending
	w.pending = nil
	upTo := w.queued
	dropped := w.dropped
	w.dropped = 0
	w.mu.Unlock()
	// Whatever happens to the batch, its waiters are released: a failed
	// commit has lost the records, and waiting longer would not bring
	// them back.
	defer func() {
		w.mu.Lock()
		if upTo > w.committed {
			w.committed = upTo
			close(w.committedCh)
			w.committedCh = make(chan struct{})
		}
		w.mu.Unlock()
	}()
	if dropped > 0 {
		w.log.Error("records dropped: the writer fell behind", "dropped", dropped)
	}
	if len(batch) == 0 {
		return nil
	}
	err := w.db.Update(func(tx *bbolt.Tx) error {
		for _, r := range batch {
			if err := r(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("commit %d records: %w", len(batch), err)
	}
	return nil
}
