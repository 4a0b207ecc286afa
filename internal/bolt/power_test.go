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
)

// powerNow is the clock of the power tests: on the hour.
var powerNow = time.Date(2026, 11, 15, 10, 0, 0, 0, time.UTC)

// reading is one channel's figures in a window: joules, covered seconds,
// peak watts.
type reading struct{ j, c, p float64 }

// win is a window of secs seconds at start.
func win(start time.Time, secs float64, rs map[string]reading) api.PowerWindow {
	w := api.PowerWindow{Start: start, Seconds: secs,
		Joules: map[string]float64{}, Covered: map[string]float64{}, PeakW: map[string]float64{}}
	for k, r := range rs {
		w.Joules[k], w.Covered[k], w.PeakW[k] = r.j, r.c, r.p
	}
	return w
}

// sys is a window whose only channel is the whole machine's.
func sys(start time.Time, secs float64, r reading) api.PowerWindow {
	return win(start, secs, map[string]reading{api.ScopeSystem: r})
}

func at(min float64) time.Time { return powerNow.Add(time.Duration(min * float64(time.Minute))) }

var testChannels = []api.PowerChannel{
	{Key: "gpu0", Scope: api.ScopeGPU, Index: ptr(0), Name: "NVIDIA L4", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: ptr(72.0)},
	{Key: "cpu", Scope: api.ScopeCPU, Source: "rapl", Method: api.MethodMeasured},
	{Key: api.ScopeSystem, Scope: api.ScopeSystem, Source: "estimate", Method: api.MethodEstimated},
}

func openPower(t *testing.T, dir string) (*Store, *Writer, *Power) {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := s.NewWriter(WriterOptions{})
	return s, w, s.Power(w)
}

