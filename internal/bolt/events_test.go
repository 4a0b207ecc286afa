package bolt

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestWriterCommitsOnShutdown(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{Every: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	s.Events(w).RecordEvent("o", api.WorkerEvent{ID: "x", CreatedAt: time.Now()})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, _ = Open(dir, Options{})
	defer s.Close()
	got, _ := s.Events(s.NewWriter(WriterOptions{})).ListEvents("o", EventQuery{Limit: 10})
	if len(got) != 1 {
		t.Fatalf("event lost at shutdown: %v", got)
	}
}

func TestWriterBatchesEarlyAndBoundsPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := Open(t.TempDir(), Options{})
		defer s.Close()
		w := s.NewWriter(WriterOptions{Every: time.Hour, Batch: 10})
		ev := s.Events(w)
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			_ = w.Run(ctx)
		}()
		defer func() { cancel(); <-ran }()
		start := time.Now()
		for i := range 10 {
			ev.RecordEvent("o", api.WorkerEvent{ID: fmt.Sprint(i), CreatedAt: time.Now()})
		}
		// Once the writer is idle again, the full batch is committed,
		// long before its hourly interval.
		synctest.Wait()
		if got, _ := ev.ListEvents("o", EventQuery{Limit: 100}); len(got) != 10 || time.Since(start) != 0 {
			t.Fatalf("a full batch was not committed early (%d after %s)", len(got), time.Since(start))
		}
	})
	s, _ := Open(t.TempDir(), Options{})
	defer s.Close()
	// A backlog of one byte holds one event: the rest are dropped, and
	// counted.
	w2 := s.NewWriter(WriterOptions{Every: time.Hour, Batch: 1000, Backlog: 1})
	for i := range 8 {
		s.Events(w2).RecordEvent("p", api.WorkerEvent{ID: fmt.Sprint(i), CreatedAt: time.Now()})
	}
	_ = w2.Flush()
	if got, _ := s.Events(w2).ListEvents("p", EventQuery{Limit: 100}); len(got) != 1 || w2.Backlog().DroppedEvents != 7 {
		t.Fatalf("pending not bounded: %d stored, %d dropped", len(got), w2.Backlog().DroppedEvents)
	}
}

// A worker whose newest event lies behind many of its organisation's others
// is looked up by reading back to it, so the lookup must end with its
// context rather than whenever the scan does.
func TestLastEventEndsWithItsContext(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := s.NewWriter(WriterOptions{Every: time.Hour, Batch: 10_000})
	ev := s.Events(w)
	at := time.Now()
	ev.RecordEvent("o", api.WorkerEvent{ID: "old", WorkerID: "quiet", EventType: "connected", CreatedAt: at})
	for i := range 2 * ctxEvery {
		ev.RecordEvent("o", api.WorkerEvent{ID: fmt.Sprint(i), WorkerID: "busy", EventType: "connected", CreatedAt: at.Add(time.Duration(i+1) * time.Millisecond)})
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ev.LastEvent(context.Background(), "o", "quiet")
	if err != nil || !ok || got.ID != "old" {
		t.Fatalf("LastEvent = %+v, %v, %v; want the quiet worker's event", got, ok, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok, err := ev.LastEvent(ctx, "o", "quiet"); err != context.Canceled || ok {
		t.Fatalf("LastEvent under an ended context = %v, %v; want context.Canceled", ok, err)
	}
	// The newest event is the first read, so an ended context does not
	// stand in the way of finding it.
	if got, ok, err := ev.LastEvent(ctx, "o", "busy"); err != nil || !ok || got.WorkerID != "busy" {
		t.Fatalf("LastEvent of the newest = %+v, %v, %v", got, ok, err)
	}
}
