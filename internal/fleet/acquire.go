package fleet

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

// Need is what a request needs from a worker.
type Need struct {
	OrgID      string
	Model      string
	Capability string // api.CapChat, api.CapEmbeddings, ...
	// Pin restricts the request to one worker (X-Svc-Worker-Id).
	Pin string
	// Affinity names the conversation, so later turns go where earlier ones
	// went while that worker has a free slot.
	Affinity string
	// Exclude lists workers that already failed this request.
	Exclude []string
	// Hold overrides how long to wait for a slot.
	Hold time.Duration
	// Feature is a protocol feature the worker must have (a moderation
	// check needs a release that moderates).
	Feature string
	// Moderator is a moderation model the worker must also serve: content
	// filtering checks a chat on the worker that answers it.
	Moderator string
	// Whole asks for a worker with every file of the model installed:
	// image generation, and a chat with an image, need what a model
	// missing a file (its VAE, its vision projector) cannot do.
	Whole bool
	// PromptTokens is a low estimate of the prompt's tokens: a worker
	// whose context window of the model is known and narrower cannot take
	// it, however wide another worker's is. 0 asks nothing.
	PromptTokens int
	// PromptField is the request's field that holds the prompt, for the
	// error of one too long: "messages" when empty, "prompt" for a text
	// completion.
	PromptField string
}

// fits reports whether w can take need apart from load and health: the
// model with the capability, installed whole when need asks, the feature,
// and the moderator.
func (w *worker) fits(need *Need) bool {
	return w.serves(need.Model, need.Capability) && w.whole(need) && w.equipped(need)
}

// whole reports whether w has need's model installed whole, or need
// does not ask that it be.
func (w *worker) whole(need *Need) bool {
	if !need.Whole {
		return true
	}
	m := w.model(need.Model)
	return m != nil && m.Incomplete == nil
}

// equipped reports whether w has what need asks beyond the model itself.
func (w *worker) equipped(need *Need) bool {
	return (need.Feature == "" || slices.Contains(w.features, need.Feature)) &&
		(need.Moderator == "" || w.serves(need.Moderator, api.CapModeration)) && w.roomy(need)
}

// roomy reports whether w's context window of need's model takes its
// prompt, or is not known.
func (w *worker) roomy(need *Need) bool {
	if need.PromptTokens <= 0 {
		return true
	}
	m := w.model(need.Model)
	return m == nil || m.ContextWindow <= 0 || m.ContextWindow >= need.PromptTokens
}

// WorkerInfo names the worker a lease is on.
type WorkerInfo struct {
	ID      string
	Name    string
	Version string
}

// Lease is one slot on one worker, held for one request.
type Lease struct {
	Worker WorkerInfo
	// QueueWait is how long the request waited for the slot.
	QueueWait time.Duration

	f     *Fleet
	w     *worker
	sess  *link.Session
	org   *org
	model string
	start time.Time
	// drops is the worker's link drops when the request began.
	drops uint64
	// streamed is set once the request's output came as a stream.
	streamed atomic.Bool
	late     <-chan struct{}
	once     sync.Once
}

// Streamed notes that the request's output comes as a stream: its
// latency is judged against other streams', not unstreamed answers'.
func (l *Lease) Streamed() { l.streamed.Store(true) }

// Late is closed once the worker's heartbeats are late (Config.StaleAfter):
// its process may be frozen. A request that has had no output yet may
// then move to another worker.
func (l *Lease) Late() <-chan struct{} { return l.late }

// Open starts the request's stream on the worker.
func (l *Lease) Open(ctx context.Context, header, body []byte) (*link.Stream, error) {
	return l.sess.Open(ctx, header, body)
}

// OpenReader starts the request with a body streamed from body, at the
// pace the worker reads it.
func (l *Lease) OpenReader(ctx context.Context, header []byte, body io.Reader) (*link.Stream, error) {
	return l.sess.OpenReader(ctx, header, body)
}

