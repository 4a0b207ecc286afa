package bolt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/powerlog"
)

// benchPowerChannels is a machine with eight GPUs: ten channels.
func benchPowerChannels() []api.PowerChannel {
	cs := make([]api.PowerChannel, 0, 10)
	for i := range 8 {
		cs = append(cs, api.PowerChannel{Key: fmt.Sprintf("gpu%d", i), Scope: api.ScopeGPU, Index: ptr(i),
			Name: "NVIDIA H100 80GB HBM3", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: ptr(700.0)})
	}
	return append(cs,
		api.PowerChannel{Key: "cpu", Scope: api.ScopeCPU, Source: "rapl", Method: api.MethodMeasured},
		api.PowerChannel{Key: api.ScopeSystem, Scope: api.ScopeSystem, Source: "ipmi", Method: api.MethodMeasured})
}

// benchPowerWindow is secs seconds at start of every channel, fully
// covered, at made-up watts.
func benchPowerWindow(rng *rand.Rand, chans []api.PowerChannel, start time.Time, secs float64) api.PowerWindow {
	w := api.PowerWindow{Start: start, Seconds: secs, Joules: make(map[string]float64, len(chans)),
		Covered: make(map[string]float64, len(chans)), PeakW: make(map[string]float64, len(chans))}
	for _, c := range chans {
		watts := 80 + rng.Float64()*600
		w.Joules[c.Key], w.Covered[c.Key], w.PeakW[c.Key] = watts*secs, secs, watts*1.2
	}
	return w
}

func benchWorkerID(i int) string { return fmt.Sprintf("wrk_%08x", i*7919) }

