package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/powerlog"
)

// powerNow is the clock of the power tests: on the hour.
var powerNow = time.Date(2026, 11, 15, 10, 0, 0, 0, time.UTC)

// reading is one channel's figures in a window or bucket: joules, covered
// seconds, peak watts.
type reading struct{ j, c, p float64 }

// sys is a window whose only channel is the whole machine's.
func sys(start time.Time, secs float64, r reading) api.PowerWindow {
	return api.PowerWindow{Start: start, Seconds: secs, Joules: map[string]float64{api.ScopeSystem: r.j},
		Covered: map[string]float64{api.ScopeSystem: r.c}, PeakW: map[string]float64{api.ScopeSystem: r.p}}
}

func at(min float64) time.Time { return powerNow.Add(time.Duration(min * float64(time.Minute))) }

var testChannels = []api.PowerChannel{
	{Key: "gpu0", Scope: api.ScopeGPU, Index: ptr(0), Name: "NVIDIA L4", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: ptr(72.0)},
	{Key: "cpu", Scope: api.ScopeCPU, Source: "rapl", Method: api.MethodMeasured},
	{Key: api.ScopeSystem, Scope: api.ScopeSystem, Source: "estimate", Method: api.MethodEstimated},
}

// openPower opens the store in dir and the history kept in it.
func openPower(t *testing.T, dir string) (*Store, *Writer, *Power, *powerlog.Log) {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := s.NewWriter(WriterOptions{})
	p := s.Power(w)
	return s, w, p, powerlog.New(p, nil)
}

