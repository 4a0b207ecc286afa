package clock

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

const year = 365 * 24 * time.Hour

// A Steady moves with the monotonic clock whatever the wall clock does,
// and knows how far the wall clock has been stepped from it.
func TestSteadyIgnoresSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewStepped()
		s := NewSteady(c)
		start := s.Now()
		if !start.Equal(time.Now()) || start.Location() != time.UTC {
			t.Fatalf("anchored at %v, the wall clock says %v", start, time.Now())
		}
		var stepped time.Duration
		for _, tc := range []struct {
			sleep, step time.Duration
		}{
			{time.Minute, year},
			{time.Second, -2 * year},
			{time.Hour, 3 * time.Hour},
			{0, -time.Hour},
		} {
			time.Sleep(tc.sleep)
			c.Step(tc.step)
			stepped += tc.step
			elapsed := c.Mono()
			if got := s.Now().Sub(start); got != elapsed {
				t.Errorf("after stepping %v: steady elapsed %v, monotonic %v", stepped, got, elapsed)
			}
			if got := s.Skew(); got != stepped {
				t.Errorf("skew %v, stepped %v", got, stepped)
			}
			// A wall timestamp taken now converts to the steady now.
			if got := s.FromWall(c.Now()); !got.Equal(start.Add(elapsed)) {
				t.Errorf("FromWall(now) = %v, want %v", got, start.Add(elapsed))
			}
			now, ahead := s.NotAhead()
			switch {
			case stepped > 0 && (!now.Equal(s.Now()) || ahead != stepped):
				t.Errorf("ahead by %v: NotAhead %v, %v; want the steady %v", stepped, now, ahead, s.Now())
			case stepped <= 0 && (!now.Equal(c.Now()) || ahead != 0):
				t.Errorf("behind by %v: NotAhead %v, %v; want the wall %v", -stepped, now, ahead, c.Now())
			}
		}
	})
}

// A cut-off computed from NotAhead moves no faster than the monotonic
// clock through any sequence of steps, and catches up with a clock set
// back and then forward again.
func TestNotAheadCutoffNeverOutrunsElapsedTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewStepped()
		s := NewSteady(c)
		first, _ := s.NotAhead()
		for _, step := range []time.Duration{year, -year, -year, 2 * year, 0, 10 * time.Second} {
			time.Sleep(time.Hour)
			c.Step(step)
			now, _ := s.NotAhead()
			if moved := now.Sub(first); moved > c.Mono() {
				t.Fatalf("after a step of %v the cut-off moved %v in %v", step, moved, c.Mono())
			}
		}
		if now, _ := s.NotAhead(); !now.Equal(first.Add(c.Mono())) {
			t.Fatalf("the clock back where it was: %v, want %v", now, first.Add(c.Mono()))
		}
	})
}

func TestWatchCountsSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewStepped()
		var logs bytes.Buffer
		w := NewWatch(c, slog.New(slog.NewTextHandler(&logs, nil)))
		for _, tc := range []struct {
			step    time.Duration
			counted bool
		}{
			{0, false},
			{StepThreshold - time.Millisecond, false}, // a slew or a small correction
			{-StepThreshold + time.Millisecond, false},
			{StepThreshold, true},
			{-year, true},
			{time.Hour, true},
		} {
			was := w.Steps()
			time.Sleep(10 * time.Second)
			c.Step(tc.step)
			d, stepped := w.Check()
			want := was
			if tc.counted {
				want++
			}
			if d != tc.step || stepped != tc.counted || w.Steps() != want {
				t.Errorf("step %v: Check = %v, %v, %d steps counted", tc.step, d, stepped, w.Steps()-was)
			}
		}
		if n := strings.Count(logs.String(), "system clock was stepped"); n != 3 || !strings.Contains(logs.String(), "step=-8760h0m0s") {
			t.Fatalf("logged %d steps:\n%s", n, logs.String())
		}

		// Run looks on its own.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- w.Run(ctx, 10*time.Second) }()
		c.Step(time.Minute)
		time.Sleep(11 * time.Second)
		synctest.Wait()
		if w.Steps() != 4 {
			t.Errorf("Run saw %d steps, want 4", w.Steps())
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