func flush(t *testing.T, w *Writer) {
	t.Helper()
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
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
				m[string(s.key)] = reading{s.joules, s.covered, s.peak}
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

func TestPowerAggregatesIntoThreeResolutions(t *testing.T) {
	type buckets = map[time.Time]map[string]reading
	tests := []struct {
		name    string
		windows []api.PowerWindow
		want    [3]buckets // 60 s, 300 s, 3600 s
	}{
		{
			name: "minutes add up to five and sixty",
			windows: []api.PowerWindow{
				win(at(0), 60, map[string]reading{"system": {6000, 60, 130}, "gpu0": {3000, 60, 70}}),
				win(at(1), 60, map[string]reading{"system": {7200, 60, 150}, "gpu0": {3600, 58, 71}}),
				win(at(4), 60, map[string]reading{"system": {4800, 30, 120}}),
				win(at(5), 60, map[string]reading{"system": {6000, 60, 100}}),
			},
			want: [3]buckets{
				{
					at(0): {"system": {6000, 60, 130}, "gpu0": {3000, 60, 70}},
					at(1): {"system": {7200, 60, 150}, "gpu0": {3600, 58, 71}},
					at(4): {"system": {4800, 30, 160}}, // a peak below the average is the average
					at(5): {"system": {6000, 60, 100}},
				},
				{
					at(0): {"system": {18000, 150, 160}, "gpu0": {6600, 118, 71}},
					at(5): {"system": {6000, 60, 100}},
				},
				{at(0): {"system": {24000, 210, 160}, "gpu0": {6600, 118, 71}}},
			},
		},
		{
			name: "one report spanning hours misses none",
			windows: func() []api.PowerWindow {
				var ws []api.PowerWindow
				for i := range 180 {
					ws = append(ws, sys(at(float64(i)), 60, reading{60, 60, 1}))
				}
				return ws
			}(),
			want: func() [3]buckets {
				var b [3]buckets
				for i, res := range []int{1, 5, 60} {
					b[i] = buckets{}
					for m := 0; m < 180; m += res {
						b[i][at(float64(m))] = map[string]reading{"system": {60 * float64(res), 60 * float64(res), 1}}
					}
				}
				return b
			}(),
		},
		{
			name: "a window across a minute is split in half",
			windows: []api.PowerWindow{
				sys(at(0.5), 60, reading{600, 60, 40}),
			},
			want: [3]buckets{
				{at(0): {"system": {300, 30, 40}}, at(1): {"system": {300, 30, 40}}},
				{at(0): {"system": {600, 60, 40}}},
				{at(0): {"system": {600, 60, 40}}},
			},
		},
		{
			name: "a window across the hour is split by time in every resolution",
			windows: []api.PowerWindow{
				// 45 s before the hour and 15 after; covered 40 s of 60.
				win(at(59.25), 60, map[string]reading{"system": {800, 40, 30}, "cpu": {400, 60, 9}}),
			},
			want: [3]buckets{
				{at(59): {"system": {600, 30, 30}, "cpu": {300, 45, 9}}, at(60): {"system": {200, 10, 30}, "cpu": {100, 15, 9}}},
				{at(55): {"system": {600, 30, 30}, "cpu": {300, 45, 9}}, at(60): {"system": {200, 10, 30}, "cpu": {100, 15, 9}}},
				{at(0): {"system": {600, 30, 30}, "cpu": {300, 45, 9}}, at(60): {"system": {200, 10, 30}, "cpu": {100, 15, 9}}},
			},
		},
		{
			name: "a long window spreads over every minute it covers",
			windows: []api.PowerWindow{
				sys(at(2), 240, reading{2400, 240, 11}),
			},
			want: [3]buckets{
				{at(2): {"system": {600, 60, 11}}, at(3): {"system": {600, 60, 11}}, at(4): {"system": {600, 60, 11}}, at(5): {"system": {600, 60, 11}}},
				{at(0): {"system": {1800, 180, 11}}, at(5): {"system": {600, 60, 11}}},
				{at(0): {"system": {2400, 240, 11}}},
			},
		},
		{
			name: "readings that cannot be right are dropped",
			windows: []api.PowerWindow{
				win(at(0), 60, map[string]reading{"system": {600, 60, 10}, "gpu0": {math.NaN(), 60, 1}, "gpu1": {-5, 60, 1},
					"gpu2": {10, 0, 1}, "": {10, 60, 1}, "cpu": {120, 90, math.Inf(1)}}),
				sys(at(1), 0, reading{1, 1, 1}),
				sys(at(2), math.NaN(), reading{1, 1, 1}),
				sys(at(3), 2*86400, reading{1, 1, 1}),
				sys(time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC), 60, reading{1, 1, 1}),
			},
			want: [3]buckets{
				// Covered is capped at the window's length.
				{at(0): {"system": {600, 60, 10}, "cpu": {120, 60, 2}}},
				{at(0): {"system": {600, 60, 10}, "cpu": {120, 60, 2}}},
				{at(0): {"system": {600, 60, 10}, "cpu": {120, 60, 2}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, w, p := openPower(t, t.TempDir())
			p.Record("w1", api.PowerReport{Channels: testChannels, Machine: api.MethodEstimated, Windows: tt.windows})
			// Another worker whose id extends this one's is kept apart.
			p.Record("w10", api.PowerReport{Windows: []api.PowerWindow{sys(at(0), 60, reading{1, 1, 1})}})
			flush(t, w)
			for i, l := range p.layers {
				got := storedBuckets(t, s, l.bucket, "w1")
				if !reflect.DeepEqual(got, tt.want[i]) {
					t.Errorf("%s:\n got %v\nwant %v", l.bucket, got, tt.want[i])
				}
			}
		})
	}
}

func TestPowerResendIsNotCountedTwice(t *testing.T) {
	dir := t.TempDir()
	s, w, p := openPower(t, dir)
	minute := func(i int) api.PowerWindow { return sys(at(float64(i)), 60, reading{60, 60, 1}) }
	if got := p.Through("w1"); !got.IsZero() {
		t.Fatalf("Through before any report = %v", got)
	}
	steps := []struct {
		name    string
		windows []api.PowerWindow
		through time.Time
		joules  float64 // in the hour bucket after the step
	}{
		{"first report", []api.PowerWindow{minute(0), minute(1), minute(2)}, at(3), 180},
		{"resent after a reconnect, with new ones", []api.PowerWindow{minute(1), minute(2), minute(3), minute(4)}, at(5), 300},
		{"only old ones", []api.PowerWindow{minute(0), minute(4)}, at(5), 300},
		{"out of order", []api.PowerWindow{minute(7), minute(6)}, at(8), 420},
		{"overlapping the last one", []api.PowerWindow{sys(at(7.5), 60, reading{60, 60, 1}), minute(8)}, at(9), 480},
		{"no windows", nil, at(9), 480},
	}
	for _, st := range steps {
		p.Record("w1", api.PowerReport{Channels: testChannels, Windows: st.windows})
		// Through counts the report before it is committed.
		if got := p.Through("w1"); !got.Equal(st.through) {
			t.Fatalf("%s: Through = %v before commit, want %v", st.name, got, st.through)
		}
		flush(t, w)
		got := storedBuckets(t, s, bucketPower3600, "w1")[at(0)]["system"].j
		if got != st.joules {
			t.Fatalf("%s: %v J stored, want %v", st.name, got, st.joules)
		}
	}

	// Through survives a restart: a resend then is still recognised.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, w, p = openPower(t, dir)
	if got := p.Through("w1"); !got.Equal(at(9)) {
		t.Fatalf("Through after reopen = %v, want %v", got, at(9))
	}
	p.Record("w1", api.PowerReport{Windows: []api.PowerWindow{minute(7), minute(8), minute(9)}})
	flush(t, w)
	if got := storedBuckets(t, s, bucketPower3600, "w1")[at(0)]["system"].j; got != 540 {
		t.Fatalf("%v J after a resend across a restart, want 540", got)
	}
	h, err := p.History("w1", api.Range1h, at(30))
	if err != nil || !reflect.DeepEqual(h.Channels, testChannels) || h.Machine != nil {
		t.Fatalf("channels after reopen %+v, machine %v, %v", h.Channels, h.Machine, err)
	}
}

func TestPowerHistoryRanges(t *testing.T) {
	_, w, p := openPower(t, t.TempDir())
	// A reading of 100 W on the system channel every minute of the last
	// 31 days, up to powerNow, and 50 W on gpu0 every other minute.
	var ws []api.PowerWindow
	for m := -31 * 24 * 60; m < 0; m++ {
		rs := map[string]reading{"system": {6000, 60, 100}}
		if m%2 == 0 {
			rs["gpu0"] = reading{3000, 60, 50}
		}
		ws = append(ws, win(at(float64(m)), 60, rs))
		if len(ws) == 5000 {
			p.Record("w1", api.PowerReport{Channels: testChannels, Machine: api.MethodMeasured, Windows: ws})
			ws = nil
		}
	}
	p.Record("w1", api.PowerReport{Windows: ws})
	flush(t, w)

	tests := []struct {
		name        string
		rng         string
		now         time.Time
		res         int
		first, last time.Time
		points      int
	}{
		// On the boundary: the bucket starting at now-span is in; the one
		// starting at now is too but has no readings yet.
		{"1h on the minute", api.Range1h, powerNow, 60, at(-60), at(-1), 60},
		// Mid-minute: the minute running at now-span started before it.
		{"1h mid-minute", api.Range1h, at(-0.5), 60, at(-60), at(-1), 60},
		// Both ends in, with readings: 61 minutes, coverage capped at 1.
		{"1h on the minute, both ends read", api.Range1h, at(-1), 60, at(-61), at(-1), 61},
		{"1h earlier, mid-minute", api.Range1h, at(-1.5), 60, at(-61), at(-2), 60},
		{"24h", api.Range24h, powerNow, 300, at(-24 * 60), at(-5), 288},
		{"24h mid-bucket", api.Range24h, at(-7), 300, at(-24*60 - 5), at(-10), 288},
		{"7d", api.Range7d, powerNow, 3600, at(-7 * 24 * 60), at(-60), 168},
		{"30d", api.Range30d, powerNow, 3600, at(-30 * 24 * 60), at(-60), 720},
		{"30d mid-hour", api.Range30d, at(-30), 3600, at(-30 * 24 * 60), at(-60), 720},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := p.History("w1", tt.rng, tt.now)
			if err != nil {
				t.Fatal(err)
			}
			if h.WorkerID != "w1" || h.Range != tt.rng || h.ResolutionSeconds != tt.res {
				t.Fatalf("header %q %q %d", h.WorkerID, h.Range, h.ResolutionSeconds)
			}
			if len(h.Points) != tt.points {
				t.Fatalf("%d points, want %d", len(h.Points), tt.points)
			}
			first, last := h.Points[0].T, h.Points[len(h.Points)-1].T
			if !first.Equal(tt.first) || !last.Equal(tt.last) {
				t.Fatalf("points from %v to %v, want %v to %v", first, last, tt.first, tt.last)
			}
			_, span, _ := api.RangeResolution(tt.rng)
			if first.Before(tt.now.Add(-span)) || first.Add(-time.Duration(tt.res)*time.Second).After(tt.now.Add(-span)) {
				t.Fatalf("first point at %v: not the first bucket starting in the range", first)
			}
			for i, pt := range h.Points {
				if i > 0 && pt.T.Sub(h.Points[i-1].T) != time.Duration(tt.res)*time.Second {
					t.Fatalf("point %d at %v after %v", i, pt.T, h.Points[i-1].T)
				}
				want := map[string]float64{"system": 100, "gpu0": 50}
				if tt.res == 60 && pt.T.Unix()/60%2 != 0 {
					delete(want, "gpu0") // absent: no reading in that minute
				}
				if !reflect.DeepEqual(pt.Values, want) {
					t.Fatalf("point at %v: %v", pt.T, pt.Values)
				}
			}
			if h.Machine == nil || *h.Machine != api.MethodMeasured || !reflect.DeepEqual(h.Channels, testChannels) {
				t.Fatalf("machine %v, channels %+v", h.Machine, h.Channels)
			}
			// Every point's system minute was fully covered at 100 W.
			secs := float64(tt.points * tt.res)
			want := api.PowerTotals{EnergyKWh: 100 * secs / 3.6e6, AvgW: 100, PeakW: 100, Coverage: min(1, secs/span.Seconds())}
			if !closeTotals(h.Totals, want) {
				t.Fatalf("totals %+v, want %+v", h.Totals, want)
			}
		})
	}
	if _, err := p.History("w1", "2h", powerNow); err == nil {
		t.Fatal("History of an unknown range")
	}
}

