package pgstore

import (
	"context"

	"github.com/svc-dev/svc/internal/bolt"
)

// What the shipper's tests reach inside it for.

// SetAfterCommit sets what runs after a shipment's commit and before the
// outbox lets it go; an error stands for a crash there. Set it before Run.
func SetAfterCommit(sh *Shipper, fn func(items []bolt.OutboxItem) error) { sh.afterCommit = fn }

// Reship writes items to the database again, as a restart after a crash
// between the commit and the outbox letting them go does.
func Reship(ctx context.Context, sh *Shipper, items []bolt.OutboxItem) error {
	return sh.ship(ctx, items)
}

// SetShipBatch sets how many records a shipment takes. Set it before Run.
func SetShipBatch(sh *Shipper, n int) { sh.batch = n }