func flush(t *testing.T, w *Writer) {
	t.Helper()
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

// sums are a bucket's channels in the order they are stored.
func sums(rs ...any) []powerlog.Sum {
	var out []powerlog.Sum
	for i := 0; i < len(rs); i += 2 {
		r := rs[i+1].(reading)
		out = append(out, powerlog.Sum{Key: []byte(rs[i].(string)), Figures: powerlog.Figures{Joules: r.j, Covered: r.c, Peak: r.p}})
	}
	return out
}

// storedBuckets reads a worker's buckets of one resolution as stored.
func storedBuckets(t *testing.T, s *Store, bucket []byte, worker string) map[time.Time]map[string]reading {
	t.Helper()
	out := map[time.Time]map[string]reading{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		prefix := append([]byte(worker), 0)
		c := tx.Bucket(bucket).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			sums, err := decodePowerSums(nil, v)
			if err != nil {
				return err
			}
			m := map[string]reading{}
			for _, s := range sums {
				m[string(s.Key)] = reading{s.Joules, s.Covered, s.Peak}
			}
			out[time.Unix(int64(binary.BigEndian.Uint64(k[len(prefix):])), 0).UTC()] = m
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Every resolution the history has is one the store keeps.
func TestPowerBucketForEveryLayer(t *testing.T) {
	seen := map[string]bool{}
	for _, l := range powerlog.Layers() {
		b, err := powerBucket(l.Res)
		if err != nil || seen[string(b)] {
			t.Fatalf("%d s: bucket %s, %v", l.Res, b, err)
		}
		seen[string(b)] = true
	}
	if _, err := powerBucket(120); err == nil {
		t.Fatal("a bucket for a resolution the history does not have")
	}
}

// What the history knows of a worker beyond its buckets survives a
// restart: its through, so a resend is still recognised, and its channels,
// stored even for a worker that never named any.
func TestPowerWorkersSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	s, w, _, h := openPower(t, dir)
	minute := func(i int) api.PowerWindow { return sys(at(float64(i)), 60, reading{60, 60, 1}) }
	h.Record("w1", api.PowerReport{Channels: testChannels, Machine: api.MethodMeasured, Windows: []api.PowerWindow{minute(-9), minute(-8)}}, powerNow)
	h.Record("w2", api.PowerReport{Windows: []api.PowerWindow{minute(-5)}}, powerNow)
	flush(t, w)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, w, _, h = openPower(t, dir)
	if got := h.Through("w1"); !got.Equal(at(-7)) {
		t.Fatalf("Through after reopen = %v, want %v", got, at(-7))
	}
	h.Record("w1", api.PowerReport{Windows: []api.PowerWindow{minute(-8), minute(-7)}}, powerNow)
	flush(t, w)
	if got := storedBuckets(t, s, bucketPower3600, "w1")[at(-60)]["system"].j; got != 180 {
		t.Fatalf("%v J after a resend across a restart, want 180", got)
	}
	hist, err := h.History("w1", api.Range1h, powerNow)
	if err != nil || !reflect.DeepEqual(hist.Channels, testChannels) || hist.Machine == nil || *hist.Machine != api.MethodMeasured || len(hist.Points) != 3 {
		t.Fatalf("after reopen: %+v, %v", hist, err)
	}
	hist, err = h.History("w2", api.Range1h, powerNow)
	if err != nil || !h.Through("w2").Equal(at(-4)) || hist.Channels == nil || len(hist.Channels) != 0 || hist.Machine != nil || len(hist.Points) != 1 {
		t.Fatalf("a worker without channels after reopen: through %v, %+v, %v", h.Through("w2"), hist, err)
	}
}

// writeTxID is the id of the last committed write transaction.
func writeTxID(t *testing.T, s *Store) int {
	t.Helper()
	var id int
	if err := s.db.View(func(tx *bbolt.Tx) error { id = tx.ID(); return nil }); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestPowerPruneRetention(t *testing.T) {
	s, w, p, h := openPower(t, t.TempDir())
	p.pruneBatch = 500
	// Three workers, each with a minute of readings every 5 minutes for
	// the 32 days before powerNow.
	workers := []string{"w1", "w10", "w2"}
	for _, id := range workers {
		var ws []api.PowerWindow
		for m := -32 * 24 * 60; m < 0; m += 5 {
			ws = append(ws, sys(at(float64(m)), 60, reading{60, 60, 1}))
		}
		h.Record(id, api.PowerReport{Windows: ws}, powerNow)
	}
	flush(t, w)
	count := func(b []byte) (n int) {
		_ = s.db.View(func(tx *bbolt.Tx) error { n = tx.Bucket(b).Stats().KeyN; return nil })
		return n
	}
	// Kept per worker: minute buckets of the last 2 h (24), five-minute
	// ones of the last 25 h (300), hours of the last 31 days (744).
	tests := []struct {
		bucket []byte
		kept   int
		oldest time.Time
	}{
		{bucketPower60, 24, at(-120)},
		{bucketPower300, 300, at(-25 * 60)},
		{bucketPower3600, 744, at(-31 * 24 * 60)},
	}
	before := map[string]int{}
	for _, tt := range tests {
		before[string(tt.bucket)] = count(tt.bucket)
	}
	tx0 := writeTxID(t, s)
	n, err := p.Prune(powerNow)
	if err != nil {
		t.Fatal(err)
	}
	deleted, txs := 0, 0
	for _, tt := range tests {
		if got := count(tt.bucket); got != len(workers)*tt.kept {
			t.Errorf("%s: %d kept, want %d", tt.bucket, got, len(workers)*tt.kept)
		}
		gone := before[string(tt.bucket)] - len(workers)*tt.kept
		deleted += gone
		txs += (gone + p.pruneBatch - 1) / p.pruneBatch
		for _, id := range workers {
			got := storedBuckets(t, s, tt.bucket, id)
			oldest := powerNow
			for t := range got {
				if t.Before(oldest) {
					oldest = t
				}
			}
			if !oldest.Equal(tt.oldest) {
				t.Errorf("%s %s: oldest bucket %v, want %v", tt.bucket, id, oldest, tt.oldest)
			}
		}
	}
	if n != deleted {
		t.Fatalf("Prune = %d, deleted %d", n, deleted)
	}
	// Each transaction deleted at most pruneBatch keys.
	if got := writeTxID(t, s) - tx0; got != txs {
		t.Fatalf("%d write transactions, want %d of at most %d keys", got, txs, p.pruneBatch)
	}
	// Again: nothing left to delete, and no write transaction for it.
	tx0 = writeTxID(t, s)
	if n, err := p.Prune(powerNow); n != 0 || err != nil || writeTxID(t, s) != tx0 {
		t.Fatalf("second Prune = %d, %v", n, err)
	}
	// Every range still reads in full after pruning.
	for _, rng := range []string{api.Range1h, api.Range24h, api.Range30d} {
		hist, _ := h.History("w10", rng, powerNow)
		res, span, _ := api.RangeResolution(rng)
		want := int(span / max(res, 5*time.Minute))
		if len(hist.Points) != want {
			t.Errorf("%s: %d points after pruning, want %d", rng, len(hist.Points), want)
		}
	}
}

func TestPowerMalformedValues(t *testing.T) {
	s, w, _, h := openPower(t, t.TempDir())
	h.Record("w1", api.PowerReport{Windows: []api.PowerWindow{sys(at(-5), 30, reading{60, 30, 2})}}, powerNow)
	flush(t, w)
	err := s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketPower60).Put(powerKey("w1", at(-5).Unix()), []byte("junk"))
	})
	if err != nil {
		t.Fatal(err)
	}
	// Read: the bucket is skipped, not an error.
	hist, err := h.History("w1", api.Range1h, powerNow)
	if err != nil || len(hist.Points) != 0 {
		t.Fatalf("history over a malformed bucket: %v, %v", hist.Points, err)
	}
	// Written to: started over, and the commit does not fail.
	h.Record("w1", api.PowerReport{Windows: []api.PowerWindow{sys(at(-4.5), 30, reading{90, 30, 3})}}, powerNow)
	if err := w.Flush(); err != nil {
		t.Fatalf("a malformed bucket failed the commit: %v", err)
	}
	if got := storedBuckets(t, s, bucketPower60, "w1")[at(-5)]; !reflect.DeepEqual(got, map[string]reading{"system": {90, 30, 3}}) {
		t.Fatalf("bucket after reset %v", got)
	}

	good := appendPowerSums(nil, sums("a", reading{1, 1, 1}, "b", reading{2, 2, 2}))
	if sums, err := decodePowerSums(nil, good); err != nil || len(sums) != 2 || string(sums[1].Key) != "b" || sums[1].Joules != 2 {
		t.Fatalf("decoded %v, %v", sums, err)
	}
	f64 := func(v float64) []byte { return binary.LittleEndian.AppendUint64(nil, math.Float64bits(v)) }
	entry := func(k string, j, c, pk float64) []byte {
		b := append([]byte{byte(len(k))}, k...)
		return append(append(append(b, f64(j)...), f64(c)...), f64(pk)...)
	}
	for name, bad := range map[string][]byte{
		"empty":        nil,
		"version":      append([]byte{9}, good[1:]...),
		"truncated":    good[:len(good)-1],
		"empty key":    append([]byte{1}, entry("", 1, 1, 1)...),
		"unsorted":     append(append([]byte{1}, entry("b", 1, 1, 1)...), entry("a", 1, 1, 1)...),
		"twice":        append(append([]byte{1}, entry("a", 1, 1, 1)...), entry("a", 1, 1, 1)...),
		"nan":          append([]byte{1}, entry("a", math.NaN(), 1, 1)...),
		"no coverage":  append([]byte{1}, entry("a", 1, 0, 1)...),
		"negative":     append([]byte{1}, entry("a", 1, 1, -1)...),
		"infinite avg": append([]byte{1}, entry("a", math.Inf(1), 1, 1)...),
	} {
		if _, err := decodePowerSums(nil, bad); err == nil {
			t.Errorf("%s: %x decoded", name, bad)
		}
	}
}

