package bolt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
)

// Events stores worker events through a Writer. Keys are
// org id, 0x00, big-endian nanoseconds, big-endian sequence, so one
// organisation's events are contiguous and in time order.
type Events struct {
	store *Store
	w     *Writer
	seq   atomic.Uint64
}

// Events returns the event store writing through w.
func (s *Store) Events(w *Writer) *Events { return &Events{store: s, w: w} }

func eventKey(orgID string, t time.Time, seq uint64) []byte {
	k := make([]byte, 0, len(orgID)+17)
	k = append(k, orgID...)
	k = append(k, 0)
	k = binary.BigEndian.AppendUint64(k, uint64(t.UnixNano()))
	return binary.BigEndian.AppendUint64(k, seq)
}

// RecordEvent queues an event; it never blocks.
func (e *Events) RecordEvent(orgID string, ev api.WorkerEvent) {
	key := eventKey(orgID, ev.CreatedAt, e.seq.Add(1))
	e.w.add(func(tx *bbolt.Tx) error {
		return putJSON(tx.Bucket(bucketEvents), key, ev)
	})
}

// EventQuery filters and pages a listing.
type EventQuery struct {
	WorkerID  string
	EventType string
	Limit     int
	Offset    int
}

// ListEvents returns an organisation's events, newest first.
func (e *Events) ListEvents(orgID string, q EventQuery) ([]api.WorkerEvent, error) {
	out := []api.WorkerEvent{}
	prefix := append([]byte(orgID), 0)
	end := append([]byte(orgID), 1)
	err := e.store.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketEvents).Cursor()
		k, v := c.Seek(end)
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		skipped := 0
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Prev() {
			var ev api.WorkerEvent
			if err := json.Unmarshal(v, &ev); err != nil {
				return fmt.Errorf("decode event: %w", err)
			}
			if (q.WorkerID != "" && ev.WorkerID != q.WorkerID) || (q.EventType != "" && ev.EventType != q.EventType) {
				continue
			}
			if skipped < q.Offset {
				skipped++
				continue
			}
			out = append(out, ev)
			if len(out) >= q.Limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// PruneEvents deletes events older than before, at most max of them.
func (e *Events) PruneEvents(before time.Time, max int) (int, error) {
	n := 0
	err := e.store.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		var old [][]byte
		_ = b.ForEach(func(k, _ []byte) error {
			if i := bytes.IndexByte(k, 0); i >= 0 && len(k) == i+17 {
				if int64(binary.BigEndian.Uint64(k[i+1:])) < before.UnixNano() && len(old) < max {
					old = append(old, append([]byte(nil), k...))
				}
			}
			return nil
		})
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(old)
		return nil
	})
	return n, err
}
