package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/store"
)

var eventTypes = []string{api.EventConnected, api.EventDisconnected, api.EventHealthChanged}

// workerEvents makes n events within span before Now, of 4 workers and
// every type, with details and metadata or none.
func workerEvents(rng *rand.Rand, n int, span time.Duration) []api.WorkerEvent {
	out := make([]api.WorkerEvent, 0, n)
	for i := range n {
		ev := api.WorkerEvent{
			ID:         fmt.Sprintf("ev-%d-%x", i, rng.Uint64()),
			WorkerID:   fmt.Sprintf("w%d", rng.IntN(4)),
			WorkerName: "worker",
			EventType:  eventTypes[rng.IntN(len(eventTypes))],
			CreatedAt:  Now.Add(-time.Duration(rng.Int64N(int64(span)))),
			Metadata:   map[string]any{},
			Transient:  rng.IntN(3) == 0,
		}
		if rng.IntN(2) == 0 {
			ev.Detail = ptr("healthy -> degraded")
			ev.Metadata = map[string]any{"from": "healthy", "to": "degraded", "n": float64(i)}
		}
		if rng.IntN(5) == 0 {
			ev.Actor = ptr("user-1")
		}
		out = append(out, ev)
	}
	return out
}

// asStored is an event as a store gives it back: as its JSON reads.
func asStored(t testing.TB, ev api.WorkerEvent) api.WorkerEvent {
	t.Helper()
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var out api.WorkerEvent
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func allEvents(t testing.TB, e store.Events, org string) []api.WorkerEvent {
	t.Helper()
	evs, err := e.ListEvents(org, store.EventQuery{Limit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// ListEvents lists an organisation's events newest first (those of one
// instant newest recorded first), and no one else's, filtered by worker
// and type, paged.
func eventsPaged(t *testing.T, l Logs) {
	rng := rand.New(rand.NewPCG(21, 22))
	byOrg := map[string][]api.WorkerEvent{
		"org":   workerEvents(rng, 200, 10*24*time.Hour),
		"org-a": workerEvents(rng, 150, 10*24*time.Hour),
	}
	// Events of one instant, listed newest recorded first.
	for i := range 6 {
		byOrg["org"] = append(byOrg["org"], api.WorkerEvent{ID: fmt.Sprint("same-", i), WorkerID: "w1",
			EventType: api.EventConnected, CreatedAt: Now, Metadata: map[string]any{}})
	}
	for org, evs := range byOrg {
		for _, ev := range evs {
			l.Events.RecordEvent(org, ev)
		}
	}
	l.Sync(t)
	for org, evs := range byOrg {
		type indexed struct {
			i  int
			ev api.WorkerEvent
		}
		var sorted []indexed
		for i, ev := range evs {
			sorted = append(sorted, indexed{i, asStored(t, ev)})
		}
		slices.SortFunc(sorted, func(a, b indexed) int {
			if c := b.ev.CreatedAt.Compare(a.ev.CreatedAt); c != 0 {
				return c
			}
			return b.i - a.i
		})
		for _, q := range []store.EventQuery{
			{Limit: 1000}, {Limit: 5}, {Limit: 5, Offset: 7}, {WorkerID: "w1", Limit: 1000}, {WorkerID: "w2", Limit: 3, Offset: 2},
			{EventType: api.EventDisconnected, Limit: 1000}, {EventType: api.EventDisconnected, Limit: 2, Offset: 2},
			{WorkerID: "w3", EventType: api.EventHealthChanged, Limit: 1000},
			{WorkerID: "w9", Limit: 10}, {Limit: 10, Offset: len(evs)}, {Limit: 0}, {Limit: 4, Offset: -2},
		} {
			want := []api.WorkerEvent{}
			skipped := 0
			for _, x := range sorted {
				if (q.WorkerID != "" && x.ev.WorkerID != q.WorkerID) || (q.EventType != "" && x.ev.EventType != q.EventType) {
					continue
				}
				if skipped < q.Offset {
					skipped++
					continue
				}
				if len(want) >= q.Limit {
					break
				}
				want = append(want, x.ev)
			}
			got, err := l.Events.ListEvents(org, q)
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("org %s %+v: %d events, want %d\n got %+v\nwant %+v", org, q, len(got), len(want), got, want)
			}
		}
		// A worker's newest event, w1's among those of one instant.
		for _, worker := range []string{"w0", "w1", "w2", "w3", "w9", "w"} {
			var want api.WorkerEvent
			found := false
			for _, x := range sorted {
				if x.ev.WorkerID == worker {
					want, found = x.ev, true
					break
				}
			}
			got, ok, err := l.Events.LastEvent(context.Background(), org, worker)
			if err != nil || ok != found || !reflect.DeepEqual(got, want) {
				t.Fatalf("org %s: LastEvent(%s) = %+v, %v, %v; want %+v, %v", org, worker, got, ok, err, want, found)
			}
		}
	}
	// Organisations without events: one whose id extends another's, and
	// one whose id another's extends.
	for _, org := range []string{"org-ab", "or"} {
		if got, err := l.Events.ListEvents(org, store.EventQuery{Limit: 10}); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("organisation %s without events: %v, %v", org, got, err)
		}
	}
}

// An event shipped again, or recorded again, is stored once by a keyed
// store (and as often as it is recorded by one that is not).
func eventsReplay(t *testing.T, l Logs) {
	rng := rand.New(rand.NewPCG(23, 24))
	evs := workerEvents(rng, 40, time.Hour)
	// One without an id, as rental events are made.
	evs = append(evs, api.WorkerEvent{WorkerID: "w1", EventType: api.EventConnected, CreatedAt: Now.Add(-time.Minute)})
	for _, ev := range evs {
		l.Events.RecordEvent("org", ev)
	}
	l.Sync(t)
	for _, ev := range evs[:5] {
		l.Events.RecordEvent("org", ev)
	}
	l.Events.RecordEvent("org", evs[len(evs)-1])
	l.Sync(t)
	want := len(evs)
	if !l.Keyed {
		want += 6
	}
	if got := allEvents(t, l.Events, "org"); len(got) != want {
		t.Fatalf("%d events stored, want %d", len(got), want)
	}
	if l.Resend != nil {
		l.Resend(t)
		l.Sync(t)
		if got := allEvents(t, l.Events, "org"); len(got) != want {
			t.Fatalf("after a resend: %d events stored, want %d", len(got), want)
		}
	}
}

// PruneEvents deletes at most max of the events older than the cut-off,
// and none after it.
func eventsPrune(t *testing.T, l Logs) {
	rng := rand.New(rand.NewPCG(25, 26))
	evs := append(workerEvents(rng, 100, 20*24*time.Hour), workerEvents(rng, 30, 20*24*time.Hour)...)
	for i, ev := range evs {
		org := "org"
		if i >= 100 {
			org = "org-b"
		}
		l.Events.RecordEvent(org, ev)
	}
	l.Sync(t)
	cut := Now.Add(-10 * 24 * time.Hour)
	var old []time.Time
	for _, ev := range evs {
		if ev.CreatedAt.Before(cut) {
			old = append(old, ev.CreatedAt)
		}
	}
	if len(old) < 30 {
		t.Fatalf("fixture: %d old events", len(old))
	}
	if n, err := l.Events.PruneEvents(cut, 0); n != 0 || err != nil {
		t.Fatalf("PruneEvents with max 0 = %d, %v", n, err)
	}
	n, err := l.Events.PruneEvents(cut, 20)
	if err != nil || n != 20 {
		t.Fatalf("PruneEvents at most 20 = %d, %v", n, err)
	}
	n, err = l.Events.PruneEvents(cut, 1000)
	if err != nil || n != len(old)-20 {
		t.Fatalf("PruneEvents of the rest = %d, %v; want %d", n, err, len(old)-20)
	}
	left := append(allEvents(t, l.Events, "org"), allEvents(t, l.Events, "org-b")...)
	if len(left) != len(evs)-len(old) {
		t.Fatalf("%d events left, want %d", len(left), len(evs)-len(old))
	}
	for _, ev := range left {
		if ev.CreatedAt.Before(cut) {
			t.Fatalf("event of %v left after pruning before %v", ev.CreatedAt, cut)
		}
	}
}
