package cli

import (
	"context"

	"github.com/svc-dev/svc/internal/heapgoal"
)

// paceHeap keeps the collector's heap goal a headroom above the live heap
// (internal/heapgoal) until ctx ends, unless the operator set GOGC; the
// returned function stops it and waits.
func paceHeap(ctx context.Context, f *Factory) func() {
	if f.Getenv("GOGC") != "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		heapgoal.Run(ctx, heapgoal.DefaultHeadroom)
	}()
	return func() {
		cancel()
		<-done
	}
}