// OpenDuplex starts a request whose body is sent as it comes while its
// answer is read (see link.Session.OpenDuplex).
func (l *Lease) OpenDuplex(ctx context.Context, header []byte) (*link.Stream, error) {
	return l.sess.OpenDuplex(ctx, header)
}

// Loaded records that the request's engine loaded its model first, a
// cold start: a model_loaded event of the worker, with the load's time
// when the worker measured it.
func (l *Lease) Loaded(loadMs *float64) {
	meta := map[string]any{"model": l.model}
	if loadMs != nil {
		meta["model_load_ms"] = *loadMs
	}
	f := l.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.event(l.w, api.EventModelLoaded, l.model+" loaded for a request", meta, false, time.Now())
}

// Outcome is how a leased request went, for the worker's health.
type Outcome int

const (
	// Succeeded resets the worker's failure count.
	Succeeded Outcome = iota
	// Failed counts toward holding the worker back.
	Failed
	// Neutral says nothing about the worker (the client gave up, or sent a
	// request no worker could serve).
	Neutral
)

// Release frees the slot; the next waiting request may take it.
func (l *Lease) Release(o Outcome) {
	l.once.Do(func() {
		f := l.f
		f.mu.Lock()
		defer f.mu.Unlock()
		now := time.Now()
		w := l.w
		// A lease of a session that has been replaced (the worker
		// restarted) says nothing about the new one: its slot was not
		// counted there, and its failure, the old process dying, must not
		// hold back the process that replaced it.
		if w.sess != l.sess {
			o = Neutral
		} else if w.active > 0 {
			w.active--
		}
		switch o {
		case Succeeded:
			if h := w.health[l.model]; h != nil {
				h.failures = 0
			}
			d := now.Sub(l.start)
			class := unstreamed
			if l.streamed.Load() {
				class = streamed
			}
			// A request that lived through a drop of the link took the
			// link's outage as well as the engine's time: it says nothing
			// of the engine's queueing, and would teach the limit to
			// refuse what the engine can take.
			if w.drops == l.drops {
				f.observeLocked(w, l.model, class, d, now)
			}
			if avg, ok := l.org.service[l.model]; ok {
				l.org.service[l.model] = (4*avg + d) / 5
			} else {
				l.org.service[l.model] = d
			}
		case Failed:
			h := w.health[l.model]
			if h == nil {
				if w.health == nil {
					w.health = map[string]*modelHealth{}
				}
				h = &modelHealth{}
				w.health[l.model] = h
			}
			if now.Sub(h.last) > failureMemory*f.cfg.HoldBack {
				h.failures = 0
			}
			if h.failures == 0 {
				h.since = now
			}
			h.last = now
			h.failures++
			if h.failures >= f.cfg.FailuresBeforeUnhealthy && now.Sub(h.since) >= failureSpan {
				h.heldUntil = now.Add(f.cfg.HoldBack)
				// After the hold-back one more failure holds it back
				// again, once failures have gone on for the span since
				// it ended with no success between.
				h.failures, h.since = f.cfg.FailuresBeforeUnhealthy-1, h.heldUntil
				f.reindexLocked(l.org, w, now)
			}
		}
		f.reorderLocked(w)
		f.noteStatusLocked(w, now)
		f.dispatchLocked(l.org, now)
	})
}

type waiter struct {
	need  Need
	start time.Time
	grant chan *Lease
	elem  *list.Element
	// hold ends the wait; kept stopped between waits.
	hold *time.Timer
}

// newWaiter returns a waiter for need, from the pool when one is there,
// its timer running for hold.
func (f *Fleet) newWaiter(need *Need, now time.Time, hold time.Duration) *waiter {
	wt, _ := f.waiters.Get().(*waiter)
	if wt == nil {
		wt = &waiter{grant: make(chan *Lease, 1), hold: time.NewTimer(hold)}
	} else {
		wt.hold.Reset(hold)
	}
	wt.need, wt.start = *need, now
	return wt
}

