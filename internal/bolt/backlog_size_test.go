package bolt

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// The backlog's bound is in bytes estimated per record: the estimate
// must be near what the records hold, or the bound bounds nothing.
func TestBacklogSizeEstimate(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := s.NewWriter(WriterOptions{Every: time.Hour, Batch: 1 << 30})
	u := s.Usage(w)
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now().UTC()
	const n = 50_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		u.Record("5f0c2b1e-8a3d-4c6f-9e2b-7d1a0c3e5f48", realisticRow(rng, now.Add(time.Duration(i))))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	est := w.Backlog().Bytes
	t.Logf("%d rows: %d bytes held (%d a row), %d estimated (%d a row)", n, held, held/n, est, est/n)
	if est < held*6/10 || est > held*16/10 {
		t.Fatalf("estimate %d bytes for %d held", est, held)
	}
	runtime.KeepAlive(w)
}
