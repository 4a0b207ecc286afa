package fleet

import (
	"cmp"
	"slices"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Workers lists an organisation's workers, connected and recently
// disconnected, by name. The fleet is locked a few hundred workers at a
// time, while their entries are copied: a listing of thousands holds up
// routing no longer than a listing of hundreds, and is sorted unlocked.
// A worker that changes meanwhile is listed as it was when its entry was
// copied.
func (f *Fleet) Workers(orgID string) []api.Worker {
	out := f.workers(orgID)
	f.sortWorkers(out)
	return out
}

func (f *Fleet) sortWorkers(ws []api.Worker) {
	slices.SortFunc(ws, func(a, b api.Worker) int {
		return cmp.Or(cmp.Compare(a.WorkerName, b.WorkerName), cmp.Compare(a.WorkerID, b.WorkerID))
	})
}

// listChunk is how many workers' entries are copied in one hold of the
// fleet lock.
const listChunk = 256

func (f *Fleet) workers(orgID string) []api.Worker {
	f.mu.Lock()
	o := f.orgs[orgID]
	if o == nil {
		f.mu.Unlock()
		return []api.Worker{}
	}
	queued := queuedByWorker(o)
	ws := make([]*worker, 0, len(o.workers))
	for _, w := range o.workers {
		ws = append(ws, w)
	}
	f.mu.Unlock()
	out := make([]api.Worker, len(ws))
	for from := 0; from < len(ws); from += listChunk {
		f.mu.Lock()
		now := time.Now()
		for i := from; i < min(from+listChunk, len(ws)); i++ {
			out[i] = f.viewLocked(ws[i], now, queued[ws[i].id])
		}
		f.mu.Unlock()
	}
	return out
}

// queuedByWorker shares out the requests waiting in o's queues among the
// workers that may serve them: a pinned request is its worker's; any
// other is spread over the ready workers with its model in proportion to
// their slots for it (largest remainders first, so the shares add up to
// the queue), so a model only one worker serves shows its whole queue on
// that worker. Called with the fleet's lock held.
func queuedByWorker(o *org) map[string]int {
	out := map[string]int{}
	for model, q := range o.queues {
		unpinned := 0
		for e := q.l.Front(); e != nil; e = e.Next() {
			if p := e.Value.(*waiter).need.Pin; p != "" {
				out[p]++
			} else {
				unpinned++
			}
		}
		ix := o.models[model]
		if unpinned == 0 || ix == nil {
			continue
		}
		type share struct {
			id          string
			slots, rest int
		}
		var shares []share
		seen := map[*worker]bool{}
		total := 0
		for _, e := range ix.ready {
			if seen[e.w] {
				continue
			}
			seen[e.w] = true
			n := max(e.w.slots(model), 1)
			shares = append(shares, share{id: e.w.id, slots: n})
			total += n
		}
		if total == 0 {
			continue
		}
		given := 0
		for i := range shares {
			sh := &shares[i]
			whole := unpinned * sh.slots / total
			sh.rest = unpinned*sh.slots - whole*total
			out[sh.id] += whole
			given += whole
		}
		slices.SortStableFunc(shares, func(a, b share) int { return cmp.Or(b.rest-a.rest, cmp.Compare(a.id, b.id)) })
		for i := 0; given < unpinned; i++ {
			out[shares[i%len(shares)].id]++
			given++
		}
	}
	return out
}

func (f *Fleet) viewLocked(w *worker, now time.Time, queued int) api.Worker {
	v := api.Worker{
		WorkerID: w.id, WorkerName: w.name, Status: f.statusLocked(w, now), Version: w.version,
		Models: w.models, ActiveTasks: w.active, QueueDepth: queued + w.heartbeat.QueueDepth,
		MaxConcurrent: w.maxConcurrent, LastSeenSecondsAgo: int(now.Sub(w.lastSeen) / time.Second),
		Draining: w.draining && w.offlineSince.IsZero(), Engines: w.engines, Features: w.features,
		ApprovalPending: w.pending,
		GPUs:            w.heartbeat.GPUs, GPUCount: len(w.heartbeat.GPUs),
	}
	if v.Models == nil {
		v.Models = []api.Model{}
	}
	if v.GPUs == nil {
		v.GPUs = []api.GPU{}
	}
	if d := w.heartbeat.DriverVersion; d != "" {
		v.DriverVersion = &d
	}
	for _, e := range w.engines {
		v.Simulated = v.Simulated || e.Simulated
	}
	if !w.offlineSince.IsZero() {
		t := w.offlineSince.UTC()
		v.OfflineSince = &t
	} else {
		t := w.connectedAt.UTC()
		v.ConnectedAt = &t
		if !w.droppedAt.IsZero() {
			d := w.droppedAt.UTC()
			v.LinkDownSince = &d
		}
		// An offline worker reports no power: its last reading is not
		// live. A connected one's reading carries its own time (at).
		v.Power = w.heartbeat.Power
	}
	return v
}

// WorkerPower is a connected worker's latest power reading.
type WorkerPower struct {
	OrgID, WorkerID, WorkerName string
	Power                       api.LivePower
}

// LivePower lists the latest power reading of every connected worker that
// reports one, in every organisation: for the metrics endpoint.
func (f *Fleet) LivePower() []WorkerPower {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []WorkerPower
	for _, o := range f.orgs {
		for _, w := range o.workers {
			if w.offlineSince.IsZero() && w.heartbeat.Power != nil {
				out = append(out, WorkerPower{OrgID: o.id, WorkerID: w.id, WorkerName: w.name, Power: *w.heartbeat.Power})
			}
		}
	}
	return out
}

// WorkerLimit is how many requests for a model a connected worker takes at
// once now: its max_concurrent, or fewer while its latency says requests
// are queueing in its engine.
type WorkerLimit struct {
	OrgID, WorkerID, WorkerName, Model string
	Limit                              int
}

// ConcurrencyLimits lists the limit of every model of every connected
// worker, in every organisation: for the metrics endpoint.
func (f *Fleet) ConcurrencyLimits() []WorkerLimit {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []WorkerLimit
	for _, o := range f.orgs {
		for _, w := range o.workers {
			if !w.offlineSince.IsZero() {
				continue
			}
			for _, m := range w.models {
				out = append(out, WorkerLimit{OrgID: o.id, WorkerID: w.id, WorkerName: w.name, Model: m.ID, Limit: w.slots(m.ID)})
			}
		}
	}
	return out
}

// Models lists the models the organisation's connected workers serve,
// once each, with the metadata of the first worker (by name) serving it.
func (f *Fleet) Models(orgID string) []api.Model {
	f.mu.Lock()
	out := []api.Model{}
	if o := f.orgs[orgID]; o != nil {
		for _, ix := range o.models {
			if m := ix.describe(); m != nil {
				c := *m
				c.Since = ix.since
				c.ContextWindow = ix.widestWindow()
				if c.Incomplete != nil && ix.installed() {
					c.Incomplete = nil
				}
				out = append(out, c)
			}
		}
	}
	f.mu.Unlock()
	slices.SortFunc(out, func(a, b api.Model) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Model returns the metadata of a model the organisation's connected
// workers serve, or nil: the first worker's, by name, with the widest
// context window of them, so that a prompt is refused only when no worker
// could take it. It is called for every request, so it looks the model up
// without building any listing.
func (f *Fleet) Model(orgID, id string) *api.Model { return f.ModelFor(orgID, id, "") }

// ModelFor is Model for a request pinned to worker pin: that worker's
// metadata when it lists the model, since no other will serve it.
func (f *Fleet) ModelFor(orgID, id, pin string) *api.Model {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.orgs[orgID]
	if o == nil || o.models[id] == nil {
		return nil
	}
	ix := o.models[id]
	m, window := ix.describe(), 0
	if w := o.workers[pin]; pin != "" && w != nil && w.model(id) != nil {
		m = w.model(id)
		window = m.ContextWindow
	} else if m != nil {
		window = ix.widestWindow()
	}
	if m == nil {
		return nil
	}
	c := *m
	c.Since, c.ContextWindow = ix.since, window
	return &c
}

// widestWindow is the widest context window of the model's online
// workers; 0, unknown, when one of them does not know its own.
func (ix *modelIndex) widestWindow() int {
	widest := 0
	for _, w := range ix.listed {
		if !w.offlineSince.IsZero() || w.pending {
			continue
		}
		m := w.model(ix.model)
		if m.ContextWindow <= 0 {
			return 0
		}
		widest = max(widest, m.ContextWindow)
	}
	return widest
}

// installed reports whether an online worker has the model fully
// installed.
func (ix *modelIndex) installed() bool {
	for _, w := range ix.listed {
		if w.offlineSince.IsZero() && !w.pending && w.model(ix.model).Incomplete == nil {
			return true
		}
	}
	return false
}

// describe is the model as the first online worker listing it, by name,
// describes it; nil when none is online. Workers awaiting approval serve
// nothing, so their models are not offered.
func (ix *modelIndex) describe() *api.Model {
	for _, w := range ix.listed {
		if w.offlineSince.IsZero() && !w.pending {
			return w.model(ix.model)
		}
	}
	return nil
}

// KeyHolder is the worker of the organisation holding private-inference
// key keyID, connected or briefly away, for a request of model; "" when
// none does. Workers given one key file hold one key: of those, one that
// is neither draining nor held back from the model is chosen, the
// least loaded. It is called for every sealed request, so it builds no
// listing.
func (f *Fleet) KeyHolder(orgID, keyID, model string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.orgs[orgID]
	if o == nil {
		return ""
	}
	now := time.Now()
	var best, fallback *worker
	for _, w := range o.keys[keyID] {
		if !w.offlineSince.IsZero() {
			continue
		}
		if fallback == nil {
			fallback = w
		}
		if w.draining || w.held(model, now) {
			continue
		}
		if best == nil || w.active < best.active {
			best = w
		}
	}
	switch {
	case best != nil:
		return best.id
	case fallback != nil:
		return fallback.id
	}
	return ""
}

// PrivateKey is a connected worker's private-inference key and the models
// it serves that accept encrypted requests.
type PrivateKey struct {
	WorkerID, WorkerName string
	Key                  api.E2EKey
	Models               []string
}

// PrivateKeys lists the keys of the organisation's workers that are
// connected or briefly away (a request sealed to one waits for it), by
// worker name.
func (f *Fleet) PrivateKeys(orgID string) []PrivateKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.orgs[orgID]
	if o == nil {
		return []PrivateKey{}
	}
	out := []PrivateKey{}
	for _, w := range o.workers {
		if w.e2eKey == nil || !w.offlineSince.IsZero() {
			continue
		}
		if w.pending {
			continue
		}
		k := PrivateKey{WorkerID: w.id, WorkerName: w.name, Key: *w.e2eKey, Models: []string{}}
		for _, m := range w.models {
			if m.Has(api.CapChat) || m.Has(api.CapEmbeddings) || m.Has(api.CapRerank) || m.Has(api.CapImageGeneration) ||
				m.Has(api.CapSpeech) || m.Has(api.CapTranscription) {
				k.Models = append(k.Models, m.ID)
			}
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b PrivateKey) int { return cmp.Compare(a.WorkerName, b.WorkerName) })
	return out
}
