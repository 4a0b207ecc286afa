package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/svc-dev/svc/internal/account"
)

// AccountsChannel is the channel every change of account records is
// notified on, with the new version as payload.
const AccountsChannel = "svc_accounts"

// accountsTimeout bounds one load or write of the account records, whose
// interface takes no context: a change waits at most this for the
// database.
const accountsTimeout = 30 * time.Second

// LoadAccounts reads every account record, in one snapshot.
func (s *Store) LoadAccounts() (account.Records, error) {
	ctx, cancel := context.WithTimeout(context.Background(), accountsTimeout)
	defer cancel()
	r := account.Records{LastUsed: map[string]time.Time{}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT version FROM svc_accounts_version").Scan(&r.Version); err != nil {
			return err
		}
		var err error
		if r.Orgs, err = loadJSON[account.Org](ctx, tx, "SELECT record FROM svc_orgs ORDER BY id"); err != nil {
			return err
		}
		if r.Users, err = loadJSON[account.User](ctx, tx, "SELECT record FROM svc_users ORDER BY id"); err != nil {
			return err
		}
		if r.Members, err = loadJSON[account.Member](ctx, tx, "SELECT record FROM svc_members ORDER BY org_id, user_id"); err != nil {
			return err
		}
		if r.Keys, err = loadJSON[account.Key](ctx, tx, "SELECT record FROM svc_api_keys ORDER BY id"); err != nil {
			return err
		}
		if r.WorkerTokens, err = loadJSON[account.WorkerToken](ctx, tx, "SELECT record FROM svc_worker_tokens ORDER BY id"); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, "SELECT prefix, at FROM svc_last_used")
		var prefix string
		var at time.Time
		_, err = pgx.ForEachRow(rows, []any{&prefix, &at}, func() error {
			r.LastUsed[prefix] = at.UTC()
			return nil
		})
		return err
	})
	if err != nil {
		return account.Records{}, fmt.Errorf("pgstore: load accounts: %w", err)
	}
	return r, nil
}

func loadJSON[T any](ctx context.Context, tx pgx.Tx, sql string) ([]T, error) {
	rows, _ := tx.Query(ctx, sql)
	var out []T
	var raw []byte
	_, err := pgx.ForEachRow(rows, []any{&raw}, func() error {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// WriteAccounts runs fn in one transaction.
func (s *Store) WriteAccounts(fn func(account.Writer) error) error {
	_, err := s.writeAccounts(-1, fn)
	return err
}

// WriteAccountsIf runs fn in one transaction if no change was written
// since the load that returned version (account.SharedStore).
func (s *Store) WriteAccountsIf(version int64, fn func(account.Writer) error) (int64, error) {
	return s.writeAccounts(version, fn)
}

// writeAccounts runs fn in a transaction; with a version (>= 0) only if
// the records are still at it. Changes of records are serialised across
// replicas by a lock, move the version and are notified, all in the
// transaction; last-used times are merged (never moved back) and neither
// lock nor notify.
func (s *Store) writeAccounts(version int64, fn func(account.Writer) error) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), accountsTimeout)
	defer cancel()
	var after int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		w := &accountWriter{ctx: ctx, tx: tx}
		if version >= 0 {
			if err := w.lock(); err != nil {
				return err
			}
			var cur int64
			if err := tx.QueryRow(ctx, "SELECT version FROM svc_accounts_version").Scan(&cur); err != nil {
				return err
			}
			if cur != version {
				return fmt.Errorf("%w: at version %d, loaded at %d", account.ErrStale, cur, version)
			}
			after = cur
		}
		if err := fn(w); err != nil {
			return err
		}
		if err := w.flushLastUsed(); err != nil {
			return err
		}
		if !w.locked {
			return nil
		}
		if err := tx.QueryRow(ctx, "UPDATE svc_accounts_version SET version = version + 1 RETURNING version").Scan(&after); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", AccountsChannel, strconv.FormatInt(after, 10))
		return err
	})
	if err != nil {
		if errors.Is(err, account.ErrStale) {
			return 0, err
		}
		return 0, fmt.Errorf("pgstore: write accounts: %w", err)
	}
	return after, nil
}

