package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/powerlog"
	"github.com/svc-dev/svc/internal/store"
)

// reading is one channel's figures: joules, covered seconds, peak watts.
type reading struct{ j, c, p float64 }

// sums are a bucket's channels in the order given.
func sums(rs ...any) []powerlog.Sum {
	var out []powerlog.Sum
	for i := 0; i < len(rs); i += 2 {
		r := rs[i+1].(reading)
		out = append(out, powerlog.Sum{Key: []byte(rs[i].(string)), Figures: powerlog.Figures{Joules: r.j, Covered: r.c, Peak: r.p}})
	}
	return out
}

// minute is the time m minutes after Now (on the hour).
func minute(m float64) time.Time { return Now.Add(time.Duration(m * float64(time.Minute))) }

var testChannels = []api.PowerChannel{
	{Key: "gpu0", Scope: api.ScopeGPU, Index: ptr(0), Name: "NVIDIA L4", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: ptr(72.0)},
	{Key: "cpu", Scope: api.ScopeCPU, Source: "rapl", Method: api.MethodMeasured},
	{Key: api.ScopeSystem, Scope: api.ScopeSystem, Source: "estimate", Method: api.MethodEstimated},
}

// buckets reads a worker's buckets of res in [first, last] as
// start -> channel -> figures, and the channels' order.
func buckets(t testing.TB, p store.Power, worker string, res int64, first, last time.Time) (map[time.Time]map[string]reading, string) {
	t.Helper()
	out := map[time.Time]map[string]reading{}
	order := ""
	err := p.Buckets(worker, res, first.Unix(), last.Unix(), func(start int64, ss []powerlog.Sum) {
		at := time.Unix(start, 0).UTC()
		if out[at] != nil {
			t.Errorf("bucket %v read twice", at)
		}
		m := map[string]reading{}
		for _, s := range ss {
			m[string(s.Key)] = reading{s.Joules, s.Covered, s.Peak}
			order += string(s.Key) + " "
		}
		out[at] = m
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, order
}

// Add stores what it is handed: each delta added to its bucket, keyed
// apart from a worker whose id extends this one's; Buckets reads a range
// back in time order, each bucket's channels in key order; Workers tells
// each worker's through and channels, which a report without them leaves.
func powerAddAndBuckets(t *testing.T, l Logs) {
	p := l.Power
	p.Add("w1", []powerlog.Delta{
		{Res: 60, Start: minute(0).Unix(), Sums: sums("gpu0", reading{3000, 60, 70}, "system", reading{6000, 60, 130})},
		{Res: 60, Start: minute(1).Unix(), Sums: sums("system", reading{7200, 60, 150})},
		{Res: 3600, Start: minute(0).Unix(), Sums: sums("system", reading{13200, 120, 150})},
	}, minute(2).UnixNano(), &powerlog.Meta{Channels: testChannels, Machine: api.MethodEstimated})
	p.Add("w10", []powerlog.Delta{{Res: 60, Start: minute(0).Unix(), Sums: sums("system", reading{1, 1, 1})}}, minute(1).UnixNano(), nil)
	// A report adding to a bucket: a channel it lacked goes in its place,
	// the others add up, peaks are the higher.
	p.Add("w1", []powerlog.Delta{
		{Res: 60, Start: minute(1).Unix(), Sums: sums("cpu", reading{900, 30, 31}, "system", reading{600, 10, 160})},
		{Res: 60, Start: minute(3).Unix(), Sums: sums("system", reading{60, 60, 1})},
	}, minute(4).UnixNano(), nil)
	// A report without a through adds its sums and leaves the through.
	p.Add("w10", []powerlog.Delta{{Res: 60, Start: minute(0).Unix(), Sums: sums("system", reading{1, 1, 1})}}, 0, nil)
	// A report without windows or channels stores nothing.
	p.Add("w2", nil, 0, nil)
	l.Sync(t)

	got, order := buckets(t, p, "w1", 60, minute(0), minute(1))
	want := map[time.Time]map[string]reading{
		minute(0): {"gpu0": {3000, 60, 70}, "system": {6000, 60, 130}},
		minute(1): {"cpu": {900, 30, 31}, "system": {7800, 70, 160}},
	}
	if !reflect.DeepEqual(got, want) || order != "gpu0 system cpu system " {
		t.Errorf("60 s buckets of minutes 0 and 1:\n got %v (%s)\nwant %v", got, order, want)
	}
	if got, _ := buckets(t, p, "w1", 60, minute(1), minute(5)); len(got) != 2 || got[minute(1)] == nil || got[minute(3)] == nil {
		t.Errorf("60 s buckets from minute 1: %v", got)
	}
	if got, _ := buckets(t, p, "w1", 300, minute(-60), minute(60)); len(got) != 0 {
		t.Errorf("5 min buckets where none was added: %v", got)
	}
	if got, _ := buckets(t, p, "w1", 3600, minute(0), minute(0)); !reflect.DeepEqual(got, map[time.Time]map[string]reading{
		minute(0): {"system": {13200, 120, 150}}}) {
		t.Errorf("hourly buckets: %v", got)
	}
	if got, _ := buckets(t, p, "w10", 60, minute(-60), minute(60)); !reflect.DeepEqual(got, map[time.Time]map[string]reading{
		minute(0): {"system": {2, 2, 1}}}) {
		t.Errorf("w10: %v", got)
	}
	if err := p.Buckets("w1", 120, 0, minute(5).Unix(), func(int64, []powerlog.Sum) {}); err == nil {
		t.Error("Buckets of a resolution the history does not have")
	}

	stored := map[string]powerlog.Stored{}
	p.Workers(func(id string, st powerlog.Stored) { stored[id] = st })
	wantStored := map[string]powerlog.Stored{
		"w1":  {Through: minute(4).UnixNano(), Meta: &powerlog.Meta{Channels: testChannels, Machine: api.MethodEstimated}},
		"w10": {Through: minute(1).UnixNano()},
	}
	if !reflect.DeepEqual(stored, wantStored) {
		t.Errorf("workers %+v, want %+v", stored, wantStored)
	}
}

// window is a minute's window of the whole machine at 1 W.
func window(m float64) api.PowerWindow {
	return api.PowerWindow{Start: minute(m), Seconds: 60, Joules: map[string]float64{api.ScopeSystem: 60},
		Covered: map[string]float64{api.ScopeSystem: 60}, PeakW: map[string]float64{api.ScopeSystem: 1}}
}

// A window is stored once however often it is sent: again to the same
// history, to a new one reading the store (a restart, or another
// replica after a failover), and, for a keyed store, after a crash
// before the outbox let the report go, or from a history that read the
// store before the window was stored.
func powerOnce(t *testing.T, l Logs) {
	stale := powerlog.New(l.Power, nil)
	h := powerlog.New(l.Power, nil)
	report := func(ms ...float64) api.PowerReport {
		r := api.PowerReport{Channels: testChannels, Machine: api.MethodMeasured}
		for _, m := range ms {
			r.Windows = append(r.Windows, window(m))
		}
		return r
	}
	h.Record("w1", report(-9, -8), Now)
	l.Sync(t)
	h.Record("w1", report(-8, -7), Now)
	l.Sync(t)
	fresh := powerlog.New(l.Power, nil)
	if got := fresh.Through("w1"); !got.Equal(minute(-6)) {
		t.Fatalf("through read back %v, want %v", got, minute(-6))
	}
	fresh.Record("w1", report(-7, -6), Now)
	l.Sync(t)
	check := func(when string) {
		t.Helper()
		want := map[time.Time]map[string]reading{}
		for m := -9.0; m <= -6; m++ {
			want[minute(m)] = map[string]reading{api.ScopeSystem: {60, 60, 1}}
		}
		if got, _ := buckets(t, l.Power, "w1", 60, minute(-60), minute(0)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: minutes %v, want %v", when, got, want)
		}
		hour := map[time.Time]map[string]reading{minute(-60): {api.ScopeSystem: {240, 240, 1}}}
		if got, _ := buckets(t, l.Power, "w1", 3600, minute(-120), minute(0)); !reflect.DeepEqual(got, hour) {
			t.Errorf("%s: hours %v, want %v", when, got, hour)
		}
	}
	check("sent again")
	if l.Resend != nil {
		l.Resend(t)
		l.Sync(t)
		check("after a resend")
	}
	if l.Keyed {
		// A history that read the store before any of it was stored sends
		// it all again, to where it was stored already.
		if n := len(stale.Record("w1", report(-9, -8, -7, -6), Now)); n != 4 {
			t.Fatalf("the stale history recorded %d windows", n)
		}
		l.Sync(t)
		check("sent by a stale history")
	}
	stored := map[string]powerlog.Stored{}
	l.Power.Workers(func(id string, st powerlog.Stored) { stored[id] = st })
	if st := stored["w1"]; st.Through != minute(-5).UnixNano() || st.Meta == nil || st.Meta.Machine != api.MethodMeasured {
		t.Errorf("w1 stored as %+v", st)
	}
}

// Prune deletes the buckets of each layer that start before its
// retention, counting each once, and nothing else; workers' through and
// channels stay.
func powerPrune(t *testing.T, l Logs) {
	through := Now.Add(-3 * time.Hour).UnixNano()
	next := func() int64 { through += int64(time.Second); return through }
	var wantLeft []string
	for _, layer := range powerlog.Layers() {
		cut := layer.Cutoff(Now)
		old := (cut/layer.Res)*layer.Res - layer.Res
		keep := (cut + layer.Res - 1) / layer.Res * layer.Res
		for _, w := range []string{"w1", "w2"} {
			l.Power.Add(w, []powerlog.Delta{
				{Res: layer.Res, Start: old, Sums: sums("system", reading{1, 1, 1})},
				{Res: layer.Res, Start: keep, Sums: sums("cpu", reading{2, 2, 2}, "system", reading{1, 1, 1})},
			}, next(), nil)
			wantLeft = append(wantLeft, fmt.Sprint(w, " ", layer.Res, " ", keep))
		}
	}
	l.Sync(t)
	n, err := l.Power.Prune(Now)
	if err != nil || n != 2*len(powerlog.Layers()) {
		t.Fatalf("Prune = %d, %v; want %d", n, err, 2*len(powerlog.Layers()))
	}
	var left []string
	for _, layer := range powerlog.Layers() {
		for _, w := range []string{"w1", "w2"} {
			err := l.Power.Buckets(w, layer.Res, 0, Now.Unix(), func(start int64, ss []powerlog.Sum) {
				left = append(left, fmt.Sprint(w, " ", layer.Res, " ", start))
				if len(ss) != 2 {
					t.Errorf("bucket %s %d %d left with %d channels", w, layer.Res, start, len(ss))
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if !reflect.DeepEqual(left, wantLeft) {
		t.Errorf("left %q, want %q", left, wantLeft)
	}
	if n, err := l.Power.Prune(Now); n != 0 || err != nil {
		t.Errorf("pruning again = %d, %v", n, err)
	}
	workers := 0
	l.Power.Workers(func(string, powerlog.Stored) { workers++ })
	if workers != 2 {
		t.Errorf("%d workers stored after pruning, want 2", workers)
	}
}
