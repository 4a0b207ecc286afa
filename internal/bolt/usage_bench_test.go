package bolt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
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
	r.WorkerID = api.NullText(fmt.Sprintf("wrk_%08x", w*7919))
	r.WorkerName = api.NullText(fmt.Sprintf("gpu-box-%02d", w))
	switch n := rng.IntN(100); {
	case n < 2:
		r.StatusCode, r.ErrorMessage = 499, ptr("Client disconnected")
	case n < 4:
		r.StatusCode, r.ErrorMessage = 503, ptr("worker lost")
	}
	return r
}

// benchPending is how many records the writer has queued and not yet
// begun to write.
func benchPending(w *Writer) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) - w.writing
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
			// Count what was stored, not what was queued.
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
	w := s.NewWriter(WriterOptions{})
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
		// A status or model no row has: the whole history is read.
		{"LogsStatusNone", func() error { _, err := u.Logs("org_big", UsageQuery{Limit: 50, Status: 418}); return err }},
		{"LogsModelNone", func() error { _, err := u.Logs("org_big", UsageQuery{Limit: 50, Model: "no-such-model"}); return err }},
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

// realisticRow is a row as a server records one: a UUID request id, a
// fleet worker id, an API key id of 12 characters, measured timings and
// energy; mostly streamed chat, some embeddings and transcriptions, a few
// failures.
func realisticRow(rng *rand.Rand, at time.Time) api.UsageRow {
	models := [...]string{"qwen3-8b-q4", "qwen3-32b-q4", "llama3.1-8b-instruct-q4_K_M", "gemma3-27b-it-q4",
		"mistral-small-24b-instruct-2501-q4", "deepseek-r1-distill-qwen-14b-q4", "nomic-embed-text", "stt-large-v3-turbo"}
	hexID := func(n int) string {
		const digits = "0123456789abcdef"
		b := make([]byte, n)
		for i := range b {
			b[i] = digits[rng.IntN(16)]
		}
		return string(b)
	}
	id := hexID(32)
	w := rng.IntN(20)
	r := api.UsageRow{
		ID:         id[:8] + "-" + id[8:12] + "-4" + id[13:16] + "-a" + id[17:20] + "-" + id[20:],
		CreatedAt:  at,
		StatusCode: 200,
		Attempts:   1,
		APIKeyID:   [...]string{"k7Hq2ZpX9mLw", "Qe4vT8sYb1Rn", "c9DfG3jK5pLs"}[rng.IntN(3)],
		// fleet.WorkerID: "wk_" and a hash's first 8 bytes in hex.
		WorkerID:    api.NullText(fmt.Sprintf("wk_%016x", uint64(w)*0x9e3779b97f4a7c15)),
		WorkerName:  api.NullText(fmt.Sprintf("gpu-box-%02d", w)),
		EnergyWh:    ptr(rng.Float64() * 2),
		QueueWaitMs: ptr(rng.Int64N(30)),
	}
	r.WorkerQueueWaitMs = ptr(rng.Int64N(*r.QueueWaitMs + 1))
	switch n := rng.IntN(100); {
	case n < 80:
		r.Model, r.RequestType = models[rng.IntN(6)], api.RequestChat
		r.PromptTokens, r.CompletionTokens = rng.IntN(4000), rng.IntN(1000)
		r.Stream = rng.IntN(10) < 7
		r.TimeToFirstTokenMs = ptr(rng.Int64N(800))
		r.TokensPerSecond = ptr(rng.Float64() * 120)
		r.CachedTokens = ptr(rng.IntN(r.PromptTokens + 1))
		if strings.HasPrefix(r.Model, "qwen3") || strings.HasPrefix(r.Model, "deepseek") {
			r.ReasoningTokens = ptr(rng.IntN(r.CompletionTokens + 1))
		}
		r.RequestDurationMs = *r.TimeToFirstTokenMs + int64(float64(r.CompletionTokens) / *r.TokensPerSecond * 1000)
	case n < 95:
		r.Model, r.RequestType = models[6], api.RequestEmbeddings
		r.PromptTokens = rng.IntN(2000)
		r.RequestDurationMs = rng.Int64N(200)
	default:
		r.Model, r.RequestType = models[7], api.RequestAudio
		r.AudioSeconds, r.AudioFormat = ptr(float64(rng.IntN(2400))/4), ptr("wav")
		r.RequestDurationMs = rng.Int64N(30000)
	}
	r.TotalTokens = r.PromptTokens + r.CompletionTokens
	switch n := rng.IntN(100); {
	case n < 2:
		r.StatusCode, r.ErrorMessage = 499, ptr("client closed the request")
	case n < 3:
		r.StatusCode, r.ErrorMessage = 503, ptr("no worker serves this model")
		r.WorkerID, r.WorkerName, r.EnergyWh = "", "", nil
	case n < 4:
		r.StatusCode, r.ErrorMessage = 429, ptr("model busy: try again later")
		r.WorkerID, r.WorkerName, r.EnergyWh = "", "", nil
	}
	return r
}

