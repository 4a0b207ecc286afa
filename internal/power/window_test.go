package power

import (
	"testing"
	"time"
)

func TestSegmentClip(t *testing.T) {
	s := segment{t0: at(0), t1: at(10), w0: 100, w1: 200}
	tests := []struct {
		from, to float64
		ok       bool
		w0, w1   float64
	}{
		{from: -5, to: 20, ok: true, w0: 100, w1: 200},
		{from: 2, to: 4, ok: true, w0: 120, w1: 140},
		{from: 5, to: 60, ok: true, w0: 150, w1: 200},
		{from: 10, to: 20, ok: false},
		{from: 4, to: 4, ok: false},
	}
	for _, tc := range tests {
		c, ok := s.clip(at(tc.from), at(tc.to))
		if ok != tc.ok || ok && (!near(c.w0, tc.w0) || !near(c.w1, tc.w1)) {
			t.Errorf("clip(%v, %v) = %+v, %v", tc.from, tc.to, c, ok)
		}
	}
	var sum float64
	for _, cut := range [][2]float64{{0, 3}, {3, 7.5}, {7.5, 10}} {
		c, _ := s.clip(at(cut[0]), at(cut[1]))
		sum += c.joules()
	}
	assertNear(t, "energy of the parts", sum, s.joules())
}

func TestWindowsSpanAndLateSegments(t *testing.T) {
	w := newWindows(10*time.Second, time.Hour)
	// One segment over three windows: 2 s, 10 s and 3 s of 60 W.
	w.add("gpu0", segment{t0: at(8), t1: at(23), w0: 60, w1: 60})
	if n := w.close(at(20)); n != 2 {
		t.Fatalf("closed %d windows, want 2", n)
	}
	// A late segment reaching back into a closed window keeps out of it.
	w.add("cpu", segment{t0: at(18), t1: at(24), w0: 10, w1: 10})
	w.close(at(30))
	ws := w.pending(time.Time{})
	if len(ws) != 3 {
		t.Fatalf("%d windows, want 3", len(ws))
	}
	for i, want := range []float64{2, 10, 3} {
		assertNear(t, "covered", ws[i].Covered["gpu0"], want)
		assertNear(t, "joules", ws[i].Joules["gpu0"], 60*want)
	}
	if _, ok := ws[1].Covered["cpu"]; ok {
		t.Errorf("late segment got into a closed window: %v", ws[1].Covered)
	}
	assertNear(t, "cpu covered", ws[2].Covered["cpu"], 4)
}
