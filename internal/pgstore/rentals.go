package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/svc-dev/svc/internal/rental"
)

// ErrFenced means a rental write was refused because the replica is no
// longer the home of the rental's organisation at the epoch it wrote
// under: another replica took the organisation over.
var ErrFenced = errors.New("this replica is no longer the organisation's home it writes as")

// ErrSetOnce means a rental record would change a billing timestamp
// (started_at, stop_requested_at, stopped_at) that was already written.
var ErrSetOnce = errors.New("a rental's billing timestamps are written once")

// schemaRentalOrgs is version 6: rentals are read an organisation at a
// time, by the home that runs them. A build from before it ran every
// rental on the leader and must not run beside the homes.
const schemaRentalOrgs = `
CREATE INDEX svc_rentals_org ON svc_rentals ((record->>'org_id'));
`

// Rentals is the rental ledger (rental.Ledger) of one replica, which
// writes the rentals of the organisations it is the home of.
type Rentals struct {
	s         *Store
	replicaID string
}

// Rentals returns replicaID's ledger.
func (s *Store) Rentals(replicaID string) *Rentals { return &Rentals{s: s, replicaID: replicaID} }

// ledgerTimeout bounds a ledger operation, whose interface takes no context.
const ledgerTimeout = 30 * time.Second

// billing is what Save reads of a record: the timestamps billing counts
// between.
type billing struct {
	StartedAt       *time.Time `json:"started_at"`
	StopRequestedAt *time.Time `json:"stop_requested_at"`
	StoppedAt       *time.Time `json:"stopped_at"`
}

// Save writes a rental's record if the replica is still the home of its
// organisation at f's epoch, in one statement: the home's row is
// share-locked by the write, so a claim by another replica either waits
// for it or, committed first, makes it fail. A billing timestamp once
// written cannot change or go away.
func (r *Rentals) Save(f rental.Fence, id string, record []byte) error {
	var b billing
	if err := json.Unmarshal(record, &b); err != nil {
		return fmt.Errorf("save rental %s: %w", id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer cancel()
	var saved bool
	err := r.s.pool.QueryRow(ctx, `
		WITH fence AS (
			SELECT 1 FROM svc_org_homes WHERE org_id = $8 AND replica_id = $1 AND epoch = $2 FOR SHARE
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
		r.replicaID, f.Epoch, id, string(record), b.StartedAt, b.StopRequestedAt, b.StoppedAt, f.OrgID).Scan(&saved)
	if errors.Is(err, pgx.ErrNoRows) {
		err = r.refused(ctx, f)
	}
	if err != nil {
		return fmt.Errorf("save rental %s: %w", id, err)
	}
	return nil
}

// refused tells why Save wrote nothing.
func (r *Rentals) refused(ctx context.Context, f rental.Fence) error {
	var held bool
	if err := r.s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM svc_org_homes WHERE org_id = $1 AND replica_id = $2 AND epoch = $3)",
		f.OrgID, r.replicaID, f.Epoch).Scan(&held); err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("%w (organisation %s, replica %s, epoch %d)", ErrFenced, f.OrgID, r.replicaID, f.Epoch)
	}
	return ErrSetOnce
}

// All returns every rental record.
func (r *Rentals) All() ([][]byte, error) {
	return r.records("SELECT record FROM svc_rentals ORDER BY id")
}

// Org returns the records of one organisation's rentals.
func (r *Rentals) Org(orgID string) ([][]byte, error) {
	return r.records("SELECT record FROM svc_rentals WHERE record->>'org_id' = $1 ORDER BY id", orgID)
}

func (r *Rentals) records(sql string, args ...any) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer cancel()
	rows, _ := r.s.pool.Query(ctx, sql, args...)
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