func TestPowerBadWorkerIDDropped(t *testing.T) {
	s, w, p, _ := openPower(t, t.TempDir())
	for _, id := range []string{"", "a\x00b"} {
		p.Add(id, []powerlog.Delta{{Res: 60, Start: at(-5).Unix(), Sums: sums("system", reading{60, 60, 1})}},
			at(-4).UnixNano(), &powerlog.Meta{})
	}
	flush(t, w)
	_ = s.db.View(func(tx *bbolt.Tx) error {
		for _, b := range [][]byte{bucketPower60, bucketPowerThrough, bucketPowerChans} {
			if n := tx.Bucket(b).Stats().KeyN; n != 0 {
				t.Fatalf("%d keys stored in %s", n, b)
			}
		}
		return nil
	})
}

// Reports, histories and pruning run at once on a live writer; -race
// checks the sharing, and the totals that nothing was lost or doubled.
func TestPowerConcurrent(t *testing.T) {
	_, w, p, h := openPower(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var wg sync.WaitGroup
	for i := range 4 {
		id := fmt.Sprintf("w%d", i)
		wg.Go(func() {
			for m := -60; m < 0; m++ {
				// Every report resends the one before it.
				h.Record(id, api.PowerReport{Channels: testChannels, Windows: []api.PowerWindow{
					sys(at(float64(m-1)), 60, reading{60, 60, 1}), sys(at(float64(m)), 60, reading{60, 60, 1}),
				}}, powerNow)
				if _, err := h.History(id, api.Range1h, powerNow); err != nil {
					t.Error(err)
				}
				h.TodayKWh(id, powerNow)
			}
		})
	}
	wg.Go(func() {
		for range 10 {
			if _, err := p.Prune(powerNow); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		hist, _ := h.History(fmt.Sprintf("w%d", i), api.Range1h, powerNow)
		// Minutes -61 to -1 were recorded once each; -61 is outside the hour.
		if len(hist.Points) != 60 || math.Abs(hist.Totals.EnergyKWh-3600/3.6e6) > 1e-15 {
			t.Fatalf("w%d: %d points, %v kWh", i, len(hist.Points), hist.Totals.EnergyKWh)
		}
	}
}

// Two reports of one worker may reach the writer in either order: the
// stored through never goes back.
func TestPowerStoredThroughNeverGoesBack(t *testing.T) {
	dir := t.TempDir()
	s, w, p, _ := openPower(t, dir)
	p.Add("w1", nil, at(-9).UnixNano(), nil)
	flush(t, w)
	// As if a later report's transaction had run first.
	err := s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketPowerThrough).Put([]byte("w1"), binary.BigEndian.AppendUint64(nil, uint64(at(-1).UnixNano())))
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Add("w1", nil, at(-4).UnixNano(), nil)
	flush(t, w)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, _, h := openPower(t, dir)
	if got := h.Through("w1"); !got.Equal(at(-1)) {
		t.Fatalf("Through = %v, want %v", got, at(-1))
	}
}
