package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
)

// A worker whose clock runs ahead must not move its recorded end into the
// future, and a window sent again must not be counted twice in /metrics.
func TestPowerBookRecord(t *testing.T) {
	s, err := bolt.Open(t.TempDir(), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := s.NewWriter(bolt.WriterOptions{})
	book := NewPowerBook(s.Power(w), nil)
	now := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	win := func(start time.Time) api.PowerWindow {
		return api.PowerWindow{Start: start, Seconds: 10,
			Joules: map[string]float64{"gpu0": 1000}, Covered: map[string]float64{"gpu0": 10}, PeakW: map[string]float64{"gpu0": 100}}
	}
	rep := func(ws ...api.PowerWindow) api.PowerReport {
		return api.PowerReport{Machine: api.MethodEstimated, Windows: ws,
			Channels: []api.PowerChannel{{Key: "gpu0", Scope: api.ScopeGPU, Source: "nvml", Method: api.MethodMeasured}}}
	}
	tests := []struct {
		name        string
		windows     []api.PowerWindow
		wantThrough time.Time
		wantJoules  float64
	}{
		{"in time", []api.PowerWindow{win(now.Add(-20 * time.Second)), win(now.Add(-10 * time.Second))}, now, 2000},
		{"sent again", []api.PowerWindow{win(now.Add(-10 * time.Second))}, now, 2000},
		{"an hour ahead", []api.PowerWindow{win(now.Add(time.Hour))}, now, 2000},
		{"next, and one from the future", []api.PowerWindow{win(now), win(now.Add(2 * time.Minute))}, now.Add(10 * time.Second), 3000},
	}
	for _, tc := range tests {
		book.record("wk_1", rep(tc.windows...), now)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := book.PowerThrough("wk_1"); !got.Equal(tc.wantThrough) {
			t.Errorf("%s: through %v, want %v", tc.name, got, tc.wantThrough)
		}
		if got := testutil.ToFloat64(book.energy.WithLabelValues("wk_1", "gpu0")); got != tc.wantJoules {
			t.Errorf("%s: counted %v J, want %v", tc.name, got, tc.wantJoules)
		}
	}
	// A worker the fleet forgets leaves the scrape; the others stay.
	book.record("wk_2", rep(win(now.Add(-10*time.Second))), now)
	book.Forget("wk_1")
	if n := testutil.CollectAndCount(book.energy); n != 1 {
		t.Fatalf("%d series after forgetting wk_1, want wk_2's one", n)
	}
	if !book.PowerThrough("wk_1").Equal(now.Add(10 * time.Second)) {
		t.Fatal("forgetting the counters forgot the history")
	}

	// A worker whose windows name new channels again and again gets
	// series for no more than a machine's worth of them.
	for i := range 2 * api.MaxPowerChannels {
		key := fmt.Sprint("gpu", i)
		start := now.Add(time.Duration(i-200) * 10 * time.Second)
		book.record("wk_3", api.PowerReport{Machine: api.MethodEstimated, Windows: []api.PowerWindow{{Start: start, Seconds: 10,
			Joules: map[string]float64{key: 10}, Covered: map[string]float64{key: 10}}}}, now)
	}
	if n := testutil.CollectAndCount(book.energy); n != 1+api.MaxPowerChannels {
		t.Fatalf("%d series, want wk_2's one and %d of wk_3's", n, api.MaxPowerChannels)
	}
}
