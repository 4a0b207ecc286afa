package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/svc-dev/svc/internal/account"
)

// ImportAccounts copies a single host's account records, for a migration:
// each record is written as it is, over one of the same id.
func (s *Store) ImportAccounts(recs account.Records) error {
	return s.WriteAccounts(func(w account.Writer) error {
		for _, o := range recs.Orgs {
			if err := w.PutOrg(o); err != nil {
				return err
			}
		}
		for _, u := range recs.Users {
			if err := w.PutUser(u); err != nil {
				return err
			}
		}
		for _, m := range recs.Members {
			if err := w.PutMember(m); err != nil {
				return err
			}
		}
		for _, k := range recs.Keys {
			if err := w.PutKey(k); err != nil {
				return err
			}
		}
		for _, t := range recs.WorkerTokens {
			if err := w.PutWorkerToken(t); err != nil {
				return err
			}
		}
		for prefix, t := range recs.LastUsed {
			if err := w.PutLastUsed(prefix, t); err != nil {
				return err
			}
		}
		return nil
	})
}

// ImportRentals copies a single host's rental records, for a migration,
// outside any leader's fence: no replica leads a database being filled. A
// rental already in the database is left as it is, so that a migration
// run again changes nothing. It returns how many it added.
func (s *Store) ImportRentals(ctx context.Context, records [][]byte) (int, error) {
	added := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, raw := range records {
			var r struct {
				ID string `json:"id"`
				billing
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("decode rental: %w", err)
			}
			if r.ID == "" {
				return errors.New("a rental record without an id")
			}
			tag, err := tx.Exec(ctx, `INSERT INTO svc_rentals (id, record, started_at, stop_requested_at, stopped_at, saved_at)
				VALUES ($1, $2, $3, $4, $5, now()) ON CONFLICT (id) DO NOTHING`,
				r.ID, string(raw), r.StartedAt, r.StopRequestedAt, r.StoppedAt)
			if err != nil {
				return err
			}
			added += int(tag.RowsAffected())
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: import rentals: %w", err)
	}
	return added, nil
}

// CountRentals is how many rentals the ledger holds.
func (s *Store) CountRentals(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM svc_rentals").Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: count rentals: %w", err)
	}
	return n, nil
}
