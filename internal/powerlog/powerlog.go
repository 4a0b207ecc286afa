// Package powerlog is workers' power history: which reported windows
// count, how they add up into buckets of three resolutions, how long each
// resolution is kept, and what the power endpoint and the workers list
// are told from them. A Store keeps the buckets; the rules are all here.
package powerlog

import (
	"cmp"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Store keeps the history. It stores what it is handed and reads back what
// it holds; it decides nothing.
type Store interface {
	// Workers calls fn with what is stored of every worker that ever
	// reported, beyond its buckets.
	Workers(fn func(workerID string, st Stored))
	// Add queues a report's additions, written together and without
	// blocking the caller: each delta added to the bucket it names, the
	// worker's through (Unix nanoseconds; 0 leaves it as it is) and its
	// channels (nil leaves them). A store that cannot write keeps the
	// report and retries it; one whose backlog is at its bound drops it
	// and counts it, and its windows are lost: Record has already told
	// the worker they were recorded.
	Add(workerID string, deltas []Delta, through int64, meta *Meta)
	// Buckets calls fn with the start (Unix seconds) and sums of each of
	// the worker's buckets of res seconds that starts in [first, last],
	// oldest first. The sums are valid only during the call.
	Buckets(workerID string, res, first, last int64, fn func(start int64, sums []Sum)) error
}

// Stored is what a store holds of a worker beyond its buckets.
type Stored struct {
	// Through is the end of the last window recorded, Unix nanoseconds;
	// zero when none was (a window cannot end at 1970-01-01T00:00:00Z).
	Through int64
	// Meta is nil when the worker's channels were never stored.
	Meta *Meta
}

// Meta is a worker's channels and how its whole machine is read.
type Meta struct {
	Channels []api.PowerChannel
	Machine  string
}

// maxSkew is how far in the future a window may end: a worker's clock
// that runs further ahead would move its recorded end past the present,
// and its next correct windows would then look like repeats.
const maxSkew = time.Minute

// Log records workers' reports into a Store and tells their history.
type Log struct {
	store Store
	log   *slog.Logger

	mu sync.Mutex
	// workers holds, per worker that ever reported, what the store holds
	// of it beyond its buckets, and ahead of the store: a report's through
	// and channels count from the moment it is queued, so a resend is
	// recognised before the report before it is committed.
	workers map[string]*worker
}

// worker is what is known of one worker beyond its buckets.
type worker struct {
	through  int64 // as Stored.Through
	channels []api.PowerChannel
	machine  string
	// stored is false until the channels and machine are queued to be
	// stored, so even a worker that never names them has a value.
	stored bool
}

// New returns the history kept in store, reading what it holds of every
// worker once, here, so that Record and Through never wait for it. log
// is told of windows that are dropped.
func New(store Store, log *slog.Logger) *Log {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Log{store: store, log: log, workers: map[string]*worker{}}
	store.Workers(func(id string, st Stored) {
		w := &worker{through: st.Through}
		if st.Meta != nil {
			w.channels, w.machine, w.stored = st.Meta.Channels, st.Meta.Machine, true
		}
		l.workers[id] = w
	})
	return l
}

// Record queues a worker's report to be stored and returns the windows it
// recorded, for the caller to count; it never blocks.
//
// A window that ends more than a minute after now is dropped: it comes
// from a clock that runs ahead. A window that starts before the end of the
// last one recorded for the worker was sent again after a reconnect and
// is skipped. Readings that cannot be right are dropped (see Check). A
// report without channels (or machine method) leaves the known ones.
func (l *Log) Record(workerID string, rep api.PowerReport, now time.Time) []Window {
	limit := now.Add(maxSkew).UnixNano()
	wins := make([]Window, 0, len(rep.Windows))
	for i := range rep.Windows {
		w, ok := Check(&rep.Windows[i])
		switch {
		case !ok:
			l.log.Warn("power window dropped", "worker", workerID, "start", rep.Windows[i].Start, "seconds", rep.Windows[i].Seconds)
		case w.End <= limit:
			wins = append(wins, w)
		}
	}
	// A report lists its windows oldest first; sorting anyway keeps one out
	// of order from being taken for a resend of the one after it.
	slices.SortStableFunc(wins, func(a, b Window) int { return cmp.Compare(a.Start, b.Start) })

	l.mu.Lock()
	st := l.workers[workerID]
	if st == nil {
		st = &worker{}
		l.workers[workerID] = st
	}
	fresh := wins[:0]
	for _, w := range wins {
		if w.Start < st.through {
			continue // sent again: already counted
		}
		fresh = append(fresh, w)
		st.through = w.End
	}
	through := st.through
	// A worker sends its channels with every report; they are copied and
	// stored only when they change.
	changed := !st.stored
	if len(rep.Channels) > 0 && !slices.EqualFunc(st.channels, rep.Channels, sameChannel) {
		st.channels = cloneChannels(rep.Channels)
		changed = true
	}
	if rep.Machine != "" && rep.Machine != st.machine {
		st.machine = rep.Machine
		changed = true
	}
	st.stored = true
	var meta *Meta
	if changed {
		// st.channels is replaced, never changed in place: the store may
		// read it after the lock is let go.
		meta = &Meta{Channels: st.channels, Machine: st.machine}
	}
	l.mu.Unlock()

	if len(fresh) == 0 {
		if !changed {
			return nil // nothing new: a resend, or a report with no windows
		}
		through = 0
	}
	l.store.Add(workerID, Split(fresh), through, meta)
	return fresh
}

// Through is the end of the last window recorded for the worker (zero
// when none was): the worker sends again only windows after it. It
// counts reports queued and not yet stored.
func (l *Log) Through(workerID string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.workers[workerID]; st != nil && st.through != 0 {
		return time.Unix(0, st.through).UTC()
	}
	return time.Time{}
}

// reported returns the worker's channels and machine method when it has
// recorded any window; ok is false when it never has.
func (l *Log) reported(workerID string) (channels []api.PowerChannel, machine string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.workers[workerID]
	if st == nil || st.through == 0 {
		return nil, "", false
	}
	return cloneChannels(st.channels), st.machine, true
}
