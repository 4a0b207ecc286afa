package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/pgstore"
	"github.com/svc-dev/svc/internal/pgtest"
	"github.com/svc-dev/svc/internal/powerlog"
	"github.com/svc-dev/svc/internal/store"
	"github.com/svc-dev/svc/internal/usage"
)

var shipNow = time.Date(2026, 11, 15, 10, 0, 0, 0, time.UTC)

func shipRow(i int, at time.Time) api.UsageRow {
	return api.UsageRow{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), CreatedAt: at, Model: "m",
		StatusCode: 200, PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7, WorkerID: "w1", WorkerName: "one"}
}

// checkShipped fails unless orgID's log holds n rows, once each, and its
// totals count n.
func checkShipped(t testing.TB, u store.Usage, orgID string, n int) {
	t.Helper()
	rows, err := u.Logs(orgID, store.UsageQuery{Limit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.ID] {
			t.Errorf("row %s stored twice", r.ID)
		}
		seen[r.ID] = true
	}
	sum, err := usage.Summary(u, orgID, 400, shipNow)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != n || sum.Requests != int64(n) || sum.TotalTokens != 7*int64(n) {
		t.Errorf("%d rows, totals of %d requests and %d tokens; want %d rows", len(rows), sum.Requests, sum.TotalTokens, n)
	}
}

var errCrash = errors.New("crashed")

// A crash between a shipment's commit and the outbox letting it go sends
// the shipment again on restart, which changes nothing: rows, totals,
// events and power windows are stored once.
func TestShipmentSentAgainAfterACrash(t *testing.T) {
	s := open(t, pg.CreateDB(t))
	dir := t.TempDir()
	crashed := make(chan []bolt.OutboxItem, 1)
	first := newLocal(t, s, dir, nil, func(sh *pgstore.Shipper) {
		pgstore.SetAfterCommit(sh, func(items []bolt.OutboxItem) error {
			select {
			case crashed <- items:
			default:
			}
			return errCrash
		})
	})
	hist := powerlog.New(first.Power, nil)
	for i := range 300 {
		first.Usage.Record("org", shipRow(i, shipNow.Add(-time.Duration(i)*time.Minute)))
	}
	first.Events.RecordEvent("org", api.WorkerEvent{ID: "e1", WorkerID: "w1", EventType: api.EventConnected, CreatedAt: shipNow})
	hist.Record("w1", api.PowerReport{Windows: []api.PowerWindow{{Start: shipNow.Add(-2 * time.Minute), Seconds: 60,
		Joules: map[string]float64{"system": 60}, Covered: map[string]float64{"system": 60}}}}, shipNow)
	if err := first.w.Flush(); err != nil {
		t.Fatal(err)
	}
	var items []bolt.OutboxItem
	select {
	case items = <-crashed:
	case <-time.After(30 * time.Second):
		t.Fatal("nothing shipped")
	}
	first.stop(t)
	if len(items) != 302 {
		t.Fatalf("the shipment held %d records, want 302", len(items))
	}

	again := newLocal(t, s, dir, nil, nil)
	if n, _ := again.Shipper.Depth(); n != 302 {
		t.Fatalf("the outbox holds %d records after the crash, want 302", n)
	}
	again.sync(t)
	st := again.Shipper.State()
	if st.Records != 0 || st.Shipments != 1 || st.Duplicates != 300 || st.Failing {
		t.Fatalf("after the restart: %+v", st)
	}
	checkShipped(t, again.Usage, "org", 300)
	if evs, err := again.Events.ListEvents("org", store.EventQuery{Limit: 10}); err != nil || len(evs) != 1 {
		t.Fatalf("events %+v, %v", evs, err)
	}
	var joules float64
	err := again.Power.Buckets("w1", 60, 0, shipNow.Unix(), func(_ int64, sums []powerlog.Sum) {
		for _, s := range sums {
			joules += s.Joules
		}
	})
	if err != nil || joules != 60 {
		t.Fatalf("%v J stored of a 60 J window, %v", joules, err)
	}
}

