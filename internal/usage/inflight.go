// Package usage follows requests while they run and turns each into a
// usage row when it ends; it says what a row adds to the totals kept as
// rows arrive, and what the usage endpoints tell from those totals.
package usage

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Tracker holds every organisation's in-flight requests.
type Tracker struct {
	mu    sync.Mutex
	byOrg map[string]map[*Entry]struct{}
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker { return &Tracker{byOrg: map[string]map[*Entry]struct{}{}} }

// Entry is one in-flight request. Its relay updates it; readers take
// snapshots through Tracker.List.
type Entry struct {
	orgID, taskID, model, kind string
	stream                     bool
	started                    time.Time
	// stop ends the request early, for StopAll.
	stop func()

	mu         sync.Mutex
	workerID   string
	workerName string
	// waiting is set while a request pinned to workerID waits for it.
	waiting bool
	// audioSeconds is the length of a transcription's audio, 0 for other
	// kinds.
	audioSeconds float64

	// tokens counts relayed chunks of a streaming chat or text completion,
	// -1 before the first.
	tokens atomic.Int64
}

// Start adds a request to the in-flight list; stop ends it early, when
// StopAll is called.
func (t *Tracker) Start(orgID, taskID, model, kind string, stream bool, now time.Time, stop func()) *Entry {
	e := &Entry{orgID: orgID, taskID: taskID, model: model, kind: kind, stream: stream, started: now, stop: stop}
	e.tokens.Store(-1)
	t.mu.Lock()
	m := t.byOrg[orgID]
	if m == nil {
		m = map[*Entry]struct{}{}
		t.byOrg[orgID] = m
	}
	m[e] = struct{}{}
	t.mu.Unlock()
	return e
}

// StopAll stops every request on the list, as a server that cannot wait
// for them any longer does, and returns how many it stopped. Each leaves
// the list as it finishes.
func (t *Tracker) StopAll() int {
	t.mu.Lock()
	var stops []func()
	for _, m := range t.byOrg {
		for e := range m {
			stops = append(stops, e.stop)
		}
	}
	t.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	return len(stops)
}

// Finish takes a request off the list.
func (t *Tracker) Finish(e *Entry) {
	t.mu.Lock()
	if m := t.byOrg[e.orgID]; m != nil {
		delete(m, e)
		if len(m) == 0 {
			delete(t.byOrg, e.orgID)
		}
	}
	t.mu.Unlock()
}

// Assign records the worker now serving the request.
func (e *Entry) Assign(workerID, workerName string) {
	e.mu.Lock()
	e.workerID, e.workerName, e.waiting = workerID, workerName, false
	e.mu.Unlock()
}

// Wait records that the request waits for a worker: for the one it is
// pinned to (workerID), or for any ("").
func (e *Entry) Wait(workerID string) {
	e.mu.Lock()
	e.workerID, e.workerName, e.waiting = workerID, "", true
	e.mu.Unlock()
}

// SetAudioSeconds records the length of a transcription's audio.
func (e *Entry) SetAudioSeconds(s float64) {
	e.mu.Lock()
	e.audioSeconds = s
	e.mu.Unlock()
}

// AddTokens adds n relayed tokens to the running estimate.
func (e *Entry) AddTokens(n int) {
	if !e.tokens.CompareAndSwap(-1, int64(n)) {
		e.tokens.Add(int64(n))
	}
}

// List returns an organisation's in-flight requests, oldest first,
// optionally only those on one worker.
func (t *Tracker) List(orgID, workerID string, now time.Time) []api.InflightRequest {
	t.mu.Lock()
	entries := make([]*Entry, 0, len(t.byOrg[orgID]))
	for e := range t.byOrg[orgID] {
		entries = append(entries, e)
	}
	t.mu.Unlock()
	out := make([]api.InflightRequest, 0, len(entries))
	for _, e := range entries {
		e.mu.Lock()
		wid, wname, secs, waiting := e.workerID, e.workerName, e.audioSeconds, e.waiting
		e.mu.Unlock()
		if workerID != "" && wid != workerID {
			continue
		}
		r := api.InflightRequest{
			TaskID: e.taskID, Model: e.model, WorkerID: wid, WorkerName: wname, RequestType: e.kind,
			StartedAt: e.started.UTC(), ElapsedMs: now.Sub(e.started).Milliseconds(),
			State: api.StateRunning, Stream: e.stream,
		}
		if wid == "" || waiting {
			r.State = api.StateQueued
		}
		if secs > 0 {
			r.AudioSeconds = &secs
		}
		// The spec gives tokens_generated to streaming chat alone.
		if n := e.tokens.Load(); n >= 0 && e.stream && e.kind == api.RequestChat {
			v := int(n)
			r.TokensGenerated = &v
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b api.InflightRequest) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.TaskID, b.TaskID))
	})
	return out
}

// EstimateTokens is the spec's rule for counts a worker never reported:
// about four characters per token, rounded up.
func EstimateTokens(chars int) int { return (chars + 3) / 4 }
