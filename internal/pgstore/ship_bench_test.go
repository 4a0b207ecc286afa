package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
)

// benchRow is a realistic row: most fields set, as a chat completion's.
func benchRow(rng *rand.Rand, i int, at time.Time) api.UsageRow {
	r := api.UsageRow{
		ID:                 fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", i, rng.Uint32()&0xffff, rng.Uint32()&0xfff, rng.Uint32()&0xfff, rng.Uint64()&0xffffffffffff),
		CreatedAt:          at,
		Model:              fmt.Sprint("meta-llama/Llama-3.1-8B-Instruct-", rng.IntN(10)),
		RequestType:        api.RequestChat,
		StatusCode:         200,
		PromptTokens:       rng.IntN(4000),
		CompletionTokens:   rng.IntN(1000),
		RequestDurationMs:  rng.Int64N(20000),
		TimeToFirstTokenMs: ptr(rng.Int64N(500)),
		TokensPerSecond:    ptr(rng.Float64() * 100),
		WorkerID:           api.NullText(fmt.Sprintf("wk_%016x", rng.IntN(100))),
		WorkerName:         api.NullText(fmt.Sprint("gpu-", rng.IntN(100))),
		APIKeyID:           "key_0123456789",
		QueueWaitMs:        ptr(rng.Int64N(50)),
		EnergyWh:           ptr(rng.Float64()),
		Stream:             true,
		Attempts:           1,
	}
	r.TotalTokens = r.PromptTokens + r.CompletionTokens
	return r
}

// BenchmarkShip100kRows ships 100,000 usage rows of five organisations,
// waiting in the outbox, to PostgreSQL in shipments of 5,000, and reports
// rows shipped per second: from the first shipment to the outbox being
// empty, decoding, the statements, the commits and the outbox's deletes
// included.
//
//	go test -run '^$' -bench Ship100k -benchtime 3x ./internal/pgstore/
func BenchmarkShip100kRows(b *testing.B) {
	const rows = 100_000
	s := open(b, pg.CreateDB(b))
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now().UTC()
	var total time.Duration
	iters := 0
	for i := 0; b.Loop(); i++ {
		iters++
		b.StopTimer()
		db, err := bolt.Open(b.TempDir(), bolt.Options{})
		if err != nil {
			b.Fatal(err)
		}
		w := db.NewWriter(bolt.WriterOptions{Every: time.Hour})
		box, err := db.Outbox(w)
		if err != nil {
			b.Fatal(err)
		}
		for j := range rows {
			box.RecordUsage(fmt.Sprint("org-", j%5), benchRow(rng, i*rows+j, now.Add(-time.Duration(j)*time.Millisecond)))
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		loc := s.Local(box, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		go func() { done <- loc.Shipper.Run(ctx) }()
		if err := loc.Shipper.Sync(context.Background()); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		st := loc.Shipper.State()
		if st.Records != 0 || st.Records+int(st.ShipStats.Records) != rows || st.Duplicates != 0 || st.Shipments != rows/5000 {
			b.Fatalf("after shipping: %+v", st)
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(rows*iters)/total.Seconds(), "rows/s")
	b.ReportMetric(0, "ns/op")
}
