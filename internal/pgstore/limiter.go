package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AllowRent is the rental rate limit across every replica
// (store.RentLimiter): at most one call per key per every, counted on the
// database's clock in one statement, so concurrent calls through any
// replicas let exactly one through per window. A refusal reads the time
// of the call that counted in a second statement: the first one's
// snapshot may predate a concurrent call's row, whose insert it waited
// for.
func (s *Store) AllowRent(ctx context.Context, keyID string, every time.Duration) (bool, time.Duration, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, `
		INSERT INTO svc_rent_limits AS l (key_id, at) VALUES ($1, now())
		ON CONFLICT (key_id) DO UPDATE SET at = now()
		WHERE l.at <= now() - $2 * interval '1 microsecond'
		RETURNING at`, keyID, every.Microseconds()).Scan(&at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return false, 0, fmt.Errorf("pgstore: rent limit: %w", err)
	default:
		return true, 0, nil
	}
	var waitUS int64
	err = s.pool.QueryRow(ctx, `
		SELECT GREATEST(1, CEIL(EXTRACT(EPOCH FROM (at - now())) * 1e6) + $2)::bigint
		FROM svc_rent_limits WHERE key_id = $1`, keyID, every.Microseconds()).Scan(&waitUS)
	if err != nil {
		return false, 0, fmt.Errorf("pgstore: rent limit wait: %w", err)
	}
	return false, min(time.Duration(waitUS)*time.Microsecond, every), nil
}