// BenchmarkUsageStoreSize writes SVC_BENCH_USAGE_ROWS realistic rows
// (default 1,000,000; 20,000 with -short) through Record over the year
// before now, committing every 5,000 as a busy writer does, and reports
// the file's size and the rows' and aggregates' share of it. One build is
// the measurement: run with -benchtime=1x.
//
//	SVC_BENCH_USAGE_ROWS=10000000 go test -run XXX -bench UsageStoreSize -benchtime=1x -timeout 2h ./internal/bolt/
func BenchmarkUsageStoreSize(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 20_000
	}
	if v := os.Getenv("SVC_BENCH_USAGE_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("SVC_BENCH_USAGE_ROWS: %v", err)
		}
	}
	for b.Loop() {
		s, err := Open(b.TempDir(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		w := s.NewWriter(WriterOptions{})
		u := s.Usage(w)
		rng := rand.New(rand.NewPCG(5, 6))
		// Three organisations with UUID ids, as account makes them; one
		// makes most of the traffic.
		orgs := [...]string{"5f0c2b1e-8a3d-4c6f-9e2b-7d1a0c3e5f48", "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d", "0f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f"}
		now := time.Now().UTC()
		first := now.AddDate(-1, 0, 0)
		step := now.Sub(first) / time.Duration(n)
		var value int64
		start := time.Now()
		for i := range n {
			r := realisticRow(rng, first.Add(time.Duration(i)*step))
			org := orgs[0]
			if k := rng.IntN(10); k >= 8 {
				org = orgs[k-7]
			}
			value += int64(len(usageValue(&r)))
			u.Record(org, r)
			if i%5000 == 4999 {
				if err := w.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		var rows, aggs bbolt.BucketStats
		err = s.db.View(func(tx *bbolt.Tx) error {
			rows = tx.Bucket(bucketUsageRows).Stats()
			for _, name := range [][]byte{bucketUsageDays, bucketUsageModels, bucketUsageWorkers} {
				aggs.Add(tx.Bucket(name).Stats())
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if rows.KeyN != n {
			b.Fatalf("%d of %d rows stored", rows.KeyN, n)
		}
		fi, err := os.Stat(s.Path())
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		inUse := func(st bbolt.BucketStats) int64 { return int64(st.LeafInuse + st.BranchInuse) }
		b.ReportMetric(float64(value)/float64(n), "value-B/row")
		b.ReportMetric(float64(inUse(rows))/float64(n), "rows-inuse-B/row")
		b.ReportMetric(float64(fi.Size())/float64(n), "file-B/row")
		b.ReportMetric(float64(fi.Size())/(1<<20), "file-MiB")
		b.ReportMetric(float64(inUse(aggs))/(1<<20), "aggregates-MiB")
		b.ReportMetric(float64(n)/elapsed.Seconds(), "rows/s")
	}
}

// usageValue is a row's stored value.
func usageValue(r *api.UsageRow) []byte { return appendUsageRow(nil, r) }

// BenchmarkUsagePrune measures one pruning round at several batch sizes
// on a store of a million rows (50,000 with -short), all due: the scan (a read transaction)
// and the write transaction deleting what it found, which the writer's
// group commits wait for. It reports the median of ten rounds each. One
// build is the measurement: run with -benchtime=1x.
func BenchmarkUsagePrune(b *testing.B) {
	// Ten rounds of each batch size take 385,000 rows.
	n, batches := 1_000_000, []int{500, 1000, 2000, 5000, 10000, 20000}
	if testing.Short() {
		n, batches = 50_000, []int{500, 1000, 2000}
	}
	for b.Loop() {
		s, err := Open(b.TempDir(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		u := s.Usage(s.NewWriter(WriterOptions{}))
		rng := rand.New(rand.NewPCG(9, 10))
		org := "5f0c2b1e-8a3d-4c6f-9e2b-7d1a0c3e5f48"
		first := time.Now().UTC().AddDate(-2, 0, 0)
		// Rows only: pruning never reads the aggregates. Written in big
		// transactions, and full pages as Record leaves them.
		for i := 0; i < n; i += 50_000 {
			err := s.db.Update(func(tx *bbolt.Tx) error {
				rows := tx.Bucket(bucketUsageRows)
				rows.FillPercent = 0.95
				for j := i; j < min(n, i+50_000); j++ {
					at := first.Add(time.Duration(j) * time.Minute)
					r := realisticRow(rng, at)
					if err := rows.Put(timeKey(org, at, uint64(j)), usageValue(&r)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		// The baseline: a commit of one row, what any group commit pays
		// in fsyncs.
		var commits []time.Duration
		for i := range 10 {
			t := time.Now()
			err := s.db.Update(func(tx *bbolt.Tx) error {
				r := realisticRow(rng, time.Now())
				return tx.Bucket(bucketUsageRows).Put(timeKey("other", r.CreatedAt, uint64(i)), usageValue(&r))
			})
			if err != nil {
				b.Fatal(err)
			}
			commits = append(commits, time.Since(t))
		}
		slices.Sort(commits)
		b.ReportMetric(ms(commits[len(commits)/2]), "commit-ms/tx")
		cutoff := time.Now().Add(-time.Hour).UnixNano()
		for _, batch := range batches {
			u.pruneBatch = batch
			var scans, writes []time.Duration
			for range 10 {
				t := time.Now()
				old, _, err := u.oldRows(nil, cutoff)
				scans = append(scans, time.Since(t))
				if err != nil || len(old) != batch {
					b.Fatalf("round found %d rows, %v", len(old), err)
				}
				t = time.Now()
				if err := u.deleteRows(old); err != nil {
					b.Fatal(err)
				}
				writes = append(writes, time.Since(t))
			}
			slices.Sort(scans)
			slices.Sort(writes)
			b.ReportMetric(ms(writes[len(writes)/2]), fmt.Sprintf("write-ms/tx@%d", batch))
			b.ReportMetric(ms(scans[len(scans)/2]), fmt.Sprintf("scan-ms/round@%d", batch))
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
