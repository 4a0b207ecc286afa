package bolt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/powerlog"
)

// disk stands between a writer and its database and fails commits the
// ways a full or failing disk does.
type disk struct {
	db *bbolt.DB

	mu sync.Mutex
	// full fails every commit with ENOSPC after its pages are built, and
	// rolls it back, as bbolt does when a write fails.
	full bool
	// writeThenFail reports the next commits failed after writing them,
	// as a failed fsync of the meta page would.
	writeThenFail int
	written       int // commits written
	// after runs after each commit that was written.
	after func()
}

var errNoSpace = &fs.PathError{Op: "write", Path: "svc.db", Err: syscall.ENOSPC}

func (d *disk) setFull(full bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.full = full
}

func (d *disk) update(fn func(*bbolt.Tx) error) error {
	d.mu.Lock()
	full, landed := d.full, d.writeThenFail > 0
	if landed && !full {
		d.writeThenFail--
	}
	d.mu.Unlock()
	if full {
		return d.db.Update(func(tx *bbolt.Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			return errNoSpace
		})
	}
	if err := d.db.Update(fn); err != nil {
		return err
	}
	d.mu.Lock()
	d.written++
	d.mu.Unlock()
	if d.after != nil {
		d.after()
	}
	if landed {
		return fmt.Errorf("sync meta page: %w", syscall.EIO)
	}
	return nil
}

// faultyWriter is a writer on a fresh store whose commits go through a
// disk.
func faultyWriter(t *testing.T, o WriterOptions) (*Store, *Writer, *disk) {
	t.Helper()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := s.NewWriter(o)
	d := &disk{db: s.db}
	w.update = d.update
	return s, w, d
}

// checkRows fails unless orgID's log holds each of ids exactly once and
// nothing else, and its totals add up to them (each row of 7 tokens).
func checkRows(t *testing.T, u *Usage, orgID string, ids []string, now time.Time) {
	t.Helper()
	rows, err := u.Logs(orgID, UsageQuery{Limit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.ID]++
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("row %s stored %d times", id, seen[id])
		}
	}
	if len(rows) != len(ids) {
		t.Errorf("%d rows stored, %d recorded", len(rows), len(ids))
	}
	sum, err := u.Summary(orgID, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Requests != int64(len(ids)) || sum.TotalTokens != 7*int64(len(ids)) {
		t.Errorf("totals: %d requests and %d tokens for %d rows", sum.Requests, sum.TotalTokens, len(ids))
	}
}

func tokenRow(id string, at time.Time) api.UsageRow {
	return api.UsageRow{ID: id, Model: "m", StatusCode: 200, PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7, CreatedAt: at}
}

// While the disk is full no row is lost: the failed batches are kept and
// retried, backing off, Sync says the rows are behind, and once space
// returns every row is written, in the order recorded, once, with totals
// equal to the rows, without a restart.
func TestWriterKeepsRowsWhileTheDiskIsFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, w, d := faultyWriter(t, WriterOptions{Batch: 7})
		u := (&Store{db: d.db}).Usage(w)
		base := time.Now().UTC()
		var mu sync.Mutex
		var ids []string
		// Commits go in order: what is written is always the first rows
		// recorded.
		d.after = func() {
			rows, err := u.Logs("org", UsageQuery{Limit: 10_000})
			mu.Lock()
			defer mu.Unlock()
			for i, r := range rows {
				if want := ids[len(rows)-1-i]; err != nil || r.ID != want {
					t.Errorf("after a commit, row %d of %d written is %s, not %s (%v)", len(rows)-1-i, len(rows), r.ID, want, err)
					return
				}
			}
		}
		record := func(n int) {
			for range n {
				mu.Lock()
				id := fmt.Sprintf("r%03d", len(ids))
				ids = append(ids, id)
				at := base.Add(time.Duration(len(ids)) * time.Millisecond)
				mu.Unlock()
				u.Record("org", tokenRow(id, at))
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()

		record(5)
		time.Sleep(time.Second)
		synctest.Wait()
		if b := w.Backlog(); b.UsageRows != 0 || b.Failing {
			t.Fatalf("before the disk filled: %+v", b)
		}

		d.setFull(true)
		for range 3 {
			record(10)
			time.Sleep(time.Second)
		}
		synctest.Wait()
		b := w.Backlog()
		if !b.Failing || b.UsageRows != 30 || b.Refusing || b.Cause() != "disk full" || !errors.Is(b.Err, syscall.ENOSPC) {
			t.Fatalf("while the disk is full: %+v (%q)", b, b.Cause())
		}
		// 30 ticks went by: retries back off rather than try each.
		if b.FailedCommits < 3 || b.FailedCommits > 8 {
			t.Errorf("%d commits failed in 3 s", b.FailedCommits)
		}
		if err := u.Sync(context.Background()); !errors.Is(err, ErrBehind) || !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("Sync while the disk is full: %v", err)
		}

		d.setFull(false)
		time.Sleep(maxRetryDelay)
		synctest.Wait()
		if b := w.Backlog(); b.UsageRows != 0 || b.Failing || b.Bytes != 0 {
			t.Fatalf("after space returned: %+v", b)
		}
		if err := u.Sync(context.Background()); err != nil {
			t.Errorf("Sync after space returned: %v", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		checkRows(t, u, "org", ids, base)
	})
}