type accountWriter struct {
	ctx      context.Context // the transaction's: a Writer's methods take none
	tx       pgx.Tx
	locked   bool // holds the accounts lock: records were (or may be) changed
	lastUsed map[string]time.Time
}

func (w *accountWriter) lock() error {
	if w.locked {
		return nil
	}
	if _, err := w.tx.Exec(w.ctx, "SELECT pg_advisory_xact_lock($1)", lockAccounts); err != nil {
		return err
	}
	w.locked = true
	return nil
}

func (w *accountWriter) put(sql string, record any, args ...any) error {
	if err := w.lock(); err != nil {
		return err
	}
	b, err := json.Marshal(record)
	if err != nil {
		return err
	}
	_, err = w.tx.Exec(w.ctx, sql, append(args, string(b))...)
	return err
}

func (w *accountWriter) PutOrg(o account.Org) error {
	return w.put(`INSERT INTO svc_orgs (id, name, record) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name, record = excluded.record`, o, o.ID, o.Name)
}

func (w *accountWriter) PutUser(u account.User) error {
	return w.put(`INSERT INTO svc_users (id, name, record) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name, record = excluded.record`, u, u.ID, u.Name)
}

func (w *accountWriter) PutMember(m account.Member) error {
	return w.put(`INSERT INTO svc_members (org_id, user_id, record) VALUES ($1, $2, $3)
		ON CONFLICT (org_id, user_id) DO UPDATE SET record = excluded.record`, m, m.OrgID, m.UserID)
}

func (w *accountWriter) DeleteMember(orgID, userID string) error {
	if err := w.lock(); err != nil {
		return err
	}
	_, err := w.tx.Exec(w.ctx, "DELETE FROM svc_members WHERE org_id = $1 AND user_id = $2", orgID, userID)
	return err
}

func (w *accountWriter) PutKey(k account.Key) error {
	return w.put(`INSERT INTO svc_api_keys (id, org_id, record) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET org_id = excluded.org_id, record = excluded.record`, k, k.ID, k.OrgID)
}

func (w *accountWriter) PutWorkerToken(t account.WorkerToken) error {
	return w.put(`INSERT INTO svc_worker_tokens (id, org_id, record) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET org_id = excluded.org_id, record = excluded.record`, t, t.ID, t.OrgID)
}

// PutLastUsed is written with the others at the end of the transaction.
func (w *accountWriter) PutLastUsed(prefix string, t time.Time) error {
	if w.lastUsed == nil {
		w.lastUsed = map[string]time.Time{}
	}
	if t.After(w.lastUsed[prefix]) {
		w.lastUsed[prefix] = t
	}
	return nil
}

// flushLastUsed writes the last-used times in one statement, in key
// order, so that replicas flushing the same keys at once take the row
// locks in the same order and cannot deadlock. A time only moves forward.
func (w *accountWriter) flushLastUsed() error {
	if len(w.lastUsed) == 0 {
		return nil
	}
	prefixes := make([]string, 0, len(w.lastUsed))
	for p := range w.lastUsed {
		prefixes = append(prefixes, p)
	}
	slices.Sort(prefixes)
	ats := make([]time.Time, len(prefixes))
	for i, p := range prefixes {
		ats[i] = w.lastUsed[p]
	}
	_, err := w.tx.Exec(w.ctx, `INSERT INTO svc_last_used (prefix, at)
		SELECT * FROM unnest($1::text[], $2::timestamptz[])
		ON CONFLICT (prefix) DO UPDATE SET at = GREATEST(svc_last_used.at, excluded.at)`, prefixes, ats)
	return err
}