func closeTotals(a, b api.PowerTotals) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	return near(a.EnergyKWh, b.EnergyKWh) && near(a.AvgW, b.AvgW) && near(a.PeakW, b.PeakW) && near(a.Coverage, b.Coverage)
}

func TestPowerHistoryGapsAndTotals(t *testing.T) {
	_, w, p := openPower(t, t.TempDir())
	p.Record("w1", api.PowerReport{Channels: testChannels, Machine: api.MethodEstimated, Windows: []api.PowerWindow{
		win(at(-50), 60, map[string]reading{"system": {12000, 60, 250}, "gpu0": {3600, 60, 70}}),
		win(at(-49), 60, map[string]reading{"system": {6000, 30, 210}}), // gpu0 had no reading
		win(at(-48), 60, nil), // no readings at all: no point
		// minute -47 never reported: no point
		win(at(-46), 30, map[string]reading{"system": {4500, 30, 180}, "cpu": {900, 30, 31}}),
		win(at(-45.5), 30, map[string]reading{"gpu0": {1200, 20, 65}}),
	}})
	flush(t, w)
	h, err := p.History("w1", api.Range1h, powerNow)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.PowerPoint{
		{T: at(-50), Values: map[string]float64{"system": 200, "gpu0": 60}},
		{T: at(-49), Values: map[string]float64{"system": 200}},
		{T: at(-46), Values: map[string]float64{"system": 150, "cpu": 30, "gpu0": 60}},
	}
	if !reflect.DeepEqual(h.Points, want) {
		t.Fatalf("points\n got %v\nwant %v", h.Points, want)
	}
	// System: 22,500 J over 120 covered seconds of the hour; peak 250 W.
	wantTotals := api.PowerTotals{EnergyKWh: 22500 / 3.6e6, AvgW: 22500.0 / 120, PeakW: 250, Coverage: 120.0 / 3600}
	if h.Totals != wantTotals {
		t.Fatalf("totals %+v, want %+v", h.Totals, wantTotals)
	}
	if h.Machine == nil || *h.Machine != api.MethodEstimated {
		t.Fatalf("machine %v", h.Machine)
	}
	// The same at 24h, in one five-minute bucket (-50 to -45).
	h, _ = p.History("w1", api.Range24h, powerNow)
	wantPt := api.PowerPoint{T: at(-50), Values: map[string]float64{"system": 22500.0 / 120, "gpu0": 4800.0 / 80, "cpu": 30}}
	if len(h.Points) != 1 || !reflect.DeepEqual(h.Points[0], wantPt) {
		t.Fatalf("24h points %v", h.Points)
	}
	if want := (api.PowerTotals{EnergyKWh: 22500 / 3.6e6, AvgW: 22500.0 / 120, PeakW: 250, Coverage: 120.0 / 86400}); h.Totals != want {
		t.Fatalf("24h totals %+v, want %+v", h.Totals, want)
	}
}

