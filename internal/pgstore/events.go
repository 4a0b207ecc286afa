package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/store"
)

// eventColumns are a shipment's events as the arrays insertEvents takes.
type eventColumns struct {
	orgID, key       []string
	createdAt        []time.Time
	createdNs        []int64
	workerID, evType []string
	payload          []string
}

// eventKey is what makes a re-sent event the same one: its id, which the
// fleet gives every event it makes, or else a hash of its organisation
// and JSON, which hold its time to the nanosecond.
func eventKey(orgID string, ev *api.WorkerEvent, data []byte) string {
	if ev.ID != "" {
		return "id:" + pgText(ev.ID)
	}
	h := sha256.New()
	h.Write([]byte(orgID))
	h.Write([]byte{0})
	h.Write(data)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)[:16])
}

func (c *eventColumns) add(orgID string, ev *api.WorkerEvent, data []byte) {
	c.orgID = append(c.orgID, pgText(orgID))
	c.key = append(c.key, eventKey(orgID, ev, data))
	c.createdAt = append(c.createdAt, ev.CreatedAt)
	c.createdNs = append(c.createdNs, ev.CreatedAt.UnixNano())
	c.workerID = append(c.workerID, pgText(ev.WorkerID))
	c.evType = append(c.evType, pgText(ev.EventType))
	// The json type keeps the text as given: JSON from encoding/json is
	// valid UTF-8 and escapes what text cannot hold, as jsonb would not
	// take (\u0000).
	c.payload = append(c.payload, string(data))
}

func (c *eventColumns) args() []any {
	return []any{c.orgID, c.key, c.createdAt, c.createdNs, c.workerID, c.evType, c.payload}
}

// insertEvents stores a shipment's events, each once however often it is
// sent: a re-sent one has the same key.
const insertEvents = `
INSERT INTO svc_worker_events (org_id, event_key, created_at, created_ns, worker_id, event_type, payload)
SELECT u.org_id, u.event_key, u.created_at, u.created_ns, u.worker_id, u.event_type, u.payload::json
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[], $5::text[], $6::text[], $7::text[])
	WITH ORDINALITY AS u(org_id, event_key, created_at, created_ns, worker_id, event_type, payload, ord)
ORDER BY u.ord
ON CONFLICT DO NOTHING`

// Events is the worker events log in PostgreSQL, recorded through the
// local outbox.
type Events struct {
	s   *Store
	box *bolt.Outbox
}

var _ store.Events = (*Events)(nil)

// RecordEvent queues an event in the outbox; it never blocks.
func (e *Events) RecordEvent(orgID string, ev api.WorkerEvent) { e.box.RecordEvent(orgID, ev) }

// ListEvents returns an organisation's events newest first, filtered and
// paged as bbolt's are.
func (e *Events) ListEvents(orgID string, q store.EventQuery) ([]api.WorkerEvent, error) {
	out := []api.WorkerEvent{}
	if q.Limit <= 0 {
		return out, nil
	}
	ctx, cancel := ctxFor()
	defer cancel()
	rows, err := e.s.pool.Query(ctx, `SELECT payload::text FROM svc_worker_events
		WHERE org_id = $1 AND ($2 = '' OR worker_id = $2) AND ($3 = '' OR event_type = $3)
		ORDER BY created_ns DESC, seq DESC LIMIT $4 OFFSET $5`,
		pgText(orgID), pgText(q.WorkerID), pgText(q.EventType), q.Limit, max(q.Offset, 0))
	if err != nil {
		return nil, fmt.Errorf("list worker events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("list worker events: %w", err)
		}
		var ev api.WorkerEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return nil, fmt.Errorf("decode worker event: %w", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list worker events: %w", err)
	}
	return out, nil
}

// LastEvent returns workerID's newest event.
func (e *Events) LastEvent(ctx context.Context, orgID, workerID string) (api.WorkerEvent, bool, error) {
	var data []byte
	err := e.s.pool.QueryRow(ctx, `SELECT payload::text FROM svc_worker_events
		WHERE org_id = $1 AND worker_id = $2 ORDER BY created_ns DESC, seq DESC LIMIT 1`,
		pgText(orgID), pgText(workerID)).Scan(&data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return api.WorkerEvent{}, false, nil
	case err != nil:
		return api.WorkerEvent{}, false, fmt.Errorf("last worker event: %w", err)
	}
	var ev api.WorkerEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return api.WorkerEvent{}, false, fmt.Errorf("decode worker event: %w", err)
	}
	return ev, true, nil
}

// WorkerHistory is what the events tell of one worker: its newest event,
// and its newest connect, which names its release, models and engines.
type WorkerHistory struct {
	Last, Connected api.WorkerEvent
}

// RecentWorkers is the history of each worker of orgID with an event
// since since, by worker id: what an organisation's new home reads of the
// workers its last home listed.
func (e *Events) RecentWorkers(ctx context.Context, orgID string, since time.Time) (map[string]WorkerHistory, error) {
	out := map[string]WorkerHistory{}
	for _, q := range []struct {
		sql  string
		last bool
	}{
		{`SELECT DISTINCT ON (worker_id) payload::text FROM svc_worker_events
			WHERE org_id = $1 AND created_ns >= $2 ORDER BY worker_id, created_ns DESC, seq DESC`, true},
		{`SELECT DISTINCT ON (worker_id) payload::text FROM svc_worker_events
			WHERE org_id = $1 AND created_ns >= $2 AND event_type = 'connected' ORDER BY worker_id, created_ns DESC, seq DESC`, false},
	} {
		rows, err := e.s.pool.Query(ctx, q.sql, pgText(orgID), since.UnixNano())
		if err != nil {
			return nil, fmt.Errorf("recent workers: %w", err)
		}
		var data []byte
		_, err = pgx.ForEachRow(rows, []any{&data}, func() error {
			var ev api.WorkerEvent
			if err := json.Unmarshal(data, &ev); err != nil {
				return fmt.Errorf("decode worker event: %w", err)
			}
			h := out[ev.WorkerID]
			if q.last {
				h.Last = ev
			} else {
				h.Connected = ev
			}
			out[ev.WorkerID] = h
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("recent workers: %w", err)
		}
	}
	return out, nil
}

// PruneEvents deletes at most max events recorded before before, oldest
// first.
func (e *Events) PruneEvents(before time.Time, max int) (int, error) {
	if max <= 0 {
		return 0, nil
	}
	ctx, cancel := ctxFor()
	defer cancel()
	tag, err := e.s.pool.Exec(ctx, `DELETE FROM svc_worker_events WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM svc_worker_events WHERE created_ns < $1 ORDER BY created_ns LIMIT $2))`,
		before.UnixNano(), max)
	if err != nil {
		return 0, fmt.Errorf("prune worker events: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
