// Package limit is an adaptive concurrency limit of the gradient family
// (Envoy's adaptive concurrency filter, Netflix's concurrency-limits): it
// learns how long a request takes on an idle engine and admits only as
// many at once as keep that latency from growing, between a floor and a
// ceiling.
//
// Latency samples are gathered in windows. Each window closes once it is
// Window old and holds MinSamples samples (or at once when it holds
// MaxSamples), and its median is compared with the no-load latency:
//
//	gradient = clamp(noLoad × (1 + Tolerance) / median, 0.5, 2)
//	limit    = clamp(limit × gradient, floor, ceiling)
//
// so the limit grows while latency stays within Tolerance of the no-load
// latency and shrinks in proportion as it rises beyond. The no-load
// latency is the lowest window median seen: a median, not a single
// sample, because one request's latency depends on its size (a chat's
// length), and a window's median at a given mix of sizes does not. It is
// re-measured every Period, but only from a window served at light load
// (at most floor requests in flight): a baseline re-measured under
// overload would be the overloaded latency, and the limit would drift up
// with it.
//
// Latency that does not follow concurrency down is not queueing. When a
// window ran with at most two thirds of the previous window's peak (above
// the floor: a light load's peaks are noise) in
// flight and its median fell by less than a tenth, the requests are
// longer than those the baseline was learnt from (or the engine batches
// them at no cost in latency), and that median becomes the baseline at
// once: queueing latency falls in proportion to what waits. An engine
// that has really slowed down lowers the limit to the floor, and a light
// window there is taken as the baseline at once too: at the floor nothing
// queues.
//
// A shrinking limit shrinks from itself, not from the requests seen in
// flight: at the tail of a burst few are left, and they are the slowest
// of it by selection, so a limit cut from them would hold back the next
// burst for the last one's stragglers.
//
// A Limiter is driven by the times its caller passes in; it reads no
// clock and starts no goroutine.
package limit

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Limiter. Zero values take the defaults.
type Config struct {
	// Floor is the lowest limit, 8 by default; a ceiling below it is the
	// limit, so an engine of up to Floor slots is never limited below
	// what it offers.
	Floor int
	// Window is the shortest sample window, 1 s by default.
	Window time.Duration
	// MinSamples a window needs before it closes, 10 by default.
	MinSamples int
	// MaxSamples closes a window early, 200 by default.
	MaxSamples int
	// Tolerance is how far above the no-load latency the median may be
	// before the limit shrinks, as a fraction: 0.5 by default.
	Tolerance float64
	// Period is how often the no-load latency is re-measured, 1 min by
	// default.
	Period time.Duration
}

func (c *Config) defaults() {
	if c.Floor < 1 {
		c.Floor = 8
	}
	if c.Window <= 0 {
		c.Window = time.Second
	}
	if c.MinSamples < 1 {
		c.MinSamples = 10
	}
	if c.MaxSamples < c.MinSamples {
		c.MaxSamples = max(200, c.MinSamples)
	}
	if c.Tolerance <= 0 {
		c.Tolerance = 0.5
	}
	if c.Period <= 0 {
		c.Period = time.Minute
	}
}

// Limiter is one adaptive limit. It is safe for concurrent use.
type Limiter struct {
	cfg   Config
	limit atomic.Int64

	mu          sync.Mutex
	ceiling     int
	windowStart time.Time
	samples     []time.Duration
	peak        int // most requests in flight at a sample of this window
	prevPeak    int // the last closed window's peak and median
	prevMedian  time.Duration
	noLoad      time.Duration
	measured    time.Time // when noLoad was last set
}

// New returns a limiter at its ceiling: it starts from what the engine
// says it can take and lowers that only on evidence.
func New(cfg Config, ceiling int, now time.Time) *Limiter {
	cfg.defaults()
	l := &Limiter{cfg: cfg, ceiling: max(ceiling, 1), windowStart: now}
	l.limit.Store(int64(l.ceiling))
	return l
}

// Limit is how many requests may be in flight now.
func (l *Limiter) Limit() int { return int(l.limit.Load()) }

// NoLoad is the learned no-load latency, 0 before the first window.
func (l *Limiter) NoLoad() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.noLoad
}

// SetCeiling changes the most the limit may be (the engine's slots).
func (l *Limiter) SetCeiling(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ceiling = max(n, 1)
	l.limit.Store(int64(l.clamp(float64(l.limit.Load()))))
}

func (l *Limiter) floor() int { return min(l.cfg.Floor, l.ceiling) }

func (l *Limiter) clamp(v float64) int {
	return int(min(max(v, float64(l.floor())), float64(l.ceiling)))
}

// Observe adds the latency of a request that succeeded, finishing at now
// with inflight others still running. Failed and cancelled requests must
// not be observed: how soon a request failed or was given up says nothing
// about how long the engine takes to serve one.
func (l *Limiter) Observe(now time.Time, rtt time.Duration, inflight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples = append(l.samples, max(rtt, 0))
	l.peak = max(l.peak, inflight+1)
	n := len(l.samples)
	if n < l.cfg.MaxSamples && (n < l.cfg.MinSamples || now.Sub(l.windowStart) < l.cfg.Window) {
		return
	}
	slices.Sort(l.samples)
	median := l.samples[n/2]
	peak := l.peak
	light := peak <= l.floor()
	l.samples = l.samples[:0]
	l.peak = 0
	l.windowStart = now

	cur := float64(l.limit.Load())
	atFloor := int(cur) <= l.floor()
	notQueueing := l.prevPeak > l.floor() && 3*peak <= 2*l.prevPeak && 10*median >= 9*l.prevMedian
	l.prevPeak, l.prevMedian = peak, median
	if l.measured.IsZero() || median < l.noLoad || notQueueing ||
		light && (atFloor || now.Sub(l.measured) >= l.cfg.Period) {
		l.noLoad = median
		l.measured = now
	}
	target := float64(l.noLoad) * (1 + l.cfg.Tolerance)
	gradient := 2.0
	if median > 0 {
		gradient = min(max(target/float64(median), 0.5), 2)
	}
	var next float64
	if gradient > 1 {
		next = math.Ceil(cur * gradient)
	} else {
		next = math.Floor(cur * gradient)
	}
	l.limit.Store(int64(l.clamp(next)))
}