func TestPowerWorkerWithoutReadings(t *testing.T) {
	_, w, p := openPower(t, t.TempDir())
	// Channels known, but no window closed yet.
	p.Record("w-new", api.PowerReport{Channels: testChannels, Machine: api.MethodMeasured})
	// Readings, but all outside the range asked for.
	p.Record("w-old", api.PowerReport{Channels: testChannels, Machine: api.MethodMeasured,
		Windows: []api.PowerWindow{sys(at(-2*24*60), 60, reading{60, 60, 1})}})
	flush(t, w)
	tests := []struct {
		worker   string
		channels []api.PowerChannel
		machine  bool
	}{
		{"w-unknown", []api.PowerChannel{}, false},
		{"w-new", []api.PowerChannel{}, false},
		{"w-old", testChannels, true},
	}
	for _, tt := range tests {
		t.Run(tt.worker, func(t *testing.T) {
			for _, rng := range []string{api.Range1h, api.Range24h} {
				h, err := p.History(tt.worker, rng, powerNow)
				if err != nil {
					t.Fatal(err)
				}
				if h.Points == nil || len(h.Points) != 0 || !reflect.DeepEqual(h.Channels, tt.channels) ||
					(h.Machine != nil) != tt.machine || h.Totals != (api.PowerTotals{}) || h.WorkerID != tt.worker {
					t.Fatalf("%s: %+v", rng, h)
				}
			}
			_, ok := p.TodayKWh(tt.worker, powerNow)
			if ok != tt.machine {
				t.Fatalf("TodayKWh ok = %v", ok)
			}
		})
	}
}

