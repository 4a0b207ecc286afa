package cluster

import (
	"slices"
	"sync"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// eventLog records the events a fence lets through.
type eventLog struct {
	mu  sync.Mutex
	got []string // org/event type
}

func (l *eventLog) RecordEvent(orgID string, ev api.WorkerEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, orgID+"/"+ev.EventType)
}

func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.got
	l.got = nil
	return got
}

// fenceWorld is what a fence sees of its replica: whether its reading
// of the homes is fresh, and the homes it read.
type fenceWorld struct {
	mu    sync.Mutex
	fresh bool
	homes map[string]Home
}

func (w *fenceWorld) isFresh() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fresh
}

func (w *fenceWorld) home(org string) (Home, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	x, ok := w.homes[org]
	return x, ok && x.ReplicaID != ""
}

func (w *fenceWorld) set(fresh bool, homes map[string]Home) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fresh, w.homes = fresh, homes
}

func ev(typ string) api.WorkerEvent { return api.WorkerEvent{EventType: typ} }

func TestFence(t *testing.T) {
	mine := Home{ReplicaID: "a", Epoch: 3}
	tests := []struct {
		name string
		// before is the homes as read before the events; after, as read
		// once the replica could tell again.
		before, after map[string]Home
		// fresh: the events are made while the reading is fresh.
		fresh bool
		want  []string
	}{
		{"home here, fresh", map[string]Home{"o": mine}, nil, true, []string{"o/disconnected"}},
		{"homed nowhere, fresh", map[string]Home{}, nil, true, []string{"o/disconnected"}},
		{"home elsewhere, fresh", map[string]Home{"o": {ReplicaID: "b", Epoch: 4}}, nil, true, nil},
		{"held, still home at the same epoch", map[string]Home{"o": mine}, map[string]Home{"o": mine}, false, []string{"o/disconnected"}},
		{"held, another replica took it", map[string]Home{"o": mine}, map[string]Home{"o": {ReplicaID: "b", Epoch: 4}}, false, nil},
		{"held, lost and claimed back", map[string]Home{"o": mine}, map[string]Home{"o": {ReplicaID: "a", Epoch: 5}}, false, nil},
		{"held, homed nowhere since", map[string]Home{"o": mine}, map[string]Home{}, false, []string{"o/disconnected"}},
		{"held while homed nowhere, home here since", map[string]Home{}, map[string]Home{"o": mine}, false, []string{"o/disconnected"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &fenceWorld{}
			w.set(tt.fresh, tt.before)
			var log eventLog
			f := NewFence(&log, "a", w.isFresh, w.home, nil)
			f.RecordEvent("o", ev(api.EventDisconnected))
			if tt.fresh {
				if got := log.take(); !slices.Equal(got, tt.want) {
					t.Fatalf("recorded %v, want %v", got, tt.want)
				}
				return
			}
			if got := log.take(); len(got) != 0 {
				t.Fatalf("recorded %v before the homes were read again", got)
			}
			// A reading that is not yet fresh settles nothing.
			f.Settle()
			if got := log.take(); len(got) != 0 {
				t.Fatalf("recorded %v on a reading begun before the renewal", got)
			}
			w.set(true, tt.after)
			f.Settle()
			if got := log.take(); !slices.Equal(got, tt.want) {
				t.Fatalf("recorded %v, want %v", got, tt.want)
			}
			f.Settle()
			if got := log.take(); len(got) != 0 {
				t.Fatalf("settled twice: %v", got)
			}
		})
	}
}

// Held events are recorded in the order they were made, before a fresh
// event that settles them; past the bound, events go through unfenced.
func TestFenceOrderAndBound(t *testing.T) {
	w := &fenceWorld{}
	w.set(false, map[string]Home{"o": {ReplicaID: "a", Epoch: 1}})
	var log eventLog
	f := NewFence(&log, "a", w.isFresh, w.home, nil)
	f.RecordEvent("o", ev(api.EventHealthChanged))
	f.RecordEvent("o", ev(api.EventDisconnected))
	w.set(true, map[string]Home{"o": {ReplicaID: "a", Epoch: 1}})
	f.RecordEvent("o", ev(api.EventConnected))
	want := []string{"o/" + api.EventHealthChanged, "o/" + api.EventDisconnected, "o/" + api.EventConnected}
	if got := log.take(); !slices.Equal(got, want) {
		t.Fatalf("recorded %v, want %v", got, want)
	}

	w.set(false, map[string]Home{"o": {ReplicaID: "a", Epoch: 1}})
	for range maxHeldEvents + 2 {
		f.RecordEvent("o", ev(api.EventHealthChanged))
	}
	if got := log.take(); len(got) != 2 {
		t.Fatalf("%d events past the bound recorded, want 2", len(got))
	}
}
