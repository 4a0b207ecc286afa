package powerlog

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Every range is told from a layer that keeps the whole range, and the
// bucket running at its start.
func TestLayersKeepTheirRanges(t *testing.T) {
	for _, rng := range []string{api.Range1h, api.Range24h, api.Range7d, api.Range30d} {
		res, span, _ := api.RangeResolution(rng)
		l, err := layerOf(res)
		if err != nil {
			t.Fatalf("%s: %v", rng, err)
		}
		if l.Keep < span+res {
			t.Errorf("%s: %v kept at %v, for a range of %v", rng, l.Keep, res, span)
		}
	}
	if got := hourly().Res; got != 3600 {
		t.Errorf("the coarsest layer is of %d s", got)
	}
	if got, want := Layers()[0].Cutoff(powerNow), at(-120).Unix(); got != want {
		t.Errorf("minute cutoff %v, want %v", time.Unix(got, 0).UTC(), time.Unix(want, 0).UTC())
	}
}

func TestHistoryRanges(t *testing.T) {
	l := New(newMemStore(), nil)
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
			l.Record("w1", api.PowerReport{Channels: testChannels, Machine: api.MethodMeasured, Windows: ws}, powerNow)
			ws = nil
		}
	}
	l.Record("w1", api.PowerReport{Windows: ws}, powerNow)

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
			h, err := l.History("w1", tt.rng, tt.now)
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
	for _, rng := range []string{"2h", ""} {
		if _, err := l.History("w1", rng, powerNow); err == nil {
			t.Errorf("History of range %q", rng)
		}
	}
}

func closeTotals(a, b api.PowerTotals) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	return near(a.EnergyKWh, b.EnergyKWh) && near(a.AvgW, b.AvgW) && near(a.PeakW, b.PeakW) && near(a.Coverage, b.Coverage)
}

func TestHistoryGapsAndTotals(t *testing.T) {
	l := New(newMemStore(), nil)
	l.Record("w1", api.PowerReport{Channels: testChannels, Machine: api.MethodEstimated, Windows: []api.PowerWindow{
		win(at(-50), 60, map[string]reading{"system": {12000, 60, 250}, "gpu0": {3600, 60, 70}}),
		win(at(-49), 60, map[string]reading{"system": {6000, 30, 210}}), // gpu0 had no reading
		win(at(-48), 60, nil), // no readings at all: no point
		// minute -47 never reported: no point
		win(at(-46), 30, map[string]reading{"system": {4500, 30, 180}, "cpu": {900, 30, 31}}),
		win(at(-45.5), 30, map[string]reading{"gpu0": {1200, 20, 65}}),
	}}, powerNow)
	tests := []struct {
		rng    string
		points []api.PowerPoint
		totals api.PowerTotals
	}{
		{api.Range1h, []api.PowerPoint{
			{T: at(-50), Values: map[string]float64{"system": 200, "gpu0": 60}},
			{T: at(-49), Values: map[string]float64{"system": 200}},
			{T: at(-46), Values: map[string]float64{"system": 150, "cpu": 30, "gpu0": 60}},
			// System: 22,500 J over 120 covered seconds of the hour; peak 250 W.
		}, api.PowerTotals{EnergyKWh: 22500 / 3.6e6, AvgW: 22500.0 / 120, PeakW: 250, Coverage: 120.0 / 3600}},
		// The same in one five-minute bucket (-50 to -45).
		{api.Range24h, []api.PowerPoint{
			{T: at(-50), Values: map[string]float64{"system": 22500.0 / 120, "gpu0": 4800.0 / 80, "cpu": 30}},
		}, api.PowerTotals{EnergyKWh: 22500 / 3.6e6, AvgW: 22500.0 / 120, PeakW: 250, Coverage: 120.0 / 86400}},
	}
	for _, tt := range tests {
		t.Run(tt.rng, func(t *testing.T) {
			h, err := l.History("w1", tt.rng, powerNow)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(h.Points, tt.points) {
				t.Fatalf("points\n got %v\nwant %v", h.Points, tt.points)
			}
			if h.Totals != tt.totals {
				t.Fatalf("totals %+v, want %+v", h.Totals, tt.totals)
			}
			if h.Machine == nil || *h.Machine != api.MethodEstimated {
				t.Fatalf("machine %v", h.Machine)
			}
		})
	}
}

func TestHistoryOfWorkerWithoutReadings(t *testing.T) {
	l := New(newMemStore(), nil)
	// Channels known, but no window closed yet.
	l.Record("w-new", api.PowerReport{Channels: testChannels, Machine: api.MethodMeasured}, powerNow)
	// Readings, but all outside the range asked for.
	l.Record("w-old", api.PowerReport{Channels: testChannels, Machine: api.MethodMeasured,
		Windows: []api.PowerWindow{sys(at(-2*24*60), 60, reading{60, 60, 1})}}, powerNow)
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
				h, err := l.History(tt.worker, rng, powerNow)
				if err != nil {
					t.Fatal(err)
				}
				if h.Points == nil || len(h.Points) != 0 || !reflect.DeepEqual(h.Channels, tt.channels) ||
					(h.Machine != nil) != tt.machine || h.Totals != (api.PowerTotals{}) || h.WorkerID != tt.worker {
					t.Fatalf("%s: %+v", rng, h)
				}
			}
			if _, ok := l.TodayKWh(tt.worker, powerNow); ok != tt.machine {
				t.Fatalf("TodayKWh ok = %v", ok)
			}
		})
	}
}

func TestHistoryIsACopy(t *testing.T) {
	l := New(newMemStore(), nil)
	chans := cloneChannels(testChannels)
	l.Record("w1", api.PowerReport{Channels: chans, Windows: []api.PowerWindow{sys(at(-5), 60, reading{60, 60, 1})}}, powerNow)
	*chans[0].Index = 7 // the worker's decoder reuses its report
	h, _ := l.History("w1", api.Range1h, powerNow)
	*h.Channels[0].PowerLimitW = 1
	h, _ = l.History("w1", api.Range1h, powerNow)
	if !reflect.DeepEqual(h.Channels, testChannels) {
		t.Fatalf("channels changed through a shared pointer: %+v", h.Channels)
	}
}

func TestTodayKWh(t *testing.T) {
	l := New(newMemStore(), nil)
	midnight := time.Date(2026, 11, 15, 0, 0, 0, 0, time.UTC)
	l.Record("w1", api.PowerReport{Windows: []api.PowerWindow{
		// Across midnight: the half after it counts.
		sys(midnight.Add(-30*time.Second), 60, reading{7.2e6, 60, 1}),
		// An hour's worth at 3:00.
		sys(midnight.Add(3*time.Hour), 3600, reading{3.6e6, 3600, 1000}),
		// In the current hour, minutes ago.
		win(midnight.Add(9*time.Hour+10*time.Minute), 60, map[string]reading{"system": {1.8e6, 60, 1}, "gpu0": {9e6, 60, 1}}),
	}}, midnight.Add(10*time.Hour))
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
			got, ok := l.TodayKWh("w1", tt.now)
			if !ok || got != tt.want {
				t.Fatalf("TodayKWh = %v, %v; want %v", got, ok, tt.want)
			}
		})
	}
}
