package bolt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
)

// benchRow is a typical chat row of one of 20 models on one of 50 workers.
func benchRow(rng *rand.Rand, i int, at time.Time) api.UsageRow {
	prompt, completion := rng.IntN(4000), rng.IntN(1000)
	r := api.UsageRow{
		ID:                 fmt.Sprintf("0190c7a2-5b1e-7c3d-8e4f-%012d", i),
		CreatedAt:          at,
		Model:              fmt.Sprintf("vendor/model-%02d-instruct", rng.IntN(20)),
		RequestType:        api.RequestChat,
		StatusCode:         200,
		PromptTokens:       prompt,
		CompletionTokens:   completion,
		TotalTokens:        prompt + completion,
		RequestDurationMs:  rng.Int64N(20000),
		TimeToFirstTokenMs: ptr(rng.Int64N(800)),
		TokensPerSecond:    ptr(rng.Float64() * 120),
		CachedTokens:       ptr(rng.IntN(prompt + 1)),
		QueueWaitMs:        ptr(rng.Int64N(50)),
		WorkerQueueWaitMs:  ptr(rng.Int64N(20)),
		Stream:             true,
		Attempts:           1,
		APIKeyID:           "key_3f9a1c",
	}
	w := rng.IntN(50)
	r.WorkerID = fmt.Sprintf("wrk_%08x", w*7919)
	r.WorkerName = fmt.Sprintf("gpu-box-%02d", w)
	switch n := rng.IntN(100); {
	case n < 2:
		r.StatusCode, r.ErrorMessage = 499, ptr("Client disconnected")
	case n < 4:
		r.StatusCode, r.ErrorMessage = 503, ptr("worker lost")
	}
	return r
}

// benchPending is how many records the writer has queued.
func benchPending(w *Writer) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// BenchmarkUsageRecord measures rows per second through a running Writer:
// "live" rows are stamped now, as in production, so a commit touches
// today's aggregates; "spread" rows fall anywhere in the last 30 days, so
// a commit touches every day's.
func BenchmarkUsageRecord(b *testing.B) {
	for _, mode := range []string{"live", "spread"} {
		b.Run(mode, func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			w := s.NewWriter(WriterOptions{})
			u := s.Usage(w)
			rng := rand.New(rand.NewPCG(7, 8))
			now := time.Now().UTC()
			rows := make([]api.UsageRow, 50_000)
			orgs := make([]string, len(rows))
			for i := range rows {
				at := now.Add(time.Duration(i) * time.Millisecond)
				if mode == "spread" {
					at = now.Add(-time.Duration(rng.Int64N(int64(30 * 24 * time.Hour))))
				}
				rows[i] = benchRow(rng, i, at)
				orgs[i] = fmt.Sprintf("org_%d", rng.IntN(5))
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()

			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				// Keep the queue short, as a server's steady state would:
				// the benchmark measures the writer, not a growing backlog.
				if i%1000 == 0 {
					for benchPending(w) > 20_000 {
						time.Sleep(100 * time.Microsecond)
					}
				}
				u.Record(orgs[i%len(rows)], rows[i%len(rows)])
			}
			cancel()
			if err := <-done; err != nil { // Run commits the rest before returning
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rows/s")
			// Every commit resets the writer's drop count, so count what
			// was stored instead.
			var stored int
			_ = s.db.View(func(tx *bbolt.Tx) error {
				stored = tx.Bucket(bucketUsageRows).Stats().KeyN
				return nil
			})
			if stored != b.N {
				b.Fatalf("%d of %d rows stored", stored, b.N)
			}
		})
	}
}

// BenchmarkUsageQueries reads an organisation with a million rows over 400
// days (10,000 with -short).
func BenchmarkUsageQueries(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 10_000
	}
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w := s.NewWriter(WriterOptions{Limit: 100_000})
	u := s.Usage(w)
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	first := now.AddDate(0, 0, -400)
	step := now.Sub(first) / time.Duration(n)
	built := time.Now()
	for i := range n {
		u.Record("org_big", benchRow(rng, i, first.Add(time.Duration(i)*step)))
		if i%2000 == 0 {
			u.Record("org_big2", benchRow(rng, i, first.Add(time.Duration(i)*step)))
		}
		if i%50_000 == 49_999 {
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	b.Logf("built %d rows in %v", n, time.Since(built).Round(time.Millisecond))

	tests := []struct {
		name string
		fn   func() error
	}{
		{"Summary30", func() error { _, err := u.Summary("org_big", 30, now); return err }},
		{"Daily30", func() error { _, err := u.Daily("org_big", 30, now); return err }},
		{"Breakdown30", func() error { _, err := u.Breakdown("org_big", 30, "", now); return err }},
		{"Breakdown365", func() error { _, err := u.Breakdown("org_big", 365, "requests", now); return err }},
		{"Logs50", func() error { _, err := u.Logs("org_big", UsageQuery{Limit: 50}); return err }},
		{"Logs50Offset950", func() error { _, err := u.Logs("org_big", UsageQuery{Limit: 50, Offset: 950}); return err }},
		{"Logs50Worker", func() error {
			_, err := u.Logs("org_big", UsageQuery{Limit: 50, WorkerID: fmt.Sprintf("wrk_%08x", 17*7919)})
			return err
		}},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			for b.Loop() {
				if err := tt.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
