package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrFenced means a write was refused because the replica no longer holds
// the lease (and epoch) it wrote under: another replica took over.
var ErrFenced = errors.New("this replica no longer holds the lease it writes under")

// ErrSetOnce means a rental record would change a billing timestamp
// (started_at, stop_requested_at, stopped_at) that was already written.
var ErrSetOnce = errors.New("a rental's billing timestamps are written once")

// Fence is the lease a replica writes under: writes succeed only while the
// leader row still names this replica and epoch. A lease that expired but
// that nobody took over yet still admits them: no other replica acts.
type Fence struct {
	ReplicaID string
	Epoch     int64
}

// Rentals is the rental ledger (rental.Ledger) of a replica holding fence.
type Rentals struct {
	s     *Store
	fence Fence
}

// Rentals returns the ledger writing under fence.
func (s *Store) Rentals(f Fence) *Rentals { return &Rentals{s: s, fence: f} }

// ledgerTimeout bounds a ledger operation, whose interface takes no context.
const ledgerTimeout = 30 * time.Second

// billing is what Save reads of a record: the timestamps billing counts
// between.
type billing struct {
	StartedAt       *time.Time `json:"started_at"`
	StopRequestedAt *time.Time `json:"stop_requested_at"`
	StoppedAt       *time.Time `json:"stopped_at"`
}

// Save writes a rental's record if the fence still holds, in one
// statement: the leader row is share-locked by the write, so a takeover
// either waits for it or, committed first, makes it fail. A billing
// timestamp once written cannot change or go away.
func (r *Rentals) Save(id string, record []byte) error {
	var b billing
	if err := json.Unmarshal(record, &b); err != nil {
		return fmt.Errorf("save rental %s: %w", id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer cancel()
	var saved bool
	err := r.s.pool.QueryRow(ctx, `
		WITH fence AS (
			SELECT 1 FROM svc_leader WHERE replica_id = $1 AND epoch = $2 FOR SHARE
		)
		INSERT INTO svc_rentals AS r (id, record, started_at, stop_requested_at, stopped_at, saved_at)
		SELECT $3, $4, $5, $6, $7, now() FROM fence
		ON CONFLICT (id) DO UPDATE SET
			record = excluded.record,
			started_at = excluded.started_at,
			stop_requested_at = excluded.stop_requested_at,
			stopped_at = excluded.stopped_at,
			saved_at = excluded.saved_at
		WHERE (r.started_at IS NULL OR r.started_at = excluded.started_at)
		  AND (r.stop_requested_at IS NULL OR r.stop_requested_at = excluded.stop_requested_at)
		  AND (r.stopped_at IS NULL OR r.stopped_at = excluded.stopped_at)
		RETURNING true`,
		r.fence.ReplicaID, r.fence.Epoch, id, string(record), b.StartedAt, b.StopRequestedAt, b.StoppedAt).Scan(&saved)
	if errors.Is(err, pgx.ErrNoRows) {
		err = r.refused(ctx)
	}
	if err != nil {
		return fmt.Errorf("save rental %s: %w", id, err)
	}
	return nil
}

// refused tells why Save wrote nothing.
func (r *Rentals) refused(ctx context.Context) error {
	var held bool
	if err := r.s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM svc_leader WHERE replica_id = $1 AND epoch = $2)",
		r.fence.ReplicaID, r.fence.Epoch).Scan(&held); err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("%w (replica %s, epoch %d)", ErrFenced, r.fence.ReplicaID, r.fence.Epoch)
	}
	return ErrSetOnce
}

// All returns every rental record.
func (r *Rentals) All() ([][]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer cancel()
	rows, _ := r.s.pool.Query(ctx, "SELECT record FROM svc_rentals ORDER BY id")
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([]byte, error) {
		var b []byte
		err := row.Scan(&b)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("read rentals: %w", err)
	}
	return out, nil
}
