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
	until time.Time
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
	// had their disconnects recorded (settleReturning).
	settled bool
}

func newReturning(byOrg map[string][]string, grace time.Duration, now time.Time) *returning {
	r := &returning{until: now.Add(grace), missing: map[string]map[string]bool{}, back: map[string]chan struct{}{}}
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

// settleReturning records, once the start grace has ended, the
// disconnect of each worker the gateway this one replaced had connected
// and that has not reconnected (settleUnreturned). It runs on Run's
// ticker.
func (f *Fleet) settleReturning(ctx context.Context, now time.Time) {
	r := f.returning
	var lost map[string][]string
	f.mu.Lock()
	if r.settled || now.Before(r.until) {
		f.mu.Unlock()
		return
	}
	r.settled = true
	r.over.Store(true)
	for orgID, ids := range r.missing {
		for id := range ids {
			if lost == nil {
				lost = map[string][]string{}
			}
			lost[orgID] = append(lost[orgID], id)
		}
	}
	f.mu.Unlock()
	for orgID, ids := range lost {
		f.settleUnreturned(ctx, orgID, ids, "the gateway stopped, and the worker has not reconnected since",
			map[string]any{"start_grace_ms": f.cfg.StartGrace.Milliseconds()})
	}
}

// settleUnreturned records the disconnect of each of ids, workers of
// orgID listed from another gateway process (Remembered, Adopt) as
// connected there, that has not connected here since: nobody else can,
// and without it the worker's events end at a connect. Each is dated when
// it went offline as listed, and left out where the store's newest event
// of it is a disconnect already.
func (f *Fleet) settleUnreturned(ctx context.Context, orgID string, ids []string, detail string, meta map[string]any) {
	for _, id := range ids {
		var last api.WorkerEvent
		var found bool
		if f.cfg.LastEvent != nil {
			lctx, cancel := context.WithTimeout(ctx, lastEventWait)
			var err error
			last, found, err = f.cfg.LastEvent(lctx, orgID, id)
			cancel()
			if err != nil || found && last.EventType == api.EventDisconnected {
				continue
			}
		}
		f.mu.Lock()
		// Back meanwhile, its connect recorded the end itself.
		if w := f.org(orgID).workers[id]; w != nil && w.sess == nil && !w.offlineSince.IsZero() && !w.endRecorded {
			at := w.offlineSince
			if found && at.Before(last.CreatedAt) {
				at = last.CreatedAt
			}
			w.endRecorded = true
			f.event(w, api.EventDisconnected, detail, meta, false, at)
		}
		f.mu.Unlock()
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
