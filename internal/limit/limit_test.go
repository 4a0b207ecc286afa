package limit

import (
	"sync"
	"testing"
	"time"
)

// clock is the fake time the tests drive a limiter with.
type clock struct{ now time.Time }

func (c *clock) step(d time.Duration) time.Time { c.now = c.now.Add(d); return c.now }

// window feeds one full window of samples of latency rtt, each finishing
// with inflight others in flight.
func window(l *Limiter, c *clock, rtt time.Duration, inflight int) {
	for range 10 {
		l.Observe(c.step(100*time.Millisecond), rtt, inflight)
	}
}

func TestLimiter(t *testing.T) {
	const ms = time.Millisecond
	type phase struct {
		windows  int
		rtt      time.Duration
		inflight int
		want     int // limit after the phase; -1 to only check bounds
	}
	tests := []struct {
		name    string
		cfg     Config
		ceiling int
		phases  []phase
	}{
		{"starts at the ceiling and stays there at no load", Config{}, 100, []phase{
			{5, 10 * ms, 3, 100},
		}},
		{"backs off when latency doubles, down to the floor", Config{}, 100, []phase{
			{1, 10 * ms, 50, 100},
			{1, 20 * ms, 50, 75},
			{1, 20 * ms, 50, 56},
			{20, 20 * ms, 50, 8},
		}},
		{"the slow stragglers of a burst do not cut the limit", Config{}, 100, []phase{
			{1, 10 * ms, 50, 100},
			{1, 20 * ms, 3, 100},
		}},
		{"backs off from the limit when more than it was in flight", Config{}, 100, []phase{
			{1, 10 * ms, 50, 100},
			{1, 20 * ms, 150, 75},
		}},
		{"within the tolerance the limit does not shrink", Config{}, 100, []phase{
			{1, 10 * ms, 50, 100},
			{10, 14 * ms, 50, 100},
		}},
		{"recovers when latency returns to the no-load latency", Config{}, 100, []phase{
			{1, 10 * ms, 50, 100},
			{20, 40 * ms, 50, 8},
			{1, 10 * ms, 5, 12},
			{1, 10 * ms, 5, 18},
			{10, 10 * ms, 5, 100},
		}},
		{"grows from the floor at no load", Config{Floor: 1}, 64, []phase{
			{1, 10 * ms, 0, 64},
			{20, 100 * ms, 30, 1},
			{1, 10 * ms, 0, 2},
			{1, 10 * ms, 0, 3},
			{1, 10 * ms, 0, 5},
			{10, 10 * ms, 0, 64},
		}},
		{"a ceiling under the floor is the limit, whatever the latency", Config{}, 4, []phase{
			{1, 10 * ms, 3, 4},
			{20, 100 * ms, 3, 4},
			{20, 10 * ms, 0, 4},
		}},
		{"a shorter window median lowers the no-load latency at once", Config{}, 100, []phase{
			{1, 20 * ms, 50, 100},
			{1, 10 * ms, 50, 100},
			{1, 20 * ms, 99, 75},
		}},
		{"longer requests than the baseline's are learnt at the floor, and the limit grows back", Config{}, 100, []phase{
			{1, 1 * ms, 1, 100},
			{4, 50 * ms, 50, 8},
			{1, 50 * ms, 7, 12},
			{1, 50 * ms, 11, 18},
			{5, 50 * ms, 50, 100},
		}},
		{"latency that does not fall with concurrency is the requests' length, learnt at once", Config{}, 100, []phase{
			{1, 1 * ms, 1, 100},
			{1, 50 * ms, 50, 50},
			{1, 50 * ms, 24, 75},
			{1, 50 * ms, 50, 100},
		}},
		{"latency that falls with concurrency is queueing", Config{}, 100, []phase{
			{1, 10 * ms, 1, 100},
			{1, 40 * ms, 63, 50},
			{1, 20 * ms, 31, 37},
			{1, 15 * ms, 15, 37},
		}},
		{"a ceiling of 0 is 1", Config{}, 0, []phase{
			{5, 10 * ms, 0, 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{now: time.Unix(1e9, 0)}
			l := New(tt.cfg, tt.ceiling, c.now)
			for i, p := range tt.phases {
				for range p.windows {
					window(l, c, p.rtt, p.inflight)
					floor := min(tt.cfg.Floor, max(tt.ceiling, 1))
					if tt.cfg.Floor == 0 {
						floor = min(8, max(tt.ceiling, 1))
					}
					if got := l.Limit(); got < floor || got > max(tt.ceiling, 1) {
						t.Fatalf("phase %d: limit %d out of bounds", i, got)
					}
				}
				if got := l.Limit(); p.want >= 0 && got != p.want {
					t.Fatalf("phase %d: limit = %d, want %d", i, got, p.want)
				}
			}
		})
	}
}

// A window closes only once it is Window old and has MinSamples, or at
// once when it has MaxSamples.
func TestWindowCloses(t *testing.T) {
	c := &clock{now: time.Unix(1e9, 0)}
	l := New(Config{Floor: 1}, 100, c.now)
	window(l, c, 10*time.Millisecond, 50)
	// Nine slow samples over a long time: not a window yet.
	for range 9 {
		l.Observe(c.step(time.Second), 40*time.Millisecond, 100)
	}
	if got := l.Limit(); got != 100 {
		t.Fatalf("limit moved before the window had its samples: %d", got)
	}
	l.Observe(c.step(time.Second), 40*time.Millisecond, 100)
	if got := l.Limit(); got != 50 {
		t.Fatalf("limit = %d, want 50", got)
	}
	// Many samples in an instant close a window at MaxSamples.
	for range 199 {
		l.Observe(c.now, 40*time.Millisecond, 100)
	}
	if got := l.Limit(); got != 50 {
		t.Fatalf("limit moved before MaxSamples: %d", got)
	}
	l.Observe(c.now, 40*time.Millisecond, 100)
	if got := l.Limit(); got != 25 {
		t.Fatalf("limit = %d, want 25", got)
	}
}

// The no-load latency is re-measured each Period, from light load only:
// measured under overload it would be the overloaded latency.
func TestNoLoadRemeasured(t *testing.T) {
	const ms = time.Millisecond
	c := &clock{now: time.Unix(1e9, 0)}
	l := New(Config{}, 100, c.now)
	window(l, c, 10*ms, 2)
	c.step(2 * time.Minute)
	// Heavily loaded windows past the period leave it alone.
	for range 5 {
		window(l, c, 30*ms, 90)
	}
	if got := l.NoLoad(); got != 10*ms {
		t.Fatalf("no-load latency re-measured under load: %v", got)
	}
	if got := l.Limit(); got >= 100 {
		t.Fatalf("limit %d did not shrink", got)
	}
	// At the floor's load the engine's new latency is learnt, and the
	// limit grows again at it.
	window(l, c, 30*ms, 3)
	if got := l.NoLoad(); got != 30*ms {
		t.Fatalf("no-load latency = %v, want 30ms", got)
	}
	before := l.Limit()
	window(l, c, 30*ms, 3)
	if got := l.Limit(); got <= before {
		t.Fatalf("limit %d did not grow from %d", got, before)
	}
	// Within the period a light window does not raise it.
	window(l, c, 50*ms, 0)
	if got := l.NoLoad(); got != 30*ms {
		t.Fatalf("no-load latency re-measured within the period: %v", got)
	}
}

func TestSetCeiling(t *testing.T) {
	c := &clock{now: time.Unix(1e9, 0)}
	l := New(Config{}, 100, c.now)
	l.SetCeiling(20)
	if got := l.Limit(); got != 20 {
		t.Fatalf("limit = %d after lowering the ceiling to 20", got)
	}
	l.SetCeiling(200)
	if got := l.Limit(); got != 20 {
		t.Fatalf("raising the ceiling moved the limit to %d", got)
	}
	window(l, c, 10*time.Millisecond, 0)
	if got := l.Limit(); got != 30 {
		t.Fatalf("limit = %d, want 30", got)
	}
}

// Observe, Limit and SetCeiling may be called from any goroutine.
func TestConcurrentUse(t *testing.T) {
	start := time.Unix(1e9, 0)
	l := New(Config{Floor: 1}, 256, start)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				now := start.Add(time.Duration(i) * time.Millisecond)
				l.Observe(now, time.Duration(1+(i+g)%40)*time.Millisecond, i%64)
				if n := l.Limit(); n < 1 || n > 256 {
					t.Errorf("limit %d out of bounds", n)
					return
				}
				if i%500 == 0 {
					l.SetCeiling(256)
					_ = l.NoLoad()
				}
			}
		})
	}
	wg.Wait()
}