func TestPowerHistoryIsACopy(t *testing.T) {
	_, w, p := openPower(t, t.TempDir())
	chans := cloneChannels(testChannels)
	p.Record("w1", api.PowerReport{Channels: chans, Windows: []api.PowerWindow{sys(at(-5), 60, reading{60, 60, 1})}})
	flush(t, w)
	*chans[0].Index = 7 // the worker's decoder reuses its report
	h, _ := p.History("w1", api.Range1h, powerNow)
	*h.Channels[0].PowerLimitW = 1
	h, _ = p.History("w1", api.Range1h, powerNow)
	if !reflect.DeepEqual(h.Channels, testChannels) {
		t.Fatalf("channels changed through a shared pointer: %+v", h.Channels)
	}
}

func TestPowerTodayKWh(t *testing.T) {
	_, w, p := openPower(t, t.TempDir())
	midnight := time.Date(2026, 11, 15, 0, 0, 0, 0, time.UTC)
	p.Record("w1", api.PowerReport{Windows: []api.PowerWindow{
		// Across midnight: the half after it counts.
		sys(midnight.Add(-30*time.Second), 60, reading{7.2e6, 60, 1}),
		// An hour's worth at 3:00.
		sys(midnight.Add(3*time.Hour), 3600, reading{3.6e6, 3600, 1000}),
		// In the current hour, minutes ago.
		win(midnight.Add(9*time.Hour+10*time.Minute), 60, map[string]reading{"system": {1.8e6, 60, 1}, "gpu0": {9e6, 60, 1}}),
	}})
	flush(t, w)
	tests := []struct {
		name string
		now  time.Time
		want float64
	}{
		{"now", midnight.Add(9*time.Hour + 15*time.Minute), 1 + 1 + 0.5},
		{"before three", midnight.Add(2 * time.Hour), 1},
		{"just after midnight", midnight.Add(20 * time.Second), 1},
		{"the next day", midnight.Add(24 * time.Hour), 0},
		{"in a zone east of UTC", midnight.Add(9*time.Hour + 15*time.Minute).In(time.FixedZone("UTC+10", 10*3600)), 2.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := p.TodayKWh("w1", tt.now)
			if !ok || got != tt.want {
				t.Fatalf("TodayKWh = %v, %v; want %v", got, ok, tt.want)
			}
		})
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
	s, w, p := openPower(t, t.TempDir())
	p.pruneBatch = 500
	// Three workers, each with a minute of readings every 5 minutes for
	// the 32 days before powerNow.
	workers := []string{"w1", "w10", "w2"}
	for _, id := range workers {
		var ws []api.PowerWindow
		for m := -32 * 24 * 60; m < 0; m += 5 {
			ws = append(ws, sys(at(float64(m)), 60, reading{60, 60, 1}))
		}
		p.Record(id, api.PowerReport{Windows: ws})
	}
	flush(t, w)
	count := func(b []byte) (n int) {
		_ = s.db.View(func(tx *bbolt.Tx) error { n = tx.Bucket(b).Stats().KeyN; return nil })
		return n
	}
	before := map[string]int{}
	for _, l := range p.layers {
		before[string(l.bucket)] = count(l.bucket)
	}
	tx0 := writeTxID(t, s)
	n, err := p.Prune(powerNow)
	if err != nil {
		t.Fatal(err)
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
		h, _ := p.History("w10", rng, powerNow)
		res, span, _ := api.RangeResolution(rng)
		want := int(span / max(res, 5*time.Minute))
		if len(h.Points) != want {
			t.Errorf("%s: %d points after pruning, want %d", rng, len(h.Points), want)
		}
	}
}

