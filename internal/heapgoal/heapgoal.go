// Package heapgoal keeps the garbage collector's heap goal at least a
// fixed headroom above the live heap.
//
// With the runtime's default (GOGC=100) the goal is twice the live heap.
// A gateway's live heap is small (a few MiB for its accounts, links and
// buffers) while every request allocates tens of KiB, so at a few
// thousand requests a second the collector would run dozens of times a
// second, each cycle paying its fixed costs (stacks, globals, sweeping)
// for little garbage. Keeping a headroom of tens of MiB makes cycles rare
// at a bounded, absolute memory cost; once the live heap is larger than
// the headroom the runtime's default applies unchanged.
package heapgoal

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// DefaultHeadroom is the least the heap may grow past the live heap
// between two collections.
const DefaultHeadroom = 32 << 20

// every is how often the live heap is read: the percentage follows a
// live heap that changes over seconds, not within a cycle.
const every = time.Second

// minPercent is the runtime's default GOGC, the least Run sets.
const minPercent = 100

// busyShare is the share of the headroom a process must allocate in a
// second to be kept the headroom.
const busyShare = 16

// floor is the least live heap the percentage is computed for, so that a
// process that has barely started is not given an unbounded one.
const floor = 1 << 20

// Percent is the GOGC that leaves at least headroom bytes between
// collections for a process whose live heap, goroutine stacks and globals
// come to live bytes: the runtime applies GOGC to all three.
func Percent(live, headroom uint64) int {
	live = max(live, floor)
	return max(minPercent, int(headroom*100/live))
}

// gauge reads what GOGC applies to (the live heap, stacks and globals)
// and the bytes allocated since the process started; setter sets the GC
// percentage, returning the previous one. Tests replace both.
type gauge func() (live, allocated uint64)
type setter func(int) int

// Run keeps the heap goal at least headroom above the live heap while the
// process allocates at least headroom/16 a second, until ctx ends, then
// restores the percentage it found. The percentage is the
// process's: one Run at a time, by the command that owns the process.
func Run(ctx context.Context, headroom uint64) {
	run(ctx, headroom, heap, debug.SetGCPercent)
}

func run(ctx context.Context, headroom uint64, read gauge, set setter) {
	current := minPercent
	before := set(current)
	defer set(before)
	_, last := read()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		live, allocated := read()
		p := minPercent
		if allocated-last >= headroom/busyShare {
			p = Percent(live, headroom)
		}
		last = allocated
		// Small changes are left alone: each setting recomputes the
		// pacer's goal.
		if p != current && (p == minPercent || p > current+current/8 || p < current-current/8) {
			set(p)
			current = p
		}
	}
}

// heap reads what GOGC applies to: the heap the last collection found
// live, the goroutine stacks and the globals; and the bytes allocated
// since the process started.
func heap() (live, allocated uint64) {
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
		{Name: "/gc/heap/allocs:bytes"},
	}
	metrics.Read(s)
	for i := range s {
		if s[i].Value.Kind() != metrics.KindUint64 {
			continue
		}
		if i < 3 {
			live += s[i].Value.Uint64()
		} else {
			allocated = s[i].Value.Uint64()
		}
	}
	return live, allocated
}