// freeWaiter returns wt to the pool. Only once Acquire has it back: out
// of its queue, its grant taken and its timer stopped, nothing else holds
// it.
func (f *Fleet) freeWaiter(wt *waiter) {
	wt.need, wt.elem = Need{}, nil
	f.waiters.Put(wt)
}

// queue holds the requests waiting for one model's slots, oldest first.
type queue struct {
	l list.List
	// refusedAt is when the queue last turned a request away: its backlog
	// had outgrown the hold. For refusedMemory after that it is in
	// overload, and holds new requests to a short wait (standingWait).
	// A queue that is merely long is not overload: a fixed number of
	// clients each sending its next request when the last is answered
	// keeps a queue for as long as they run, and refusing them would only
	// have them ask again at once.
	refusedAt time.Time
}

const (
	// refusedMemory is how long a queue stays in overload after it last
	// refused a request. Answers come back in bursts, and a burst that
	// empties the queue for a moment is not the end of the overload.
	refusedMemory = time.Second
	// standingWait bounds the wait that a queue in overload lets a new
	// request in for, unless two slots take longer to free up: that many
	// waiting keep the slots busy, and more would only add latency to all
	// of them, and serve no more.
	standingWait = 5 * time.Millisecond
)

// overloaded reports whether q has refused a request within refusedMemory.
func (q *queue) overloaded(now time.Time) bool {
	return now.Sub(q.refusedAt) < refusedMemory
}

func (o *org) queue(model string) *queue {
	q := o.queues[model]
	if q == nil {
		q = &queue{}
		o.queues[model] = q
	}
	return q
}

// ErrTriedAll means every worker that could serve the request is among
// those it already failed on.
var ErrTriedAll = errors.New("every worker serving the model has been tried")

