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
		wake: make(chan struct{}, 1)}
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

// Flush commits what is pending now. It does not wait for a commit Run
// has already started.
func (w *Writer) Flush() error { return w.commit() }

func (w *Writer) commit() error {
	w.mu.Lock()
	batch := w.pending
	w.pending = nil
	dropped := w.dropped
	w.dropped = 0
	w.mu.Unlock()
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
