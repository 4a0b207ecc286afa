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