// logBuffer is a logger's output, safe to read while it is written.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// While PostgreSQL is down, rows wait in the outbox and Sync says they
// are behind; the outage is logged once, and its end; once it is back
// every row is shipped, once.
func TestShippingThroughAnOutage(t *testing.T) {
	srv := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, err := srv.CreateDB(ctx, "outage")
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, url)
	var logs logBuffer
	l := newLocal(t, s, t.TempDir(), slog.New(slog.NewTextHandler(&logs, nil)), nil)

	for i := range 100 {
		l.Usage.Record("org", shipRow(i, shipNow))
	}
	l.sync(t)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	// A shipment of one record first, which must be kept as a larger one
	// is: only a record the database refuses is given up alone.
	l.Usage.Record("org", shipRow(100, shipNow))
	if err := l.w.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "shipping to fail", func() bool { return l.Shipper.State().Failing })
	for i := 101; i < 400; i++ {
		l.Usage.Record("org", shipRow(i, shipNow))
	}
	if err := l.w.Flush(); err != nil {
		t.Fatal(err)
	}
	err = l.Usage.Sync(context.Background())
	if !errors.Is(err, bolt.ErrBehind) {
		t.Fatalf("Sync while PostgreSQL is down: %v", err)
	}
	if st := l.Shipper.State(); st.Records != 300 || st.Oldest.IsZero() || st.Err == nil {
		t.Fatalf("while PostgreSQL is down: %+v", st)
	}
	time.Sleep(3 * time.Second) // several retries
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "shipping to recover", func() bool { st := l.Shipper.State(); return !st.Failing && st.Records == 0 })
	l.sync(t)
	checkShipped(t, l.Usage, "org", 400)
	out := logs.String()
	if n := strings.Count(out, "shipping to PostgreSQL failing"); n != 1 {
		t.Errorf("the outage logged %d times:\n%s", n, out)
	}
	if n := strings.Count(out, "shipping to PostgreSQL recovered"); n != 1 {
		t.Errorf("the recovery logged %d times:\n%s", n, out)
	}
}

// A row the database refuses on its own is given up alone: the rows
// shipped with it are stored.
func TestShipmentRefusedRowGivenUpAlone(t *testing.T) {
	l := newLocal(t, open(t, pg.CreateDB(t)), t.TempDir(), nil, nil)
	for i := range 10 {
		at := shipNow
		if i == 4 {
			at = time.Date(10001, 1, 1, 0, 0, 0, 0, time.UTC) // no partition is ever made for it
		}
		l.Usage.Record("org", shipRow(i, at))
	}
	l.sync(t)
	if st := l.Shipper.State(); st.Dropped != 1 || st.Records != 0 || st.Failing {
		t.Fatalf("after the shipment: %+v", st)
	}
	checkShipped(t, l.Usage, "org", 9)
}

// Partitions are made for the months rows need, and this month's and the
// next ahead of their rows.
func TestUsagePartitionsMadeAsNeeded(t *testing.T) {
	l := newLocal(t, open(t, pg.CreateDB(t)), t.TempDir(), nil, nil)
	old := time.Date(2024, 2, 29, 23, 59, 59, 999999999, time.UTC)
	l.Usage.Record("org", shipRow(1, old))
	l.Usage.Record("org", shipRow(2, old.Add(time.Nanosecond)))
	l.sync(t)
	rows, err := l.pg.Pool().Query(context.Background(), `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'svc_usage_rows'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	now := time.Now().UTC()
	for _, want := range []string{"svc_usage_rows_y2024m02", "svc_usage_rows_y2024m03",
		now.Format("svc_usage_rows_y2006m01"), now.AddDate(0, 0, 32-now.Day()).Format("svc_usage_rows_y2006m01")} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("no partition %s among %v", want, names)
		}
	}
	var inMarch int
	if err := l.pg.Pool().QueryRow(context.Background(), "SELECT count(*) FROM svc_usage_rows_y2024m03").Scan(&inMarch); err != nil || inMarch != 1 {
		t.Fatalf("%d rows in March, %v", inMarch, err)
	}
}

// Sync of a shipper whose outbox is empty returns at once.
func TestShipperSyncIdle(t *testing.T) {
	l := newLocal(t, open(t, pg.CreateDB(t)), t.TempDir(), nil, nil)
	start := time.Now()
	l.sync(t)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("idle Sync took %v", d)
	}
}
