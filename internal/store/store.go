// Package store names what the gateway keeps durably, as interfaces that
// the single-host store (package bolt) and the cluster store (package
// pgstore) both implement, so the server is written once against either.
package store

import (
	"context"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/powerlog"
	"github.com/svc-dev/svc/internal/usage"
)

// UsageQuery filters and pages a listing of usage rows.
type UsageQuery struct {
	WorkerID string
	// Status and Model, when set, keep only the rows with that status
	// code and that model.
	Status int
	Model  string
	Limit  int
	Offset int
}

// EventQuery filters and pages a listing of worker events.
type EventQuery struct {
	WorkerID  string
	EventType string
	Limit     int
	Offset    int
}

// Usage is the usage log and the per-day totals it adds up to. Record
// never blocks on the disk or the network: the row is queued and written
// by a group commit; Sync waits until every row recorded before it is
// readable.
type Usage interface {
	usage.Aggregates
	Record(orgID string, row api.UsageRow)
	Sync(ctx context.Context) error
	// Logs lists rows newest first, filtered by worker when WorkerID != "".
	Logs(orgID string, q UsageQuery) ([]api.UsageRow, error)
	// PruneUsage deletes the rows created before before, never the
	// totals, and returns how many it deleted.
	PruneUsage(ctx context.Context, before time.Time) (int, error)
}

// Events is the log of worker events.
type Events interface {
	RecordEvent(orgID string, ev api.WorkerEvent)
	ListEvents(orgID string, q EventQuery) ([]api.WorkerEvent, error)
	// LastEvent is workerID's newest event (the newest recorded among
	// several of one instant), and false when it has none.
	LastEvent(ctx context.Context, orgID, workerID string) (api.WorkerEvent, bool, error)
	// PruneEvents deletes at most max events recorded before before.
	PruneEvents(before time.Time, max int) (int, error)
}

// Power is the workers' power history.
type Power interface {
	powerlog.Store
	// Prune deletes the buckets each layer keeps no longer (powerlog.Layers).
	Prune(now time.Time) (int, error)
}

// RentLimiter tells whether an API key may ask for a rental now: at most
// once per every. A refusal is (false, wait, nil), wait being how long
// until the key's next call would be allowed; an error means the limiter
// could not decide, and the caller refuses without counting the call.
type RentLimiter interface {
	AllowRent(ctx context.Context, keyID string, every time.Duration) (ok bool, wait time.Duration, err error)
}
