package bolt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/svc-dev/svc/internal/clock"
	"github.com/svc-dev/svc/internal/store"
)

// Retention is how long the store keeps what it keeps only for a while.
type Retention struct {
	// Events is how long worker events are kept.
	Events time.Duration
	// Usage is how long usage rows are kept; their totals are kept for
	// good.
	Usage time.Duration
}

// eventsPerPass bounds the worker events one pass deletes.
const eventsPerPass = 10000

// Pruner deletes what has outlived its retention: worker events, usage
// rows and power history (powerlog.Layers).
//
// Its cut-offs never run ahead of the time measured since it was made: a
// step of the wall clock forward would otherwise make a year of rows due
// at once, and deleted rows do not come back when the clock is put right.
// What a forward step makes look due is kept, and pruned once it is due
// by the elapsed time, or by the wall clock after the next start. A step
// back is followed: it only defers deletion.
type Pruner struct {
	events store.Events
	usage  store.Usage
	power  store.Power
	keep   Retention
	clock  *clock.Steady
	log    *slog.Logger
}

// Pruned is how much one pass deleted.
type Pruned struct {
	Events, Usage, Power int
	// Ahead is how far the wall clock was ahead of the time the pass
	// pruned as of; zero unless it was stepped forward.
	Ahead time.Duration
}

// NewPruner returns a pruner of the stores, anchored at c's time now. A
// nil store is not pruned.
func NewPruner(events store.Events, usage store.Usage, power store.Power, keep Retention, c clock.Clock, log *slog.Logger) *Pruner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pruner{events: events, usage: usage, power: power, keep: keep, clock: clock.NewSteady(c), log: log}
}

// Pass prunes once. It goes on past a store that fails and returns every
// failure.
func (p *Pruner) Pass(ctx context.Context) (Pruned, error) {
	now, ahead := p.clock.NotAhead()
	res := Pruned{Ahead: ahead}
	if ahead >= clock.StepThreshold {
		p.log.Warn("pruning as of the time measured since start: the system clock is ahead of it, stepped forward while the gateway ran",
			"ahead", ahead.Round(time.Second).String(), "as_of", now.Format(time.RFC3339))
	}
	var errs []error
	var err error
	if p.events != nil {
		if res.Events, err = p.events.PruneEvents(now.Add(-p.keep.Events), eventsPerPass); err != nil {
			errs = append(errs, fmt.Errorf("prune worker events: %w", err))
		}
	}
	if p.usage != nil {
		if res.Usage, err = p.usage.PruneUsage(ctx, now.Add(-p.keep.Usage)); err != nil && ctx.Err() == nil {
			errs = append(errs, fmt.Errorf("prune usage rows: %w", err))
		}
	}
	if p.power != nil {
		if res.Power, err = p.power.Prune(now); err != nil {
			errs = append(errs, fmt.Errorf("prune power history: %w", err))
		}
	}
	return res, errors.Join(errs...)
}

// Run prunes every interval until ctx ends.
func (p *Pruner) Run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := p.Pass(ctx); err != nil {
				p.log.Warn("prune", "err", err)
			}
		}
	}
}
