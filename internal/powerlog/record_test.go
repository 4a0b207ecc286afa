package powerlog

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		in   api.PowerWindow
		ok   bool
		want map[string]reading
	}{
		{"as reported", win(at(0), 60, map[string]reading{"system": {6000, 60, 130}, "gpu0": {3000, 58, 70}}), true,
			map[string]reading{"system": {6000, 60, 130}, "gpu0": {3000, 58, 70}}},
		{"a peak below the average is the average", sys(at(0), 60, reading{4800, 30, 120}), true,
			map[string]reading{"system": {4800, 30, 160}}},
		{"a missing peak is the average", api.PowerWindow{Start: at(0), Seconds: 60,
			Joules: map[string]float64{"cpu": 600}, Covered: map[string]float64{"cpu": 60}}, true,
			map[string]reading{"cpu": {600, 60, 10}}},
		{"covered is capped at the window's length", sys(at(0), 60, reading{120, 90, 1}), true,
			map[string]reading{"system": {120, 60, 2}}},
		{"readings that cannot be right are dropped",
			win(at(0), 60, map[string]reading{"system": {600, 60, 10}, "gpu0": {math.NaN(), 60, 1}, "gpu1": {-5, 60, 1},
				"gpu2": {10, 0, 1}, "gpu3": {10, math.NaN(), 1}, "": {10, 60, 1}, strings.Repeat("k", 256): {10, 60, 1},
				"cpu": {120, 60, math.Inf(1)}}), true,
			map[string]reading{"system": {600, 60, 10}, "cpu": {120, 60, 2}}},
		{"no readings", win(at(0), 60, nil), true, map[string]reading{}},
		{"no length", sys(at(0), 0, reading{1, 1, 1}), false, nil},
		{"negative length", sys(at(0), -60, reading{1, 1, 1}), false, nil},
		{"NaN length", sys(at(0), math.NaN(), reading{1, 1, 1}), false, nil},
		{"two days", sys(at(0), 2*86400, reading{1, 1, 1}), false, nil},
		{"a day", sys(at(0), 86400, reading{1, 1, 1}), true, map[string]reading{"system": {1, 1, 1}}},
		{"before 1970", sys(time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC), 60, reading{1, 1, 1}), false, nil},
		{"2200", sys(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), 60, reading{1, 1, 1}), false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, ok := Check(&tt.in)
			if ok != tt.ok {
				t.Fatalf("ok = %v", ok)
			}
			if !ok {
				return
			}
			if w.Start != tt.in.Start.UnixNano() || w.End != tt.in.Start.Add(time.Duration(tt.in.Seconds)*time.Second).UnixNano() {
				t.Errorf("span %d-%d", w.Start, w.End)
			}
			got := map[string]reading{}
			for i, s := range w.Sums {
				if i > 0 && string(w.Sums[i-1].Key) >= string(s.Key) {
					t.Errorf("sums out of order: %q after %q", s.Key, w.Sums[i-1].Key)
				}
				got[string(s.Key)] = reading{s.Joules, s.Covered, s.Peak}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("sums %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRecordAddsUpIntoEveryLayer(t *testing.T) {
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
					ws = append(ws, sys(at(float64(i-180)), 60, reading{60, 60, 1}))
				}
				return ws
			}(),
			want: func() [3]buckets {
				var b [3]buckets
				for i, res := range []int{1, 5, 60} {
					b[i] = buckets{}
					for m := 0; m < 180; m += res {
						b[i][at(float64(m-180))] = map[string]reading{"system": {60 * float64(res), 60 * float64(res), 1}}
					}
				}
				return b
			}(),
		},
		{
			name:    "a window across a minute is split in half",
			windows: []api.PowerWindow{sys(at(0.5), 60, reading{600, 60, 40})},
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
				win(at(-0.75), 60, map[string]reading{"system": {800, 40, 30}, "cpu": {400, 60, 9}}),
			},
			want: [3]buckets{
				{at(-1): {"system": {600, 30, 30}, "cpu": {300, 45, 9}}, at(0): {"system": {200, 10, 30}, "cpu": {100, 15, 9}}},
				{at(-5): {"system": {600, 30, 30}, "cpu": {300, 45, 9}}, at(0): {"system": {200, 10, 30}, "cpu": {100, 15, 9}}},
				{at(-60): {"system": {600, 30, 30}, "cpu": {300, 45, 9}}, at(0): {"system": {200, 10, 30}, "cpu": {100, 15, 9}}},
			},
		},
		{
			name:    "a long window spreads over every minute it covers",
			windows: []api.PowerWindow{sys(at(2), 240, reading{2400, 240, 11})},
			want: [3]buckets{
				{at(2): {"system": {600, 60, 11}}, at(3): {"system": {600, 60, 11}}, at(4): {"system": {600, 60, 11}}, at(5): {"system": {600, 60, 11}}},
				{at(0): {"system": {1800, 180, 11}}, at(5): {"system": {600, 60, 11}}},
				{at(0): {"system": {2400, 240, 11}}},
			},
		},
		{
			name: "windows that cannot be right are dropped",
			windows: []api.PowerWindow{
				win(at(0), 60, map[string]reading{"system": {600, 60, 10}, "gpu0": {math.NaN(), 60, 1}}),
				sys(at(1), 0, reading{1, 1, 1}),
				sys(at(3), 2*86400, reading{1, 1, 1}),
			},
			want: [3]buckets{
				{at(0): {"system": {600, 60, 10}}},
				{at(0): {"system": {600, 60, 10}}},
				{at(0): {"system": {600, 60, 10}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMemStore()
			l := New(m, nil)
			l.Record("w1", api.PowerReport{Channels: testChannels, Machine: api.MethodEstimated, Windows: tt.windows}, at(10))
			for i, layer := range Layers() {
				if got := m.stored(layer.Res, "w1"); !reflect.DeepEqual(got, tt.want[i]) {
					t.Errorf("%d s:\n got %v\nwant %v", layer.Res, got, tt.want[i])
				}
			}
		})
	}
}

