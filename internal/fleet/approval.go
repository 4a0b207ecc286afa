package fleet

import (
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// awaitingApproval is the detail of an approval_pending event.
const awaitingApproval = "the organisation requires approval of new workers; this one serves nothing until approved (svc admin workers approve)"

// Approve lets worker workerID of organisation orgID serve, if it awaits
// approval, recording an approved event by actor. It reports whether the
// organisation lists the worker and whether it was waiting. The approval
// itself is the caller's to remember: the fleet asks Config.Approval again
// when the worker next connects.
func (f *Fleet) Approve(orgID, workerID, actor string) (listed, waited bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.orgs[orgID]
	if o == nil || o.workers[workerID] == nil {
		return false, false
	}
	w := o.workers[workerID]
	if !w.pending {
		return true, false
	}
	f.releaseLocked(o, w, "approved", actor, time.Now())
	return true, true
}

// releaseLocked lets w, which awaited approval, serve.
func (f *Fleet) releaseLocked(o *org, w *worker, detail, actor string, now time.Time) {
	w.pending = false
	f.reindexLocked(o, w, now)
	ev := newEvent(w, api.EventApproved, detail, nil, false, now)
	if actor != "" {
		ev.Actor = &actor
	}
	f.cfg.Events.RecordEvent(w.orgID, ev)
	f.dispatchLocked(o, now)
}

// recheckApprovals asks the gate again about the connected workers that
// await approval and lets go those that no longer do: the setting was
// turned off, or another replica of a cluster took the approval.
func (f *Fleet) recheckApprovals() {
	type waiting struct{ orgID, id string }
	var ws []waiting
	f.mu.Lock()
	for _, o := range f.orgs {
		for _, w := range o.workers {
			if w.pending && w.offlineSince.IsZero() {
				ws = append(ws, waiting{o.id, w.id})
			}
		}
	}
	f.mu.Unlock()
	for _, x := range ws {
		pending, why := f.cfg.Approval(x.orgID, x.id)
		if pending {
			continue
		}
		f.mu.Lock()
		if o := f.orgs[x.orgID]; o != nil {
			if w := o.workers[x.id]; w != nil && w.pending {
				f.releaseLocked(o, w, why, "", time.Now())
			}
		}
		f.mu.Unlock()
	}
}
