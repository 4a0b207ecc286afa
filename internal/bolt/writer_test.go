package bolt

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// A row recorded before Sync is in every read after it, the log and the
// totals alike, with the writer committing on its own clock meanwhile.
func TestSyncReadsYourWrites(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := s.NewWriter(WriterOptions{Every: time.Hour}) // only Sync makes it commit
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	run.Go(func() { _ = w.Run(ctx) })
	defer func() { cancel(); run.Wait() }()
	u := s.Usage(w)
	now := time.Now().UTC()
	for i := range 20 {
		u.Record("org", api.UsageRow{ID: "r" + string(rune('a'+i)), Model: "m", StatusCode: 200, CreatedAt: now})
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := u.Sync(sctx)
		scancel()
		if err != nil {
			t.Fatal(err)
		}
		rows, err := u.Logs("org", UsageQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		sum, err := u.Summary("org", 1, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != i+1 || sum.Requests != int64(i+1) {
			t.Fatalf("after %d rows: %d in the log, %d in the totals", i+1, len(rows), sum.Requests)
		}
	}
	// Nothing pending: Sync does not wait.
	start := time.Now()
	if err := u.Sync(context.Background()); err != nil || time.Since(start) > time.Second {
		t.Fatalf("idle Sync: %v after %v", err, time.Since(start))
	}
}
