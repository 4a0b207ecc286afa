package heapgoal

import (
	"context"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{live: 4 << 20, headroom: 32 << 20, want: 800},
		{live: 4 << 20, headroom: 64 << 20, want: 1600},
		{live: 32 << 20, headroom: 64 << 20, want: 200},
		{live: 64 << 20, headroom: 64 << 20, want: 100},
		// Past the headroom the runtime's default applies.
		{live: 1 << 30, headroom: 64 << 20, want: 100},
		// A process that has barely started counts as having 1 MiB live.
		{live: 0, headroom: 64 << 20, want: 6400},
		{live: 100 << 10, headroom: 64 << 20, want: 6400},
	} {
		if got := Percent(c.live, c.headroom); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.live, c.headroom, got, c.want)
		}
	}
}

// Run keeps the headroom while the process allocates fast, follows the
// live heap, leaves small changes alone, returns to the default once the
// process quietens, and restores the percentage it found when it stops.
func TestRunFollowsTheLiveHeap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var live, allocated atomic.Uint64
		read := func() (uint64, uint64) { return live.Load(), allocated.Load() }
		var sets []int
		current := 100
		set := func(p int) int {
			sets = append(sets, p)
			prev := current
			current = p
			return prev
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			run(ctx, 64<<20, read, set)
		}()
		// second lets a second pass with rate bytes a second allocated.
		second := func(rate uint64) {
			allocated.Add(rate)
			time.Sleep(every)
			synctest.Wait()
		}
		synctest.Wait()
		live.Store(8 << 20)
		second(1 << 20) // quiet: the default
		if current != 100 {
			t.Fatalf("quiet: GOGC %d, want 100", current)
		}
		second(100 << 20)
		if current != 800 {
			t.Fatalf("busy at 8 MiB live: GOGC %d, want 800", current)
		}
		live.Store(8<<20 + 512<<10) // within an eighth: left alone
		second(100 << 20)
		live.Store(32 << 20)
		second(100 << 20)
		if current != 200 {
			t.Fatalf("busy at 32 MiB live: GOGC %d, want 200", current)
		}
		live.Store(8 << 20)
		second(1 << 20)
		if current != 100 {
			t.Fatalf("quiet again: GOGC %d, want 100", current)
		}
		live.Store(512 << 20)
		second(100 << 20)
		if current != 100 {
			t.Fatalf("busy at 512 MiB live: GOGC %d, want the default 100", current)
		}
		cancel()
		<-done
		if want := []int{100, 800, 200, 100, 100}; !slices.Equal(sets, want) {
			t.Fatalf("settings %v, want %v (the last restores the one found)", sets, want)
		}
	})
}

// The heap is read from the runtime, once a collection measured it.
func TestHeap(t *testing.T) {
	runtime.GC()
	if live, allocated := heap(); live == 0 || allocated == 0 {
		t.Fatalf("live %d, allocated %d", live, allocated)
	}
}