// Acquire finds a worker for need and reserves a slot on it, waiting up to
// the hold for one to free up. Errors are *api.Error: 404 for a model or
// pinned worker that does not exist, 503 when none is online, 429 when
// every slot stayed busy. Just after the start of a gateway that replaced
// another, a request that the other's workers, not back yet, would serve
// waits for them first (Config.Returning).
func (f *Fleet) Acquire(ctx context.Context, need Need) (*Lease, error) {
	if err := f.awaitReturning(ctx, &need); err != nil {
		return nil, err
	}
	f.mu.Lock()
	now := time.Now()
	o := f.org(need.OrgID)
	f.unholdLocked(o, now)
	// A worker that takes the request is one checkLocked finds no fault
	// with, so it looks for faults only when none does.
	if l := f.tryLocked(o, &need, now, now); l != nil {
		f.mu.Unlock()
		return l, nil
	}
	if err := f.checkLocked(o, &need, now, false); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	hold := f.holdFor(&need)
	q := o.queue(need.Model)
	if q.l.Len() >= f.cfg.MaxQueue || f.backedUpLocked(o, &need, q, hold, now) {
		q.refusedAt = now
		err := f.capacityLocked(o, &need, q.l.Len())
		f.mu.Unlock()
		return nil, err
	}
	wt := f.newWaiter(&need, now, hold)
	wt.elem = q.l.PushBack(wt)
	f.queued.Add(1)
	f.mu.Unlock()

	defer f.freeWaiter(wt)
	defer wt.hold.Stop()
	select {
	case l := <-wt.grant:
		return l, nil
	case <-wt.hold.C:
	case <-ctx.Done():
	}
	f.mu.Lock()
	if wt.elem != nil {
		q.l.Remove(wt.elem)
		f.queued.Add(-1)
		wt.elem = nil
		now := time.Now()
		// The workers may have gone while the request waited: then it is
		// the 503 a new request would get, not a capacity 429.
		err := f.checkLocked(o, &need, now, true)
		if err == nil {
			if ctx.Err() == nil {
				q.refusedAt = now
			}
			err = f.capacityLocked(o, &need, q.l.Len())
		}
		f.mu.Unlock()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	f.mu.Unlock()
	// A slot was granted as we gave up: take it, or hand it back.
	l := <-wt.grant
	if ctx.Err() != nil {
		l.Release(Neutral)
		return nil, ctx.Err()
	}
	return l, nil
}

// Queued reports whether any request waits for a slot, in any queue;
// without the lock, so a caller may skip Admit's work when none does.
func (f *Fleet) Queued() bool { return f.queued.Load() > 0 }

// Admit is the refusal Acquire would give need at once for its model's
// backed-up queue, answered without queueing it, so that a request can be
// turned away before it is parsed: under overload a refusal should cost
// next to nothing. It errs toward letting a request through to Acquire and
// its other answers (a 404, a 503): nil unless the queue is backed up (or
// full) and no worker that could take need has a free slot. A pinned
// request waits for its one worker, which Admit leaves to Acquire.
func (f *Fleet) Admit(need Need) error {
	if need.Pin != "" {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.orgs[need.OrgID]
	if o == nil {
		return nil
	}
	q := o.queues[need.Model]
	if q == nil || q.l.Len() == 0 {
		return nil
	}
	now := time.Now()
	f.unholdLocked(o, now)
	usable := false
	if ix := o.models[need.Model]; ix != nil {
		w := ix.seek(&f.seek, func(w *worker) bool { return f.eligibleLocked(w, &need, now) })
		if w != nil && w.active < w.slots(need.Model) {
			return nil
		}
		usable = w != nil
	}
	hold := f.holdFor(&need)
	waiting := q.l.Len()
	if !usable || waiting < f.cfg.MaxQueue && !f.backedUpLocked(o, &need, q, hold, now) {
		return nil
	}
	q.refusedAt = now
	return f.capacityLocked(o, &need, waiting)
}

// holdFor is how long need waits for a slot before its 429.
func (f *Fleet) holdFor(need *Need) time.Duration {
	if need.Hold > 0 {
		return need.Hold
	}
	return f.cfg.Hold
}

// slotsLocked counts the slots of the workers that could take need, held
// back ones aside.
func (f *Fleet) slotsLocked(o *org, need *Need) int {
	if need.Pin != "" {
		if w := o.workers[need.Pin]; w != nil && w.attached && !w.draining && !w.pending && w.fits(need) {
			return w.slots(need.Model)
		}
		return 0
	}
	ix := o.models[need.Model]
	switch {
	case ix == nil:
		return 0
	case need.Feature == "" && need.Moderator == "" && !need.Whole:
		return ix.slots[need.Capability]
	}
	slots := 0
	for _, e := range ix.ready {
		if e.w.fits(need) {
			slots += e.c.max
		}
	}
	return slots
}

// backedUpLocked reports whether the requests already waiting in q would
// not all be served within hold at the rate need's slots serve: a request
// queued behind them would wait out the hold for nothing, and every
// request held adds to the latency of those ahead. A brief spike, with a
// queue that drains within the hold, is still waited out. Once a queue
// has refused a request it is held to a short wait instead (standingWait,
// or the time two slots take to free up): under sustained overload a
// longer queue serves no more requests, it only makes every one of them
// later.
func (f *Fleet) backedUpLocked(o *org, need *Need, q *queue, hold time.Duration, now time.Time) bool {
	avg := o.service[need.Model]
	waiting := q.l.Len()
	if waiting == 0 || avg <= 0 {
		return false
	}
	slots := f.slotsLocked(o, need)
	if slots == 0 {
		// No worker is ready to judge the backlog by: the requests wait
		// for one that is expected back (its link in its grace, or the
		// workers of a gateway this one replaced), within the hold.
		return false
	}
	perSlot := time.Duration(float64(avg) / float64(slots))
	if q.overloaded(now) {
		hold = min(hold, max(standingWait, 2*perSlot))
	}
	return time.Duration(waiting)*perSlot > hold
}

// capacityLocked is the 429 for a request that found every slot busy.
func (f *Fleet) capacityLocked(o *org, need *Need, waiting int) error {
	ra := retryAfter(waiting, f.slotsLocked(o, need), o.service[need.Model])
	return &api.Error{
		Kind: api.KindCapacity, Code: api.CodeCapacityExceeded,
		// The wait is in the message as well as in Retry-After: a stream's
		// error event has no header, and carries it as retry_after.
		Message:    "Every worker serving " + need.Model + " is busy; retry in " + strconv.Itoa(int(ra/time.Second)) + " s",
		RetryAfter: ra, QueueDepth: waiting,
	}
}

// tryLocked grants a slot now if a worker has one: the one pick would
// choose among the eligible workers.
func (f *Fleet) tryLocked(o *org, need *Need, start, now time.Time) *Lease {
	w := f.chooseLocked(o, need, now)
	if w == nil {
		return nil
	}
	w.active++
	w.lastAssigned = now
	f.reorderLocked(w)
	if need.Affinity != "" {
		o.affinity.put(need.Affinity, w.id)
	}
	return &Lease{
		Worker:    WorkerInfo{ID: w.id, Name: w.name, Version: w.version},
		QueueWait: now.Sub(start),
		f:         f, w: w, sess: w.sess, org: o, model: need.Model, start: now, late: w.late, drops: w.drops,
	}
}

// chooseLocked is the worker with a free slot that need goes to, or nil:
// the pinned worker, the conversation's worker, or the first eligible one
// of the model's ready heap, whose order is pick's.
func (f *Fleet) chooseLocked(o *org, need *Need, now time.Time) *worker {
	free := func(w *worker) bool {
		return w != nil && f.eligibleLocked(w, need, now) && w.active < w.slots(need.Model)
	}
	affinity, _ := o.affinity.get(need.Affinity)
	if need.Pin != "" {
		if w := o.workers[need.Pin]; free(w) {
			return w
		}
		return nil
	}
	// Workers whose heartbeats are late are passed over while one that is
	// on time could serve, busy or not: they may be frozen.
	if w := o.workers[affinity]; affinity != "" && free(w) && !f.lateLocked(w, now) {
		return w
	}
	ix := o.models[need.Model]
	if ix == nil {
		return nil
	}
	// Past the first full worker every one is full.
	full := func(w *worker) bool { return w.active >= w.slots(need.Model) }
	if w := ix.seek(&f.seek, func(w *worker) bool {
		return full(w) || f.eligibleLocked(w, need, now) && !f.lateLocked(w, now)
	}); free(w) {
		return w
	}
	w := ix.seek(&f.seek, func(w *worker) bool { return full(w) || f.eligibleLocked(w, need, now) })
	if !free(w) {
		return nil
	}
	// Only late workers have room: one is taken only when no worker on
	// time could serve, which is rare enough to look at them all.
	for _, e := range ix.ready {
		if f.eligibleLocked(e.w, need, now) && !f.lateLocked(e.w, now) {
			return nil
		}
	}
	return w
}

// eligibleLocked is whether w may take need now, its load aside: the one
// test of a worker that routing makes. The model's index only narrows
// which workers it is asked about.
func (f *Fleet) eligibleLocked(w *worker, need *Need, now time.Time) bool {
	if need.Pin != "" && w.id != need.Pin {
		return false
	}
	return f.usableLocked(w, now) && w.fits(need) && !w.held(need.Model, now) && !w.stalls(need.Model) && !w.stalls(need.Moderator) &&
		!slices.Contains(need.Exclude, w.id)
}

func (w *worker) model(id string) *api.Model {
	if i, ok := w.byID[id]; ok {
		return &w.models[i]
	}
	return nil
}

// setModels makes ms the models w lists; a model listed twice is its
// first listing.
func (w *worker) setModels(ms []api.Model) {
	w.models = ms
	w.byID = make(map[string]int, len(ms))
	for i := range ms {
		if _, ok := w.byID[ms[i].ID]; !ok {
			w.byID[ms[i].ID] = i
		}
	}
}

func (w *worker) serves(model, capability string) bool {
	m := w.model(model)
	return m != nil && (capability == "" || m.Has(capability))
}

// dispatchLocked hands free slots to waiting requests, oldest first
// within each model's queue.
func (f *Fleet) dispatchLocked(o *org, now time.Time) {
	f.unholdLocked(o, now)
	for _, q := range o.queues {
		for e := q.l.Front(); e != nil; {
			next := e.Next()
			wt := e.Value.(*waiter)
			if l := f.tryLocked(o, &wt.need, wt.start, now); l != nil {
				q.l.Remove(e)
				f.queued.Add(-1)
				wt.elem = nil
				wt.grant <- l
			} else if wt.need.Pin == "" && len(wt.need.Exclude) == 0 {
				// Later waiters for this model want the same workers.
				break
			}
			e = next
		}
	}
}

// checkLocked finds errors known before any waiting: a pinned worker that
// does not exist or cannot serve, a model no worker has, no worker online.
// A worker whose link dropped moments ago is in its grace period and
// expected back: a request waits for it as for a busy slot, and only once
// it has waited (waited) does that worker count as gone.
func (f *Fleet) checkLocked(o *org, need *Need, now time.Time, waited bool) error {
	if need.Pin != "" {
		return f.checkPinLocked(o, need, now, waited)
	}
	var known, online, servable, untried, returning, held, unequipped, narrow, awaiting bool
	var wrongKind *api.Model
	var partial *worker
	var back time.Time
	var listed []*worker
	if ix := o.models[need.Model]; ix != nil {
		listed = ix.listed
	}
	for _, w := range listed {
		if untried || returning {
			// Nothing later changes the answer.
			return nil
		}
		online = online || w.offlineSince.IsZero()
		m := w.model(need.Model)
		known = true
		if need.Capability != "" && !m.Has(need.Capability) {
			wrongKind = m
			continue
		}
		if w.draining || !w.offlineSince.IsZero() {
			continue
		}
		if w.pending {
			awaiting = true
			continue
		}
		if !w.attached {
			returning = returning || !waited && w.equipped(need) && w.whole(need) && !now.Before(f.heldUntilLocked(w, need, now)) && !slices.Contains(need.Exclude, w.id)
			continue
		}
		if !w.roomy(need) {
			narrow = true
			continue
		}
		if !w.equipped(need) {
			unequipped = true
			continue
		}
		if !w.whole(need) {
			partial = w
			continue
		}
		if until := f.heldUntilLocked(w, need, now); now.Before(until) {
			held = true
			if back.IsZero() || until.Before(back) {
				back = until
			}
			continue
		}
		servable = true
		untried = untried || !slices.Contains(need.Exclude, w.id)
	}
	online = online || o.anyOnline()
	switch {
	case untried || returning:
		return nil
	case servable:
		return ErrTriedAll
	case wrongKind != nil:
		return WrongEndpoint(wrongKind, need.Capability)
	case unequipped:
		return unequippedError(need)
	case narrow:
		return narrowError(need)
	case held:
		return &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkersUnhealthy, RetryAfter: back.Sub(now),
			Message: "Every worker serving " + need.Model + " failed its recent requests of it and is held back from it; retry shortly"}
	case partial != nil:
		return incompleteError(partial, need)
	case awaiting:
		return &api.Error{Kind: api.KindUnavailable, Code: api.CodeApprovalPending, RetryAfter: approvalRetry,
			Message: "No connected worker can serve " + need.Model + " right now; the workers that have it await the organisation's approval (svc admin workers approve NAME)"}
	case !online:
		return &api.Error{Kind: api.KindUnavailable, Code: api.CodeNoWorkerOnline, RetryAfter: 5 * time.Second,
			Message: "No worker is online for this organisation; start one with `svc worker`"}
	case known:
		return &api.Error{Kind: api.KindUnavailable, Code: api.CodeNoWorkerForModel, RetryAfter: 5 * time.Second,
			Message: "No connected worker can serve " + need.Model + " right now; the workers that have it are offline, reconnecting or shutting down"}
	default:
		return &api.Error{Kind: api.KindNotFound, Code: api.CodeModelNotFound, Param: "model",
			Message: "Model " + api.ShortModelID(need.Model) + " is not installed on any connected worker of this organisation"}
	}
}

func (f *Fleet) checkPinLocked(o *org, need *Need, now time.Time, waited bool) error {
	w := o.workers[need.Pin]
	switch {
	case w == nil:
		return &api.Error{Kind: api.KindNotFound, Code: api.CodeWorkerNotFound,
			Message: "No worker " + need.Pin + " in this organisation (X-Svc-Worker-Id)"}
	case !w.offlineSince.IsZero() || !w.attached && waited:
		return &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkerOffline, RetryAfter: 5 * time.Second,
			Message: "Worker " + w.name + " (" + w.id + ") is not connected"}
	case w.draining:
		return &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkerDraining, RetryAfter: 5 * time.Second,
			Message: "Worker " + w.name + " (" + w.id + ") is shutting down and takes no new requests"}
	case w.pending:
		return &api.Error{Kind: api.KindUnavailable, Code: api.CodeApprovalPending, RetryAfter: approvalRetry,
			Message: "Worker " + w.name + " (" + w.id + ") awaits the organisation's approval (svc admin workers approve NAME)"}
	}
	m := w.model(need.Model)
	switch {
	case m == nil:
		return &api.Error{Kind: api.KindNotFound, Code: api.CodeModelNotFound, Param: "model",
			Message: "Worker " + w.name + " (" + w.id + ") does not serve model " + api.ShortModelID(need.Model)}
	case need.Capability != "" && !m.Has(need.Capability):
		return WrongEndpoint(m, need.Capability)
	case !w.whole(need):
		return incompleteError(w, need)
	case !w.roomy(need):
		return narrowError(need)
	case !w.equipped(need):
		return unequippedError(need)
	// Waiting would not help a pinned request whose worker already
	// failed it or is held back: it would only end in a 429 that blames
	// capacity.
	case slices.Contains(need.Exclude, w.id):
		return ErrTriedAll
	case w.held(need.Model, now):
		return &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkersUnhealthy, RetryAfter: w.heldUntil(need.Model).Sub(now),
			Message: "Worker " + w.name + " (" + w.id + ") failed its recent requests of " + need.Model + " and is held back from it; retry shortly"}
	case w.stalls(need.Model) || w.stalls(need.Moderator):
		return &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkersUnhealthy, RetryAfter: stalledRetry,
			Message: "The engine of worker " + w.name + " (" + w.id + ") serving " + need.Model + " stopped answering; retry shortly"}
	}
	return nil
}

