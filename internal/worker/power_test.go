package worker

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

// A day of windows kept through an outage goes in reports that each fit a
// frame, in order, covering every window once.
func TestPowerReportsFitFrames(t *testing.T) {
	var channels []api.PowerChannel
	for i := range 16 {
		idx, limit := i, 700.0
		channels = append(channels, api.PowerChannel{Key: fmt.Sprintf("gpu%d", i), Scope: api.ScopeGPU, Index: &idx,
			Name: "NVIDIA H100 80GB HBM3", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: &limit})
	}
	channels = append(channels, api.PowerChannel{Key: "cpu", Scope: api.ScopeCPU, Source: "rapl", Method: api.MethodMeasured},
		api.PowerChannel{Key: "system", Scope: api.ScopeSystem, Source: "hwmon", Method: api.MethodMeasured})
	window := func(start time.Time) api.PowerWindow {
		w := api.PowerWindow{Start: start, Seconds: 10, Joules: map[string]float64{}, Covered: map[string]float64{}, PeakW: map[string]float64{}}
		for _, c := range channels {
			w.Joules[c.Key], w.Covered[c.Key], w.PeakW[c.Key] = 6543.210987654321, 9.987654321, 712.3456789
		}
		return w
	}
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, n := range []int{1, powerBatch, powerBatch + 1, 24 * 360} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			windows := make([]api.PowerWindow, n)
			for i := range windows {
				windows[i] = window(t0.Add(time.Duration(i) * 10 * time.Second))
			}
			reports := powerReports(channels, api.MethodMeasured, windows)
			if want := (n + powerBatch - 1) / powerBatch; len(reports) != want {
				t.Fatalf("%d reports, want %d", len(reports), want)
			}
			next := t0
			for i, r := range reports {
				if i == 0 && n >= powerBatch {
					t.Logf("%d windows of %d channels: %d bytes", powerBatch, len(channels), len(r.payload))
				}
				if len(r.payload) > link.MaxPayload {
					t.Fatalf("report %d is %d bytes, more than a frame carries", i, len(r.payload))
				}
				var rep api.PowerReport
				if err := json.Unmarshal(r.payload, &rep); err != nil {
					t.Fatal(err)
				}
				if len(rep.Channels) != len(channels) || rep.Machine != api.MethodMeasured {
					t.Fatalf("report %d: %d channels, machine %q", i, len(rep.Channels), rep.Machine)
				}
				for _, w := range rep.Windows {
					if !w.Start.Equal(next) {
						t.Fatalf("report %d: window at %v, want %v", i, w.Start, next)
					}
					next = next.Add(10 * time.Second)
				}
				if !r.through.Equal(next) {
					t.Fatalf("report %d: through %v, want %v", i, r.through, next)
				}
			}
			if want := t0.Add(time.Duration(n) * 10 * time.Second); !next.Equal(want) {
				t.Fatalf("windows up to %v, want %v", next, want)
			}
		})
	}
}
