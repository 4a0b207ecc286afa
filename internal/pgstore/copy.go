package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/svc-dev/svc/internal/account"
)

// ImportAccounts copies a single host's account records, for a migration:
// each record is written as it is, over one of the same id. An
// organisation or user whose name the database already gives to another
// id refuses the whole copy, naming both: names are unique, and the two
// are different accounts, not the same one copied again.
func (s *Store) ImportAccounts(ctx context.Context, recs account.Records) error {
	if err := s.nameClashes(ctx, recs); err != nil {
		return err
	}
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

// nameClashes finds the organisations and users of recs whose names the
// database holds under other ids.
func (s *Store) nameClashes(ctx context.Context, recs account.Records) error {
	var clashes []string
	check := func(kind, table string, ids, names []string) error {
		rows, err := s.pool.Query(ctx, `SELECT t.name, t.id, m.id FROM `+table+` t
			JOIN unnest($1::text[], $2::text[]) AS m(id, name) ON t.name = m.name AND t.id <> m.id
			ORDER BY t.name`, ids, names)
		if err != nil {
			return fmt.Errorf("pgstore: import accounts: %w", err)
		}
		var name, theirs, ours string
		_, err = pgx.ForEachRow(rows, []any{&name, &theirs, &ours}, func() error {
			clashes = append(clashes, fmt.Sprintf("%s %q is %s in the database and %s in the data directory", kind, name, theirs, ours))
			return nil
		})
		if err != nil {
			return fmt.Errorf("pgstore: import accounts: %w", err)
		}
		return nil
	}
	var ids, names []string
	for _, o := range recs.Orgs {
		ids, names = append(ids, o.ID), append(names, o.Name)
	}
	if err := check("organisation", "svc_orgs", ids, names); err != nil {
		return err
	}
	ids, names = ids[:0], names[:0]
	for _, u := range recs.Users {
		ids, names = append(ids, u.ID), append(names, u.Name)
	}
	if err := check("user", "svc_users", ids, names); err != nil {
		return err
	}
	if len(clashes) > 0 {
		return fmt.Errorf("nothing was copied: the database gives these names to other accounts; migrate into a database of its own, or rename one of each pair first:\n  %s", strings.Join(clashes, "\n  "))
	}
	return nil
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
