package link

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestHandlersReuseIdleGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newHandlers()
		var ran atomic.Int64
		for range 3 {
			p.run(func() { ran.Add(1) })
			synctest.Wait() // the handler is done and its goroutine idle
		}
		if got := p.started.Load(); got != 1 {
			t.Errorf("started %d goroutines for 3 handlers one after another, want 1", got)
		}
		if got := ran.Load(); got != 3 {
			t.Errorf("ran %d handlers, want 3", got)
		}
		p.close()
	})
}

func TestHandlersRunConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newHandlers()
		release := make(chan struct{})
		var running atomic.Int64
		for range 4 {
			p.run(func() { running.Add(1); <-release })
		}
		synctest.Wait()
		if got := running.Load(); got != 4 {
			t.Fatalf("%d handlers running at once, want 4: a busy handler must not hold up the next", got)
		}
		close(release)
		synctest.Wait()
		// The four are idle now: the next four reuse them.
		for range 4 {
			p.run(func() {})
		}
		synctest.Wait()
		if got := p.started.Load(); got != 4 {
			t.Errorf("started %d goroutines, want 4", got)
		}
		p.close()
	})
}

func TestHandlersIdleExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newHandlers()
		p.run(func() {})
		time.Sleep(handlerIdle + time.Millisecond)
		synctest.Wait()
		// The idle goroutine exited on its own: the next handler needs a
		// new one, and close has nothing to stop.
		p.run(func() {})
		synctest.Wait()
		if got := p.started.Load(); got != 2 {
			t.Errorf("started %d goroutines, want 2 (the first exits after %v idle)", got, handlerIdle)
		}
		p.close()
	})
}

func TestHandlersCloseWaitsForBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newHandlers()
		var finished atomic.Bool
		p.run(func() { time.Sleep(time.Second); finished.Store(true) })
		p.run(func() {}) // and one that goes idle
		synctest.Wait()
		p.close()
		if !finished.Load() {
			t.Error("close returned before a busy handler finished")
		}
	})
}
