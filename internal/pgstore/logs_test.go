package pgstore_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/pgstore"
	"github.com/svc-dev/svc/internal/store/storetest"
)

// local is a replica's outbox and the stores shipping it to a database
// of the test's own, with the outbox's writer and the shipper running
// until stop or the end of the test. Its writer commits only when synced.
type local struct {
	*pgstore.Local
	pg  *pgstore.Store
	db  *bolt.Store
	box *bolt.Outbox
	w   *bolt.Writer

	mu   sync.Mutex
	last []bolt.OutboxItem // the last shipment committed

	stopOnce sync.Once
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	errs     chan error
}

// newLocal opens the outbox in dir and runs its writer and shipper,
// logging to log (nil: nowhere); setup, when set, tunes the shipper
// before it runs.
func newLocal(t testing.TB, s *pgstore.Store, dir string, log *slog.Logger, setup func(*pgstore.Shipper)) *local {
	t.Helper()
	b, err := bolt.Open(dir, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := b.NewWriter(bolt.WriterOptions{Every: time.Hour})
	box, err := b.Outbox(w)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	l := &local{Local: s.Local(box, log), pg: s, db: b, box: box, w: w, errs: make(chan error, 2)}
	pgstore.SetAfterCommit(l.Shipper, func(items []bolt.OutboxItem) error {
		l.mu.Lock()
		l.last = slices.Clone(items)
		l.mu.Unlock()
		return nil
	})
	if setup != nil {
		setup(l.Shipper)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.wg.Go(func() { l.errs <- w.Run(ctx) })
	l.wg.Go(func() { l.errs <- l.Shipper.Run(ctx) })
	t.Cleanup(func() { l.stop(t) })
	return l
}

// stop stops the writer and the shipper, as a process that ends, and
// closes the outbox's store.
func (l *local) stop(t testing.TB) {
	l.stopOnce.Do(func() {
		l.cancel()
		l.wg.Wait()
		close(l.errs)
		for err := range l.errs {
			if err != nil {
				t.Error(err)
			}
		}
		if err := l.db.Close(); err != nil {
			t.Error(err)
		}
	})
}

// sync waits until everything recorded is in the database.
func (l *local) sync(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.Shipper.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

// resend ships the last shipment again.
func (l *local) resend(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	items := l.last
	l.mu.Unlock()
	if len(items) == 0 {
		t.Fatal("nothing shipped to send again")
	}
	if err := pgstore.Reship(context.Background(), l.Shipper, items); err != nil {
		t.Fatal(err)
	}
}

func conformanceLogs(t *testing.T) storetest.Logs {
	l := newLocal(t, open(t, pg.CreateDB(t)), t.TempDir(), nil, nil)
	return storetest.Logs{Usage: l.Usage, Events: l.Events, Power: l.Power, Sync: l.sync, Resend: l.resend, Keyed: true}
}

func TestUsageConformance(t *testing.T)  { storetest.Usage(t, conformanceLogs) }
func TestEventsConformance(t *testing.T) { storetest.Events(t, conformanceLogs) }
func TestPowerConformance(t *testing.T)  { storetest.Power(t, conformanceLogs) }

// A new home reads each recent worker's newest event and newest connect,
// of its organisation alone and since the time asked.
func TestRecentWorkers(t *testing.T) {
	l := newLocal(t, open(t, pg.CreateDB(t)), t.TempDir(), nil, nil)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ev := func(id, worker, typ string, ago time.Duration) api.WorkerEvent {
		return api.WorkerEvent{ID: id, WorkerID: worker, WorkerName: worker, EventType: typ, CreatedAt: now.Add(-ago), Metadata: map[string]any{}}
	}
	for _, e := range []api.WorkerEvent{
		ev("a1", "wa", api.EventConnected, 3*time.Hour),
		ev("a2", "wa", api.EventHealthChanged, 2*time.Hour),
		ev("b1", "wb", api.EventConnected, time.Hour),
		ev("b2", "wb", api.EventDisconnected, 30*time.Minute),
		ev("c1", "wc", api.EventConnected, 48*time.Hour), // before since
	} {
		l.Events.RecordEvent("org", e)
	}
	l.Events.RecordEvent("other", ev("x1", "wx", api.EventConnected, time.Minute))
	l.sync(t)
	got, err := l.Events.RecentWorkers(context.Background(), "org", now.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["wa"].Last.ID != "a2" || got["wa"].Connected.ID != "a1" ||
		got["wb"].Last.ID != "b2" || got["wb"].Connected.ID != "b1" {
		t.Fatalf("recent workers %+v", got)
	}
}
