package bolt

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/clock"
)

const day = 24 * time.Hour

// A pass prunes as of the time measured since the pruner was made: a step
// of the wall clock forward makes nothing due early, rows come due as
// time elapses, and a step back only defers.
func TestPrunerKeepsToElapsedTime(t *testing.T) {
	ages := []time.Duration{day, 10 * day, 40 * day, 100 * day, 500 * day} // newest first, as listed
	tests := []struct {
		name   string
		step   time.Duration
		sleep  time.Duration
		rows   []time.Duration // the ages of the rows left
		events []time.Duration // and of the events left
	}{
		{"no step", 0, 0, ages[:4], ages[:2]},
		{"a year ahead", 365 * day, 0, ages[:4], ages[:2]},
		{"a year ahead, 301 days on", 365 * day, 301 * day, ages[:3], nil},
		{"a year behind", -365 * day, 0, ages, ages[:4]},
		{"a year behind, a year on", -365 * day, 365 * day, ages[:4], ages[:2]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, err := Open(t.TempDir(), Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				w := s.NewWriter(WriterOptions{})
				u, ev := s.Usage(w), s.Events(w)
				c := clock.NewStepped()
				now := c.Now()
				for _, age := range ages {
					u.Record("org", api.UsageRow{ID: age.String(), CreatedAt: now.Add(-age), Model: "m", StatusCode: 200})
					ev.RecordEvent("org", api.WorkerEvent{WorkerID: age.String(), EventType: api.EventConnected, CreatedAt: now.Add(-age)})
				}
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
				p := NewPruner(ev, u, nil, Retention{Events: 30 * day, Usage: 400 * day}, c, nil)
				c.Step(tc.step)
				time.Sleep(tc.sleep)
				res, err := p.Pass(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if tc.step > 0 && res.Ahead != tc.step {
					t.Errorf("ahead %v, want %v", res.Ahead, tc.step)
				}
				rows, _ := u.Logs("org", UsageQuery{Limit: 10})
				var left []time.Duration
				for _, r := range rows {
					left = append(left, now.Sub(r.CreatedAt))
				}
				if !slices.Equal(left, tc.rows) || res.Usage != len(ages)-len(tc.rows) {
					t.Errorf("usage rows left %v (%d pruned), want %v", left, res.Usage, tc.rows)
				}
				events, _ := ev.ListEvents("org", EventQuery{Limit: 10})
				left = nil
				for _, e := range events {
					left = append(left, now.Sub(e.CreatedAt))
				}
				if !slices.Equal(left, tc.events) || res.Events != len(ages)-len(tc.events) {
					t.Errorf("events left %v (%d pruned), want %v", left, res.Events, tc.events)
				}
			})
		})
	}
}
