package power

import (
	"maps"
	"slices"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// segment is a stretch of power between two samples: a straight line from
// w0 at t0 to w1 at t1. A counter gives a flat line at its average.
type segment struct {
	t0, t1 time.Time
	w0, w1 float64
}

func (s segment) seconds() float64 { return s.t1.Sub(s.t0).Seconds() }
func (s segment) joules() float64  { return (s.w0 + s.w1) / 2 * s.seconds() }

// at is the power at t, within the segment.
func (s segment) at(t time.Time) float64 {
	d := s.seconds()
	if d <= 0 {
		return s.w1
	}
	f := t.Sub(s.t0).Seconds() / d
	return s.w0 + (s.w1-s.w0)*f
}

// clip is the part of s within [from, to]; ok is false when there is none.
func (s segment) clip(from, to time.Time) (segment, bool) {
	c := s
	if from.After(c.t0) {
		c.t0, c.w0 = from, s.at(from)
	}
	if to.Before(c.t1) {
		c.t1, c.w1 = to, s.at(to)
	}
	return c, c.t1.After(c.t0)
}

// windowAcc sums the segments of one window as they arrive.
type windowAcc struct {
	joules, covered, peak map[string]float64
}

// windows cuts segments at window boundaries, closes windows once the
// samples have passed them, and keeps the closed ones until the gateway
// has them.
type windows struct {
	length time.Duration
	keep   int // most closed windows kept

	open map[time.Time]*windowAcc // by start
	// closedThrough is the end of the last closed window: later parts of a
	// late segment must not reopen it.
	closedThrough time.Time
	closed        []api.PowerWindow // oldest first
}

func newWindows(length, keep time.Duration) *windows {
	return &windows{length: length, keep: max(1, int(keep/length)), open: map[time.Time]*windowAcc{}}
}

// add integrates s into the windows it spans under key.
func (w *windows) add(key string, s segment) {
	if s.t0.Before(w.closedThrough) {
		var ok bool
		if s, ok = s.clip(w.closedThrough, s.t1); !ok {
			return
		}
	}
	for start := s.t0.Truncate(w.length).UTC(); start.Before(s.t1); start = start.Add(w.length) {
		part, ok := s.clip(start, start.Add(w.length))
		if !ok {
			continue
		}
		acc := w.open[start]
		if acc == nil {
			acc = &windowAcc{joules: map[string]float64{}, covered: map[string]float64{}, peak: map[string]float64{}}
			w.open[start] = acc
		}
		acc.joules[key] += part.joules()
		acc.covered[key] += part.seconds()
		// The line is straight, so its highest point is at an end.
		acc.peak[key] = max(acc.peak[key], part.w0, part.w1)
	}
}

// close closes the windows that end by now and reports how many it did.
// A window in which nothing was read was never opened, so it is not
// there to close: windows without readings are omitted.
func (w *windows) close(now time.Time) int {
	var ends []time.Time
	for start := range w.open {
		if !start.Add(w.length).After(now) {
			ends = append(ends, start)
		}
	}
	slices.SortFunc(ends, time.Time.Compare)
	for _, start := range ends {
		acc := w.open[start]
		delete(w.open, start)
		w.closed = append(w.closed, api.PowerWindow{
			Start:   start.UTC(),
			Seconds: w.length.Seconds(),
			Joules:  acc.joules,
			Covered: acc.covered,
			PeakW:   acc.peak,
		})
		w.closedThrough = start.Add(w.length)
	}
	if n := len(w.closed) - w.keep; n > 0 {
		w.closed = slices.Delete(w.closed, 0, n)
	}
	return len(ends)
}

func windowEnd(pw api.PowerWindow) time.Time {
	return pw.Start.Add(time.Duration(pw.Seconds * float64(time.Second)))
}

// pending copies the closed windows that end after after, oldest first.
func (w *windows) pending(after time.Time) []api.PowerWindow {
	i, _ := slices.BinarySearchFunc(w.closed, after, func(pw api.PowerWindow, t time.Time) int {
		if windowEnd(pw).After(t) {
			return 1
		}
		return -1
	})
	if i == len(w.closed) {
		return nil
	}
	out := make([]api.PowerWindow, 0, len(w.closed)-i)
	for _, pw := range w.closed[i:] {
		pw.Joules, pw.Covered, pw.PeakW = maps.Clone(pw.Joules), maps.Clone(pw.Covered), maps.Clone(pw.PeakW)
		out = append(out, pw)
	}
	return out
}

// forget drops the closed windows that end by through.
func (w *windows) forget(through time.Time) {
	i := 0
	for i < len(w.closed) && !windowEnd(w.closed[i]).After(through) {
		i++
	}
	w.closed = slices.Delete(w.closed, 0, i)
}