// Split hands each bucket's additions in the order a store walks its
// trees: finest layer first, each in time order.
func TestSplitOrder(t *testing.T) {
	var wins []Window
	for _, m := range []float64{125, 3, 64, 0} {
		w, _ := Check(ptr(sys(at(m), 60, reading{60, 60, 1})))
		wins = append(wins, w)
	}
	var got []string
	for _, d := range Split(wins) {
		got = append(got, time.Unix(d.Start, 0).UTC().Format("15:04")+"/"+time.Duration(d.Res*int64(time.Second)).String())
	}
	want := []string{"10:00/1m0s", "10:03/1m0s", "11:04/1m0s", "12:05/1m0s",
		"10:00/5m0s", "11:00/5m0s", "12:05/5m0s", "10:00/1h0m0s", "11:00/1h0m0s", "12:00/1h0m0s"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("deltas\n got %v\nwant %v", got, want)
	}
}

func TestRecordSkipsWhatIsRecorded(t *testing.T) {
	m := newMemStore()
	l := New(m, nil)
	minute := func(i int) api.PowerWindow { return sys(at(float64(i)), 60, reading{60, 60, 1}) }
	if got := l.Through("w1"); !got.IsZero() {
		t.Fatalf("Through before any report = %v", got)
	}
	steps := []struct {
		name    string
		windows []api.PowerWindow
		through time.Time
		fresh   int     // windows Record returns
		joules  float64 // in the hour bucket after the step
	}{
		{"first report", []api.PowerWindow{minute(0), minute(1), minute(2)}, at(3), 3, 180},
		{"resent after a reconnect, with new ones", []api.PowerWindow{minute(1), minute(2), minute(3), minute(4)}, at(5), 2, 300},
		{"only old ones", []api.PowerWindow{minute(0), minute(4)}, at(5), 0, 300},
		{"out of order", []api.PowerWindow{minute(7), minute(6)}, at(8), 2, 420},
		{"overlapping the last one", []api.PowerWindow{sys(at(7.5), 60, reading{60, 60, 1}), minute(8)}, at(9), 1, 480},
		{"the same one twice", []api.PowerWindow{minute(9), minute(9)}, at(10), 1, 540},
		{"no windows", nil, at(10), 0, 540},
	}
	for _, st := range steps {
		fresh := l.Record("w1", api.PowerReport{Channels: testChannels, Windows: st.windows}, at(30))
		if got := l.Through("w1"); !got.Equal(st.through) {
			t.Fatalf("%s: Through = %v, want %v", st.name, got, st.through)
		}
		if len(fresh) != st.fresh {
			t.Fatalf("%s: %d windows recorded, want %d", st.name, len(fresh), st.fresh)
		}
		if got := m.stored(3600, "w1")[at(0)]["system"].j; got != st.joules {
			t.Fatalf("%s: %v J stored, want %v", st.name, got, st.joules)
		}
	}
	if m.adds != 5 {
		t.Fatalf("%d reports handed to the store, want 5: one without news is not", m.adds)
	}

	// What the store holds is recognised by a new Log, as after a restart.
	l = New(m, nil)
	if got := l.Through("w1"); !got.Equal(at(10)) {
		t.Fatalf("Through after a restart = %v, want %v", got, at(10))
	}
	if fresh := l.Record("w1", api.PowerReport{Windows: []api.PowerWindow{minute(8), minute(9), minute(10)}}, at(30)); len(fresh) != 1 {
		t.Fatalf("%d windows recorded of a resend across a restart, want 1", len(fresh))
	}
	if got := m.stored(3600, "w1")[at(0)]["system"].j; got != 600 {
		t.Fatalf("%v J after a resend across a restart, want 600", got)
	}
}

