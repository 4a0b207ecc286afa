package fleet

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// returning is the start grace of a gateway that replaced another: the
// workers the other had reconnect by themselves within moments, and a
// request that finds none of them back yet waits for them rather than be
// told that no worker is online.
type returning struct {
	started, until time.Time
	// over is set once the grace has ended for every organisation, so
	// that requests after it do not take the fleet lock for it.
	over atomic.Bool

	// Under Fleet.mu:
	// missing holds, by organisation, the workers not back yet.
	missing map[string]map[string]bool
	// back is closed, and replaced, when a worker of the organisation
	// connects: the requests waiting for it look again.
	back map[string]chan struct{}
	// settled is set once the workers not back when the grace ended have
	// been handed over for their disconnects (dueReturning).
	settled bool
}

func newReturning(byOrg map[string][]string, grace time.Duration, now time.Time) *returning {
	r := &returning{started: now, until: now.Add(grace), missing: map[string]map[string]bool{}, back: map[string]chan struct{}{}}
	for org, ids := range byOrg {
		if len(ids) == 0 {
			continue
		}
		r.missing[org] = map[string]bool{}
		for _, id := range ids {
			r.missing[org][id] = true
		}
		r.back[org] = make(chan struct{})
	}
	if len(r.missing) == 0 || grace <= 0 {
		r.over.Store(true)
	}
	return r
}

// awaitedLocked is the channel to wait on while orgID still expects
// workers back within the grace; ok is false when it does not.
func (f *Fleet) awaitedLocked(orgID string, now time.Time) (back chan struct{}, ok bool) {
	r := f.returning
	if !now.Before(r.until) {
		r.over.Store(true)
		return nil, false
	}
	back, ok = r.back[orgID]
	return back, ok
}

// returnedLocked notes that worker id of orgID connected, and wakes the
// requests waiting for the organisation's workers to look again.
func (f *Fleet) returnedLocked(orgID, id string) {
	r := f.returning
	if r.over.Load() {
		return
	}
	missing, ok := r.missing[orgID]
	if !ok {
		return
	}
	close(r.back[orgID])
	delete(missing, id)
	if len(missing) > 0 {
		r.back[orgID] = make(chan struct{})
		return
	}
	delete(r.missing, orgID)
	delete(r.back, orgID)
	if len(r.missing) == 0 {
		r.over.Store(true)
	}
}

// dueReturning is, once the start grace has ended, the settlement owed
// for the workers the gateway this one replaced listed (Remembered), each
// that has not connected since: nobody else can record the end of its
// link there. Every listed worker is looked at, not only those expected
// back: one draining at the stop was listed but not expected, and the
// store decides (settleUnreturned). Nil before the grace's end and once
// it has been taken.
func (f *Fleet) dueReturning(now time.Time) *settlement {
	r := f.returning
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.settled || now.Before(r.until) {
		return nil
	}
	r.settled = true
	r.over.Store(true)
	st := &settlement{since: r.started, ids: map[string][]string{},
		detail: "the gateway stopped, and the worker has not reconnected since",
		meta:   map[string]any{"start_grace_ms": f.cfg.StartGrace.Milliseconds()}}
	for orgID, o := range f.orgs {
		for id, w := range o.workers {
			if w.sess == nil {
				st.ids[orgID] = append(st.ids[orgID], id)
				if w.crashed {
					// One record lists them all: the same for each.
					st.detail = "the gateway went down without stopping (a crash, or a kill), and the worker has not reconnected since"
				}
			}
		}
	}
	return st
}

// settlement is the disconnects owed, by organisation, for workers listed
// from another gateway process as connected there, unless they connected
// here after since.
type settlement struct {
	since  time.Time
	ids    map[string][]string
	detail string
	meta   map[string]any
}

// settleUnreturned records the disconnect of each worker of st that has
// not connected here since st.since: without it the worker's events end
// at a connect. One whose newest event in the store is a disconnect
// already is left out. Each is dated when it went offline as listed, or
// at st.since when the store has a newer event of it (a link to another
// process since). It waits on the store, so it runs off Run's loop.
func (f *Fleet) settleUnreturned(ctx context.Context, st *settlement) {
	for orgID, ids := range st.ids {
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			var last api.WorkerEvent
			var found bool
			if f.cfg.LastEvent != nil {
				var err error
				last, found, err = f.newestEvent(ctx, orgID, id)
				if err != nil || found && last.EventType == api.EventDisconnected {
					continue
				}
			}
			f.mu.Lock()
			// Back meanwhile, its connect recorded the end itself.
			if w := f.org(orgID).workers[id]; w != nil && !w.offlineSince.IsZero() && !w.offlineSince.After(st.since) && !w.endRecorded {
				at := w.offlineSince
				if found && at.Before(last.CreatedAt) {
					at = st.since
				}
				w.endRecorded = true
				f.event(w, api.EventDisconnected, st.detail, st.meta, false, at)
			}
			f.mu.Unlock()
		}
	}
}

// awaitReturning holds a request that no connected worker could take
// because the workers it needs have not reconnected since the start:
// until one that serves it is back, every expected worker of its
// organisation is, or the start grace ends. Acquire then answers it as
// usual. Only the answers a missing worker explains are waited out.
func (f *Fleet) awaitReturning(ctx context.Context, need *Need) error {
	for {
		if f.returning.over.Load() {
			return nil
		}
		f.mu.Lock()
		now := time.Now()
		back, ok := f.awaitedLocked(need.OrgID, now)
		if !ok || !awaitable(f.checkLocked(f.org(need.OrgID), need, now, false)) {
			f.mu.Unlock()
			return nil
		}
		until := f.returning.until
		f.mu.Unlock()
		t := time.NewTimer(until.Sub(now))
		select {
		case <-back:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// awaitable reports an answer that a worker yet to reconnect would change.
func awaitable(err error) bool {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case api.CodeNoWorkerOnline, api.CodeNoWorkerForModel, api.CodeModelNotFound,
		api.CodeWorkerNotFound, api.CodeWorkerOffline:
		return true
	}
	return false
}

// Connected lists, by organisation, the workers connected now or in
// their grace after a drop, draining ones aside: those a gateway that
// replaces this one can expect back (Config.Returning).
func (f *Fleet) Connected() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]string{}
	for id, o := range f.orgs {
		for _, w := range o.workers {
			if w.offlineSince.IsZero() && !w.draining && !w.pending && w.sess != nil {
				out[id] = append(out[id], w.id)
			}
		}
	}
	return out
}
