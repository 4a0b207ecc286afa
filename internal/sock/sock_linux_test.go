package sock

import (
	"sync"
	"sync/atomic"
	"testing"
)

// At most one socket call in cookedEvery goes through the scheduler,
// whichever connection makes it, and only one of those racing for a turn.
func TestCookedAtMostOncePerPeriod(t *testing.T) {
	var last atomic.Int64
	step := int64(cookedEvery)
	tests := []struct {
		now  int64
		want bool
	}{
		{0, false}, // the period starts with the process
		{step - 1, false},
		{step, true},
		{step, false},
		{step + step/2, false},
		{2*step - 1, false},
		{2 * step, true},
		{10 * step, true},
	}
	for _, tt := range tests {
		if got := cookAt(&last, tt.now); got != tt.want {
			t.Fatalf("cookAt(%d) = %v, want %v", tt.now, got, tt.want)
		}
	}

	var won atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if cookAt(&last, 20*step) {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d of 8 racing calls cooked, want 1", won.Load())
	}
	for n := uint32(1); n < checkEvery; n++ {
		if cook(n) {
			t.Fatalf("call %d looked at the clock; only every %dth does", n, checkEvery)
		}
	}
}