// A commit reported failed that was written all the same (its meta page
// written, the fsync after it failed) is recognised when it is tried
// again: its rows, events and power readings are not added twice.
func TestWriterCommitReportedFailedButWritten(t *testing.T) {
	s, w, d := faultyWriter(t, WriterOptions{Every: time.Hour, Batch: 4})
	d.writeThenFail = 1
	u, p := s.Usage(w), s.Power(w)
	now := time.Now().UTC()
	// The power report and the event go in the first transaction, which
	// is reported failed.
	p.Add("w1", []powerlog.Delta{{Res: 60, Start: at(0).Unix(), Sums: sums("system", reading{60, 60, 1})}}, at(1).UnixNano(), nil)
	s.Events(w).RecordEvent("org", api.WorkerEvent{ID: "e1", CreatedAt: now})
	var ids []string
	for i := range 10 {
		ids = append(ids, fmt.Sprint("r", i))
		u.Record("org", tokenRow(ids[i], now))
	}
	if err := w.Flush(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("first flush: %v", err)
	}
	if b := w.Backlog(); b.UsageRows != 10 || b.Events != 1 || b.PowerReports != 1 || !b.Failing {
		t.Fatalf("after the failed commit: %+v", b)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if b := w.Backlog(); b.UsageRows+b.Events+b.PowerReports != 0 || b.Failing {
		t.Fatalf("after the retry: %+v", b)
	}
	checkRows(t, u, "org", ids, now)
	if evs, _ := s.Events(w).ListEvents("org", EventQuery{Limit: 10}); len(evs) != 1 {
		t.Errorf("%d events stored", len(evs))
	}
	want := map[time.Time]map[string]reading{at(0): {"system": {60, 60, 1}}}
	if got := storedBuckets(t, s, bucketPower60, "w1"); !reflect.DeepEqual(got, want) {
		t.Errorf("power: got %v, want %v", got, want)
	}
}

// The backlog is bounded: at the bound it says so, for inference to be
// refused; usage rows are still kept (those of requests already running),
// while events and power reports are dropped and counted.
func TestWriterBacklogBound(t *testing.T) {
	s, w, d := faultyWriter(t, WriterOptions{Every: time.Hour, Backlog: 5 * (recordOverhead + 100)})
	u, p, ev := s.Usage(w), s.Power(w), s.Events(w)
	now := time.Now().UTC()
	d.setFull(true)
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprint("r", i))
		u.Record("org", tokenRow(ids[i], now))
		if i == 3 && w.Backlog().Refusing {
			t.Fatalf("refusing after 4 rows: %+v", w.Backlog())
		}
	}
	if err := w.Flush(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush on a full disk: %v", err)
	}
	for range 3 {
		ev.RecordEvent("org", api.WorkerEvent{ID: "e", CreatedAt: now})
	}
	for range 2 {
		p.Add("w1", []powerlog.Delta{{Res: 60, Start: at(0).Unix(), Sums: sums("system", reading{60, 60, 1})}}, at(1).UnixNano(), nil)
	}
	b := w.Backlog()
	if !b.Refusing || b.UsageRows != 20 || b.Events != 0 || b.DroppedEvents != 3 || b.DroppedPower != 2 || b.Bytes < b.Limit {
		t.Fatalf("at the bound: %+v", b)
	}
	d.setFull(false)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if b := w.Backlog(); b.Refusing || b.UsageRows != 0 || b.Bytes != 0 {
		t.Fatalf("after space returned: %+v", b)
	}
	checkRows(t, u, "org", ids, now)
}

// A record the store refuses on its own (a key over bbolt's limit) is
// given up alone: it would otherwise fail every commit after it.
func TestWriterGivesUpARecordTheStoreRefuses(t *testing.T) {
	s, w, _ := faultyWriter(t, WriterOptions{Every: time.Hour})
	u := s.Usage(w)
	now := time.Now().UTC()
	u.Record(strings.Repeat("o", bbolt.MaxKeySize), tokenRow("huge", now))
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		u.Record("org", tokenRow(id, now))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if b := w.Backlog(); b.Rejected != 1 || b.UsageRows != 0 || b.Failing {
		t.Fatalf("after the flush: %+v", b)
	}
	checkRows(t, u, "org", ids, now)
}

func TestRetryDelay(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, time.Second},
		{1000, time.Second},
	} {
		if got := retryDelay(100*time.Millisecond, tc.failures); got != tc.want {
			t.Errorf("after %d failures: %v, want %v", tc.failures, got, tc.want)
		}
	}
}
