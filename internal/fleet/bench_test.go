package fleet

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

// quietConn is a worker connection that says nothing and takes whatever
// the gateway writes: a connected, idle worker at the least cost, so that
// a benchmark can hold ten thousand of them.
type quietConn struct {
	welcomed chan struct{} // closed at the first write, the welcome
	once     sync.Once
	closed   chan struct{}
	shut     sync.Once
}

func newQuietConn() *quietConn {
	return &quietConn{welcomed: make(chan struct{}), closed: make(chan struct{})}
}

func (c *quietConn) ReadMessage() ([]byte, error) { <-c.closed; return nil, io.ErrClosedPipe }
func (c *quietConn) WriteMessage([]byte) error {
	c.once.Do(func() { close(c.welcomed) })
	return nil
}
func (c *quietConn) Close() error { c.shut.Do(func() { close(c.closed) }); return nil }

// connectQuiet connects n idle workers to org, each serving one of
// models in turn, and returns when all are in. Their connections end with
// ctx; wait for wg before the test ends.
func connectQuiet(tb testing.TB, ctx context.Context, wg *sync.WaitGroup, f *Fleet, org string, n, maxConc int, models ...string) {
	tb.Helper()
	for i := range n {
		hello := api.Hello{Protocol: link.Protocol, Name: fmt.Sprintf("w%05d", i), Version: "v1", MaxConcurrent: maxConc,
			SessionID: uuid.NewString(), Models: []api.Model{chat(models[i%len(models)])}}
		c := newQuietConn()
		wg.Go(func() {
			if err := f.Connect(ctx, org, hello, c); err != nil {
				tb.Error(err)
			}
		})
		<-c.welcomed
	}
}

// BenchmarkAcquireRelease is the routing cost of one request in fleets of
// growing size, every worker idle and serving one of four models: it
// should not grow with the fleet.
func BenchmarkAcquireRelease(b *testing.B) {
	models := []string{"m0", "m1", "m2", "m3"}
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			f := New(Config{})
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			connectQuiet(b, ctx, &wg, f, "o", n, 4, models...)
			needs := make([]Need, len(models))
			for i, m := range models {
				needs[i] = Need{OrgID: "o", Model: m, Capability: api.CapChat}
			}
			runtime.GC()
			cpu0 := cpuTime()
			i := 0
			for b.Loop() {
				l, err := f.Acquire(ctx, needs[i%len(needs)])
				if err != nil {
					b.Fatal(err)
				}
				l.Release(Succeeded)
				i++
			}
			// On a busy machine the time the process ran says more than
			// the time that passed.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkAcquireQueued is a request that waits for its slot: eight
// clients share one worker's two slots, so most of them queue, as a closed
// loop of clients does in front of a worker at its limit.
func BenchmarkAcquireQueued(b *testing.B) {
	f := New(Config{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	connectQuiet(b, ctx, &wg, f, "o", 1, 2, "m0")
	need := Need{OrgID: "o", Model: "m0", Capability: api.CapChat}
	b.ReportAllocs()
	b.SetParallelism(4) // 8 clients on a 2-core machine
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := f.Acquire(ctx, need)
			if err != nil {
				b.Error(err)
				return
			}
			runtime.Gosched() // hold the slot a moment, so others queue
			l.Release(Succeeded)
		}
	})
}

// cpuTime is the CPU time the process has used, in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkWorkersListing is the listing of 10,000 workers. The fleet is
// locked for a chunk of it at a time (listChunk).
func BenchmarkWorkersListing(b *testing.B) {
	f := New(Config{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	connectQuiet(b, ctx, &wg, f, "o", 10000, 4, "m0", "m1", "m2", "m3")
	for b.Loop() {
		if ws := f.Workers("o"); len(ws) != 10000 {
			b.Fatalf("%d workers listed", len(ws))
		}
	}
}