// approvalRetry is the Retry-After of a request whose only workers await
// approval: a person approves them, which takes a while.
const approvalRetry = 30 * time.Second

// stalledRetry is the Retry-After of a request whose only workers have
// an engine that stopped answering: the worker probes it every few
// seconds.
const stalledRetry = 5 * time.Second

// heldUntilLocked is when w may take need again: the end of its hold-back,
// or, while the engine serving need stalls, a little after now.
func (f *Fleet) heldUntilLocked(w *worker, need *Need, now time.Time) time.Time {
	if w.stalls(need.Model) || w.stalls(need.Moderator) {
		return later(w.heldUntil(need.Model), now.Add(stalledRetry))
	}
	return w.heldUntil(need.Model)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// unequippedError is the 409 for a request whose model is on connected
// workers none of which has the moderation it needs too. The only needs
// beyond a model are moderation's, so it answers in moderation's terms.
func unequippedError(need *Need) error {
	msg := "The workers serving " + need.Model + " are too old to moderate; update them"
	if need.Moderator != "" {
		msg = "No online worker serves both " + need.Model + " and the moderation model " + need.Moderator +
			" that content filtering checks it with; install both on one worker, or change the organisation's moderation_model"
	}
	return &api.Error{Kind: api.KindConflict, Type: api.TypeConflict, Code: api.CodeModerationUnavailable,
		CodeHeader: true, Message: msg}
}

// narrowError is the 400 for a prompt no online worker's context window
// of the model can take: one wide enough went away since the gateway
// judged it, or the request is pinned to a narrower one.
func narrowError(need *Need) error {
	field, what := "messages", "the conversation"
	if need.PromptField != "" && need.PromptField != field {
		field, what = need.PromptField, "the prompt"
	}
	return &api.Error{Kind: api.KindInvalidRequest, Type: api.TypeContextLengthExceeded, Code: api.TypeContextLengthExceeded, Param: field,
		Message: fmt.Sprintf("The prompt is at least about %d tokens, more than the context window of %s on the workers that could serve it now; shorten %s",
			need.PromptTokens, need.Model, what)}
}

// incompleteError is the 409 for a request that needs the whole model
// when the workers serving it (w, one of them) have it only in part.
func incompleteError(w *worker, need *Need) error {
	what := w.model(need.Model).Incomplete.Describe()
	return &api.Error{Kind: api.KindConflict, Type: api.TypeConflict, Code: api.CodeModelIncomplete, Param: "model",
		Message: "Model " + need.Model + " is not fully installed on worker " + w.name + " (" + w.id + "): " + what +
			"; retry once the install finishes"}
}

// endpoint is the endpoint serving capability c, and what c is called in
// a sentence; path is empty for a capability no endpoint serves alone.
func endpoint(c string) (path, noun string) {
	switch c {
	case api.CapChat:
		return "/v1/chat/completions", "chat"
	case api.CapEmbeddings:
		return "/v1/embeddings", "embeddings"
	case api.CapModeration:
		return "/v1/moderations", "moderation"
	case api.CapTranscription:
		return "/v1/audio/transcriptions", "transcription"
	case api.CapSpeech:
		return "/v1/audio/speech", "speech"
	case api.CapRerank:
		return "/v1/rerank", "reranking"
	case api.CapImageGeneration:
		return "/v1/images/generations", "image generation"
	}
	return "", c
}

// WrongEndpoint is the 404 for a model that does not do what the endpoint
// asks, naming the endpoint that fits.
func WrongEndpoint(m *api.Model, want string) error {
	_, noun := endpoint(want)
	msg := "Model " + m.ID + " does not do " + noun
	// The model's most particular capability names its endpoint: a guard
	// chats, but is a moderation model.
	hint := ""
	for _, c := range m.Capabilities {
		if path, noun := endpoint(c); path != "" && (hint == "" || c != api.CapChat) {
			hint = "; it is " + indefinite(noun) + " model: use " + path
			if c != api.CapChat {
				break
			}
		}
	}
	return &api.Error{Kind: api.KindNotFound, Code: api.CodeWrongEndpoint, Param: "model", Message: msg + hint}
}

// indefinite is word with its indefinite article.
func indefinite(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}

// lru remembers which worker served a conversation.
type lru struct {
	max   int
	order list.List
	items map[string]*list.Element
}

type lruItem struct{ key, val string }

func newLRU(max int) *lru { return &lru{max: max, items: map[string]*list.Element{}} }

func (c *lru) get(key string) (string, bool) {
	if key == "" {
		return "", false
	}
	e, ok := c.items[key]
	if !ok {
		return "", false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruItem).val, true
}

func (c *lru) put(key, val string) {
	if e, ok := c.items[key]; ok {
		e.Value.(*lruItem).val = val
		c.order.MoveToFront(e)
		return
	}
	c.items[key] = c.order.PushFront(&lruItem{key, val})
	if c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*lruItem).key)
	}
}