func TestPowerMalformedValues(t *testing.T) {
	s, w, p := openPower(t, t.TempDir())
	p.Record("w1", api.PowerReport{Windows: []api.PowerWindow{sys(at(-5), 30, reading{60, 30, 2})}})
	flush(t, w)
	err := s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketPower60).Put(powerKey("w1", at(-5).Unix()), []byte("junk"))
	})
	if err != nil {
		t.Fatal(err)
	}
	// Read: the bucket is skipped, not an error.
	h, err := p.History("w1", api.Range1h, powerNow)
	if err != nil || len(h.Points) != 0 {
		t.Fatalf("history over a malformed bucket: %v, %v", h.Points, err)
	}
	// Written to: started over, and the commit does not fail.
	p.Record("w1", api.PowerReport{Windows: []api.PowerWindow{sys(at(-4.5), 30, reading{90, 30, 3})}})
	if err := w.Flush(); err != nil {
		t.Fatalf("a malformed bucket failed the commit: %v", err)
	}
	if got := storedBuckets(t, s, bucketPower60, "w1")[at(-5)]; !reflect.DeepEqual(got, map[string]reading{"system": {90, 30, 3}}) {
		t.Fatalf("bucket after reset %v", got)
	}

	good := appendPowerSums(nil, []powerSum{{[]byte("a"), powerFigures{1, 1, 1}}, {[]byte("b"), powerFigures{2, 2, 2}}})
	if sums, err := decodePowerSums(nil, good); err != nil || len(sums) != 2 || string(sums[1].key) != "b" || sums[1].joules != 2 {
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
	s, w, p := openPower(t, t.TempDir())
	for _, id := range []string{"", "a\x00b"} {
		p.Record(id, api.PowerReport{Windows: []api.PowerWindow{sys(at(-5), 60, reading{60, 60, 1})}})
	}
	flush(t, w)
	_ = s.db.View(func(tx *bbolt.Tx) error {
		if n := tx.Bucket(bucketPower60).Stats().KeyN; n != 0 {
			t.Fatalf("%d buckets stored", n)
		}
		return nil
	})
}

