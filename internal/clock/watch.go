package clock

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// StepThreshold is the least difference between how far the wall clock and
// the monotonic clock moved that a Watch counts as a step. NTP slews both
// clocks alike, and even at its fastest (0.5 ms a second) a slew stays far
// below it between two looks.
const StepThreshold = 2 * time.Second

// Watch notices steps of the wall clock: between two looks it compares how
// far the wall clock moved with how far the monotonic clock did. It cannot
// see a step made while the process was not running. A host's suspension
// looks like a step forward: the monotonic clock stops while it sleeps.
type Watch struct {
	c     Clock
	log   *slog.Logger
	steps atomic.Uint64

	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

// NewWatch returns a Watch of c that logs the steps it sees to log.
func NewWatch(c Clock, log *slog.Logger) *Watch {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watch{c: c, log: log}
	w.mono = c.Mono()
	w.wall = c.Now().Round(0)
	return w
}

// Check looks at the clocks once. It returns how far the wall clock moved
// beyond the monotonic clock since the last look (negative for a step
// back), and whether that counts as a step, which it logs and counts.
func (w *Watch) Check() (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	mono := w.c.Mono()
	wall := w.c.Now().Round(0)
	d := wall.Sub(w.wall) - (mono - w.mono)
	w.wall, w.mono = wall, mono
	if d < StepThreshold && d > -StepThreshold {
		return d, false
	}
	w.steps.Add(1)
	w.log.Warn("the system clock was stepped; billing, deadlines and pruning keep to the time measured since start",
		"step", d.Round(time.Millisecond).String(), "wall_clock", wall.UTC().Format(time.RFC3339))
	return d, true
}

// Steps is how many steps Check has seen.
func (w *Watch) Steps() uint64 { return w.steps.Load() }

// Run looks every interval until ctx ends.
func (w *Watch) Run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.Check()
		}
	}
}
