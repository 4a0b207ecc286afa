package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/store"
)

// Events stores worker events through a Writer, as a time log (see
// timeKey).
type Events struct {
	store *Store
	w     *Writer
	seq   atomic.Uint64
}

// Events returns the event store writing through w.
func (s *Store) Events(w *Writer) *Events {
	e := &Events{store: s, w: w}
	startSeq(&e.seq)
	return e
}

// RecordEvent queues an event; it never blocks. While the store cannot
// write, the event waits in the writer's backlog; at the backlog's bound it
// is dropped and counted (see Writer).
func (e *Events) RecordEvent(orgID string, ev api.WorkerEvent) {
	key := timeKey(orgID, ev.CreatedAt, e.seq.Add(1))
	data, err := json.Marshal(ev)
	if err != nil {
		// Only a field JSON cannot carry gets here; the event is not
		// worth failing its caller over.
		e.w.log.Error("worker event not stored", "err", err)
		return
	}
	e.w.add(kindEvent, len(key)+len(data), func(tx *txn) error {
		return tx.Bucket(bucketEvents).Put(key, data)
	})
}

// EventQuery filters and pages a listing.
type EventQuery = store.EventQuery

// ListEvents returns an organisation's events, newest first.
func (e *Events) ListEvents(orgID string, q EventQuery) ([]api.WorkerEvent, error) {
	var keep func(*api.WorkerEvent) bool
	if q.WorkerID != "" || q.EventType != "" {
		keep = func(ev *api.WorkerEvent) bool {
			return (q.WorkerID == "" || ev.WorkerID == q.WorkerID) && (q.EventType == "" || ev.EventType == q.EventType)
		}
	}
	return newestPage[api.WorkerEvent](context.Background(), e.store.db, bucketEvents, orgID, q.Offset, q.Limit, nil, keep)
}

// LastEvent returns workerID's newest event. Only events that name the
// worker are decoded.
func (e *Events) LastEvent(ctx context.Context, orgID, workerID string) (api.WorkerEvent, bool, error) {
	id, err := json.Marshal(workerID)
	if err != nil {
		return api.WorkerEvent{}, false, err
	}
	mark := append([]byte(`"worker_id":`), id...)
	evs, err := newestPage(ctx, e.store.db, bucketEvents, orgID, 0, 1,
		func(v []byte) bool { return bytes.Contains(v, mark) },
		func(ev *api.WorkerEvent) bool { return ev.WorkerID == workerID })
	if err != nil || len(evs) == 0 {
		return api.WorkerEvent{}, false, err
	}
	return evs[0], true, nil
}

// PruneEvents deletes events older than before, at most max of them.
func (e *Events) PruneEvents(before time.Time, max int) (int, error) {
	return e.store.pruneBefore(bucketEvents, before, max)
}