// Reports, histories and pruning run at once on a live writer; -race
// checks the sharing, and the totals that nothing was lost or doubled.
func TestPowerConcurrent(t *testing.T) {
	_, w, p := openPower(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var wg sync.WaitGroup
	for i := range 4 {
		id := fmt.Sprintf("w%d", i)
		wg.Go(func() {
			for m := -60; m < 0; m++ {
				// Every report resends the one before it.
				p.Record(id, api.PowerReport{Channels: testChannels, Windows: []api.PowerWindow{
					sys(at(float64(m-1)), 60, reading{60, 60, 1}), sys(at(float64(m)), 60, reading{60, 60, 1}),
				}})
				if _, err := p.History(id, api.Range1h, powerNow); err != nil {
					t.Error(err)
				}
				p.TodayKWh(id, powerNow)
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
		h, _ := p.History(fmt.Sprintf("w%d", i), api.Range1h, powerNow)
		// Minutes -61 to -1 were recorded once each; -61 is outside the hour.
		if len(h.Points) != 60 || math.Abs(h.Totals.EnergyKWh-3600/3.6e6) > 1e-15 {
			t.Fatalf("w%d: %d points, %v kWh", i, len(h.Points), h.Totals.EnergyKWh)
		}
	}
}

func TestPowerChannelsAsLastReported(t *testing.T) {
	dir := t.TempDir()
	s, w, p := openPower(t, dir)
	changed := cloneChannels(testChannels)
	changed[0].PowerLimitW = ptr(60.0)
	changed = append(changed, api.PowerChannel{Key: "gpu1", Scope: api.ScopeGPU, Index: ptr(1), Source: "nvml",
		Method: api.MethodMeasured, PowerLimitW: ptr(math.NaN())})
	want := cloneChannels(changed)
	want[3].PowerLimitW = nil // JSON could not carry it

	minute := 0
	steps := []struct {
		name     string
		rep      api.PowerReport
		channels []api.PowerChannel
		machine  string
	}{
		{"first", api.PowerReport{Channels: testChannels, Machine: api.MethodMeasured}, testChannels, api.MethodMeasured},
		{"without channels or machine", api.PowerReport{}, testChannels, api.MethodMeasured},
		{"changed", api.PowerReport{Channels: changed, Machine: api.MethodEstimated}, want, api.MethodEstimated},
	}
	for _, st := range steps {
		st.rep.Windows = []api.PowerWindow{sys(at(float64(minute-30)), 60, reading{60, 60, 1})}
		minute++
		p.Record("w1", st.rep)
		flush(t, w)
		h, _ := p.History("w1", api.Range1h, powerNow)
		if !reflect.DeepEqual(h.Channels, st.channels) || h.Machine == nil || *h.Machine != st.machine {
			t.Fatalf("%s: channels %+v, machine %v", st.name, h.Channels, h.Machine)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, p = openPower(t, dir)
	h, _ := p.History("w1", api.Range1h, powerNow)
	if !reflect.DeepEqual(h.Channels, want) || h.Machine == nil || *h.Machine != api.MethodEstimated || len(h.Points) != 3 {
		t.Fatalf("after reopen: channels %+v, machine %v, %d points", h.Channels, h.Machine, len(h.Points))
	}
}

func TestPowerReportWithoutChannelsSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, w, p := openPower(t, dir)
	p.Record("w1", api.PowerReport{Windows: []api.PowerWindow{sys(at(-5), 60, reading{60, 60, 1})}})
	flush(t, w)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, p = openPower(t, dir)
	h, err := p.History("w1", api.Range1h, powerNow)
	if err != nil || !p.Through("w1").Equal(at(-4)) || h.Channels == nil || len(h.Channels) != 0 || h.Machine != nil || len(h.Points) != 1 {
		t.Fatalf("after reopen: through %v, %+v, %v", p.Through("w1"), h, err)
	}
}

// Two reports of one worker may reach the writer in either order: the
// stored through never goes back.
func TestPowerStoredThroughNeverGoesBack(t *testing.T) {
	dir := t.TempDir()
	s, w, p := openPower(t, dir)
	p.Record("w1", api.PowerReport{Windows: []api.PowerWindow{sys(at(-10), 60, reading{60, 60, 1})}})
	flush(t, w)
	// As if a later report's transaction had run first.
	err := s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketPowerThrough).Put([]byte("w1"), binary.BigEndian.AppendUint64(nil, uint64(at(-1).UnixNano())))
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Record("w1", api.PowerReport{Windows: []api.PowerWindow{sys(at(-5), 60, reading{60, 60, 1})}})
	flush(t, w)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, p = openPower(t, dir)
	if got := p.Through("w1"); !got.Equal(at(-1)) {
		t.Fatalf("Through = %v, want %v", got, at(-1))
	}
}