// powerFleet builds the history of workers machines of ten channels at
// steady state: 30 days of hourly buckets, 25 hours of five-minute ones
// and 2 hours of minute ones, as pruning leaves them.
//
// The last 25 hours are recorded as the workers send them, a minute's
// window at a time through the history's Record, committed ten minutes at
// a time. The hours before are written as their hourly buckets directly,
// in the same time order, through the same code the writer runs:
// recording them minute by minute would also write, then prune, 4
// million finer buckets.
func powerFleet(b *testing.B, workers int) (*Store, *powerlog.Log, time.Time) {
	b.Helper()
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	w := s.NewWriter(WriterOptions{})
	p := s.Power(w)
	h := powerlog.New(p, nil)
	rng := rand.New(rand.NewPCG(5, 6))
	chans := benchPowerChannels()
	now := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	recent := now.Add(-25 * time.Hour)
	built := time.Now()

	for hour := now.Add(-30 * 24 * time.Hour); hour.Before(recent); hour = hour.Add(time.Hour) {
		err := s.db.Update(func(tx *bbolt.Tx) error {
			for i := range workers {
				win, _ := powerlog.Check(ptr(benchPowerWindow(rng, chans, hour, 3600)))
				if err := p.addToBucket(tx, powerAdd{bucketPower3600, powerKey(benchWorkerID(i), hour.Unix()), win.Sums}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	for m := recent; m.Before(now); m = m.Add(time.Minute) {
		for i := range workers {
			h.Record(benchWorkerID(i), api.PowerReport{Channels: chans, Machine: api.MethodMeasured,
				Windows: []api.PowerWindow{benchPowerWindow(rng, chans, m, 60)}}, now)
		}
		if m.Minute()%10 == 9 {
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		// Pruned every hour, as `svc serve` does, so the file holds what
		// it would.
		if m.Minute() == 59 {
			if _, err := p.Prune(m); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if _, err := p.Prune(now); err != nil {
		b.Fatal(err)
	}
	b.Logf("built %d workers' history in %v", workers, time.Since(built).Round(time.Millisecond))
	return s, h, now
}

func benchFleetSize() int {
	if testing.Short() {
		return 10
	}
	return 100
}

// BenchmarkPowerHistory30d reads one worker's 30d history out of 100
// workers' (10 with -short), and reports what the history costs on disk
// per worker-day: the file's used size over workers × 30 days, and each
// resolution's share.
func BenchmarkPowerHistory30d(b *testing.B) {
	workers := benchFleetSize()
	s, hist, now := powerFleet(b, workers)
	id := benchWorkerID(workers / 2)
	h, err := hist.History(id, api.Range30d, now)
	if err != nil || len(h.Points) != 720 || len(h.Points[0].Values) != 10 {
		b.Fatalf("%d points, %v", len(h.Points), err)
	}
	for b.Loop() {
		if _, err := hist.History(id, api.Range30d, now); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()

	workerDays := float64(workers * 30)
	err = s.db.View(func(tx *bbolt.Tx) error {
		// The file's pages up to the highest in use, free ones included:
		// what the file must be at least.
		b.ReportMetric(float64(tx.Size())/workerDays, "file-B/worker-day")
		for _, l := range powerlog.Layers() {
			name, _ := powerBucket(l.Res)
			st := tx.Bucket(name).Stats()
			b.ReportMetric(float64(st.LeafAlloc+st.BranchAlloc)/workerDays, fmt.Sprintf("%s-B/worker-day", name))
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPowerQueries reads the other ranges of one worker, and
// TodayKWh of every worker as the workers list does.
func BenchmarkPowerQueries(b *testing.B) {
	workers := benchFleetSize()
	_, hist, now := powerFleet(b, workers)
	id := benchWorkerID(workers / 2)
	for _, rng := range []string{api.Range1h, api.Range24h, api.Range7d} {
		b.Run(rng, func(b *testing.B) {
			for b.Loop() {
				if _, err := hist.History(id, rng, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run(fmt.Sprintf("TodayKWh×%d", workers), func(b *testing.B) {
		for b.Loop() {
			for i := range workers {
				if _, ok := hist.TodayKWh(benchWorkerID(i), now); !ok {
					b.Fatal("no energy today")
				}
			}
		}
	})
}

// BenchmarkPowerRecord measures windows per second through a running
// Writer, 100 workers of ten channels each: "live" reports carry one
// minute's window each, as in steady state; "backlog" ones an hour of
// minute windows, as a worker sends after a reconnect.
func BenchmarkPowerRecord(b *testing.B) {
	for _, mode := range []struct {
		name    string
		windows int
	}{{"live", 1}, {"backlog", 60}} {
		b.Run(mode.name, func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			w := s.NewWriter(WriterOptions{})
			h := powerlog.New(s.Power(w), nil)
			rng := rand.New(rand.NewPCG(7, 8))
			chans := benchPowerChannels()
			const workers = 100
			ids := make([]string, workers)
			for i := range ids {
				ids[i] = benchWorkerID(i)
			}
			// Reports are made up front: the benchmark measures storing them.
			reports := make([]api.PowerReport, 2000)
			start := time.Now().UTC().Truncate(time.Minute)
			for i := range reports {
				r := api.PowerReport{Channels: chans, Machine: api.MethodMeasured}
				for j := range mode.windows {
					r.Windows = append(r.Windows, benchPowerWindow(rng, chans, start.Add(time.Duration(j)*time.Minute), 60))
				}
				reports[i] = r
			}
			// The clock at the end of the last window, so that none is
			// taken for one from the future.
			clock := start.Add(time.Duration((b.N/workers+1)*mode.windows) * time.Minute)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()

			b.ResetTimer()
			began := time.Now()
			for i := range b.N {
				if i%1000 == 0 {
					for benchPending(w) > 5000 {
						time.Sleep(100 * time.Microsecond)
					}
				}
				// Worker i%100's (i/100)th report: its windows follow on from
				// the last one's, so none is a resend.
				r := reports[i%len(reports)]
				shift := time.Duration(i/workers*mode.windows) * time.Minute
				ws := make([]api.PowerWindow, len(r.Windows))
				for j, win := range r.Windows {
					win.Start = win.Start.Add(shift)
					ws[j] = win
				}
				r.Windows = ws
				h.Record(ids[i%workers], r, clock)
			}
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(began)
			b.StopTimer()
			b.ReportMetric(float64(b.N*mode.windows)/elapsed.Seconds(), "windows/s")
			var stored int
			_ = s.db.View(func(tx *bbolt.Tx) error {
				stored = tx.Bucket(bucketPower60).Stats().KeyN
				return nil
			})
			if stored != b.N*mode.windows {
				b.Fatalf("%d of %d minute buckets stored", stored, b.N*mode.windows)
			}
		})
	}
}
