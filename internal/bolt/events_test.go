package bolt

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestEventsListNewestFirstFilteredAndPaged(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := s.NewWriter(WriterOptions{})
	ev := s.Events(w)
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := range 10 {
		typ := api.EventConnected
		if i%2 == 1 {
			typ = api.EventDisconnected
		}
		ev.RecordEvent("org-a", api.WorkerEvent{ID: fmt.Sprint(i), WorkerID: fmt.Sprintf("w%d", i%3), EventType: typ, CreatedAt: t0.Add(time.Duration(i) * time.Second)})
	}
	ev.RecordEvent("org-b", api.WorkerEvent{ID: "b", WorkerID: "w0", EventType: api.EventConnected, CreatedAt: t0})
	ev.RecordEvent("org-ab", api.WorkerEvent{ID: "ab", WorkerID: "w0", EventType: api.EventConnected, CreatedAt: t0})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	ids := func(evs []api.WorkerEvent) string {
		s := ""
		for _, e := range evs {
			s += e.ID
		}
		return s
	}
	tests := []struct {
		org  string
		q    EventQuery
		want string
	}{
		{"org-a", EventQuery{Limit: 50}, "9876543210"},
		{"org-a", EventQuery{Limit: 3}, "987"},
		{"org-a", EventQuery{Limit: 3, Offset: 8}, "10"},
		{"org-a", EventQuery{Limit: 50, WorkerID: "w0"}, "9630"},
		{"org-a", EventQuery{Limit: 50, EventType: api.EventDisconnected}, "97531"},
		{"org-a", EventQuery{Limit: 2, Offset: 2, EventType: api.EventDisconnected}, "53"},
		{"org-a", EventQuery{Limit: 50, WorkerID: "w1", EventType: api.EventConnected}, "4"},
		{"org-b", EventQuery{Limit: 50}, "b"},
		{"org-ab", EventQuery{Limit: 50}, "ab"},
		{"org-z", EventQuery{Limit: 50}, ""},
	}
	for _, tt := range tests {
		got, err := ev.ListEvents(tt.org, tt.q)
		if err != nil {
			t.Fatal(err)
		}
		if ids(got) != tt.want {
			t.Errorf("%s %+v = %q, want %q", tt.org, tt.q, ids(got), tt.want)
		}
	}
	n, err := ev.PruneEvents(t0.Add(5*time.Second), 100)
	if err != nil || n != 7 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	if got, _ := ev.ListEvents("org-a", EventQuery{Limit: 50}); ids(got) != "98765" {
		t.Fatalf("after prune: %q", ids(got))
	}
}

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
