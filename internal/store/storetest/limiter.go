package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/store"
)

// LimiterOptions describe a limiter under test.
type LimiterOptions struct {
	// Window is the limit's period for the check that it ends: short
	// where Advance sleeps.
	Window time.Duration
	// Advance moves the limiter's clock on by d: a fake clock's step, or
	// a sleep for a store that reads a real one.
	Advance func(d time.Duration)
}

// Limiter checks a rent limiter: one call per key per window counts, a
// refusal tells the wait until the window ends, other keys are not held
// back, the next window lets one through again, and of 50 concurrent
// calls for one key exactly one is allowed.
func Limiter(t *testing.T, open func(t *testing.T) (store.RentLimiter, LimiterOptions)) {
	t.Run("one per window", func(t *testing.T) {
		l, o := open(t)
		allow := func(key string, every time.Duration, want bool) time.Duration {
			t.Helper()
			got, wait, err := l.AllowRent(context.Background(), key, every)
			if err != nil || got != want {
				t.Fatalf("AllowRent(%s, %v) = %v, %v; want %v", key, every, got, err, want)
			}
			if got && wait != 0 || !got && (wait <= 0 || wait > every) {
				t.Fatalf("AllowRent(%s, %v) = %v after %v: the wait is outside the window", key, every, got, wait)
			}
			return wait
		}
		allow("k1", o.Window, true)
		allow("k1", o.Window, false)
		allow("k2", o.Window, true)
		// Half the window on, the wait is the half left (a millisecond's
		// grace for a store's rounding), whatever the window asked for.
		o.Advance(o.Window / 2)
		for _, every := range []time.Duration{o.Window, time.Hour} {
			if wait, most := allow("k1", every, false), every-o.Window/2+time.Millisecond; wait > most {
				t.Fatalf("AllowRent(k1, %v) waits %v, want at most %v", every, wait, most)
			}
		}
		o.Advance(o.Window - o.Window/2)
		allow("k1", o.Window, true)
		allow("k1", o.Window, false)
		allow("k2", o.Window, true)
	})
	t.Run("exact under concurrency", func(t *testing.T) {
		l, _ := open(t)
		for key := range 3 {
			var allowed atomic.Int32
			var wg sync.WaitGroup
			errs := make(chan error, 50)
			for range 50 {
				wg.Go(func() {
					ok, _, err := l.AllowRent(context.Background(), fmt.Sprintf("key-%d", key), time.Minute)
					if err != nil {
						errs <- err
					}
					if ok {
						allowed.Add(1)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if n := allowed.Load(); n != 1 {
				t.Fatalf("key %d: %d of 50 concurrent calls allowed, want 1", key, n)
			}
		}
	})
}