// A worker whose clock runs ahead must not move its recorded end into the
// future.
func TestRecordDropsWindowsFromTheFuture(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	w := func(start time.Time) api.PowerWindow { return sys(start, 10, reading{1000, 10, 100}) }
	m := newMemStore()
	l := New(m, nil)
	steps := []struct {
		name    string
		windows []api.PowerWindow
		through time.Time
		joules  float64 // recorded by the step
	}{
		{"in time", []api.PowerWindow{w(now.Add(-20 * time.Second)), w(now.Add(-10 * time.Second))}, now, 2000},
		{"sent again", []api.PowerWindow{w(now.Add(-10 * time.Second))}, now, 0},
		{"an hour ahead", []api.PowerWindow{w(now.Add(time.Hour))}, now, 0},
		{"next, and one from the future", []api.PowerWindow{w(now), w(now.Add(2 * time.Minute))}, now.Add(10 * time.Second), 1000},
		{"ending a minute ahead", []api.PowerWindow{w(now.Add(50 * time.Second))}, now.Add(time.Minute), 1000},
	}
	for _, st := range steps {
		var joules float64
		for _, w := range l.Record("w1", api.PowerReport{Windows: st.windows}, now) {
			for _, s := range w.Sums {
				joules += s.Joules
			}
		}
		if got := l.Through("w1"); !got.Equal(st.through) {
			t.Errorf("%s: through %v, want %v", st.name, got, st.through)
		}
		if joules != st.joules {
			t.Errorf("%s: recorded %v J, want %v", st.name, joules, st.joules)
		}
	}
}

func TestRecordChannelsAsLastReported(t *testing.T) {
	m := newMemStore()
	l := New(m, nil)
	changed := cloneChannels(testChannels)
	changed[0].PowerLimitW = ptr(60.0)
	changed = append(changed, api.PowerChannel{Key: "gpu1", Scope: api.ScopeGPU, Index: ptr(1), Source: "nvml",
		Method: api.MethodMeasured, PowerLimitW: ptr(math.NaN())})
	want := cloneChannels(changed)
	want[3].PowerLimitW = nil // JSON could not carry it

	steps := []struct {
		name     string
		rep      api.PowerReport
		stored   bool // channels handed to the store
		channels []api.PowerChannel
		machine  string
	}{
		{"first, without channels", api.PowerReport{}, true, []api.PowerChannel{}, ""},
		{"first channels", api.PowerReport{Channels: testChannels, Machine: api.MethodMeasured}, true, testChannels, api.MethodMeasured},
		{"the same again", api.PowerReport{Channels: cloneChannels(testChannels), Machine: api.MethodMeasured}, false, testChannels, api.MethodMeasured},
		{"without channels or machine", api.PowerReport{}, false, testChannels, api.MethodMeasured},
		{"changed", api.PowerReport{Channels: changed, Machine: api.MethodEstimated}, true, want, api.MethodEstimated},
		{"a limit that is not a number again", api.PowerReport{Channels: changed}, false, want, api.MethodEstimated},
	}
	for i, st := range steps {
		st.rep.Windows = []api.PowerWindow{sys(at(float64(i-30)), 60, reading{60, 60, 1})}
		l.Record("w1", st.rep, powerNow)
		if got := m.metas[len(m.metas)-1] != nil; got != st.stored {
			t.Fatalf("%s: channels handed to the store: %v", st.name, got)
		}
		h, _ := l.History("w1", api.Range1h, powerNow)
		if !reflect.DeepEqual(h.Channels, st.channels) || (h.Machine == nil) != (st.machine == "") || h.Machine != nil && *h.Machine != st.machine {
			t.Fatalf("%s: channels %+v, machine %v", st.name, h.Channels, h.Machine)
		}
	}
	// A report of channels alone, with no window, is stored too.
	l.Record("w2", api.PowerReport{Channels: testChannels}, powerNow)
	if m.metas[len(m.metas)-1] == nil {
		t.Fatal("channels without windows not stored")
	}
}
