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
// replicas let exactly one through per window.
func (s *Store) AllowRent(ctx context.Context, keyID string, every time.Duration) (bool, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, `
		INSERT INTO svc_rent_limits AS l (key_id, at) VALUES ($1, now())
		ON CONFLICT (key_id) DO UPDATE SET at = now()
		WHERE l.at <= now() - $2 * interval '1 microsecond'
		RETURNING at`, keyID, every.Microseconds()).Scan(&at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("pgstore: rent limit: %w", err)
	}
	return true, nil
}
