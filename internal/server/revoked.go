package server

import (
	"context"

	"github.com/svc-dev/svc/internal/fleet"
)

// cutRevokedLinks ends, each time revoked says a worker token was revoked,
// the links of fl made with a token revoked since (fleet.DisconnectRevoked),
// until ctx ends. A revoked token is usually a leaked one: its workers
// must not serve on until they next reconnect. Revoked on another
// replica, a token is seen here once the accounts are reloaded from the
// store.
func cutRevokedLinks(ctx context.Context, revoked <-chan struct{}, fl *fleet.Fleet) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-revoked:
			fl.DisconnectRevoked()
		}
	}
}
