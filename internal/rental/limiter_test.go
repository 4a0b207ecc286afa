package rental

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

type fakeLimiter struct {
	ok    bool
	wait  time.Duration
	err   error
	calls []string
	every time.Duration
}

func (l *fakeLimiter) AllowRent(_ context.Context, keyID string, every time.Duration) (bool, time.Duration, error) {
	l.calls = append(l.calls, keyID)
	l.every = every
	return l.ok, l.wait, l.err
}

// A shared limiter decides; when it cannot, the request is refused as
// unavailable rather than let through uncounted.
func TestAllowAsksSharedLimiter(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ok         bool
		wait       time.Duration
		err        error
		status     int
		retryAfter time.Duration
	}{
		{"allowed", true, 0, nil, 0, 0},
		{"refused", false, 23 * time.Second, nil, 429, 23 * time.Second},
		{"unreachable", false, 0, errors.New("connection refused"), 503, 5 * time.Second},
		{"unreachable though it said yes", true, 0, errors.New("timeout"), 503, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &fakeLimiter{ok: tc.ok, wait: tc.wait, err: tc.err}
			m, err := New(Config{Ledger: &memLedger{}, Accounts: newAccounts(), Fleet: &fakeFleet{}, Limiter: l})
			if err != nil {
				t.Fatal(err)
			}
			err = m.Allow("k1")
			if len(l.calls) != 1 || l.calls[0] != "k1" || l.every != time.Minute {
				t.Fatalf("limiter asked %v every %v", l.calls, l.every)
			}
			if tc.status == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.HTTPStatus() != tc.status || ae.RetryAfter != tc.retryAfter {
				t.Fatalf("Allow = %v, want %d after %v", err, tc.status, tc.retryAfter)
			}
		})
	}
}
