package fleet

import (
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Remembered is a worker the gateway this one replaces listed as it
// stopped, connected or offline: listed here offline until it reconnects
// or has been offline KeepOffline, as if the gateway had not restarted.
type Remembered struct {
	ID            string           `json:"worker_id"`
	Name          string           `json:"worker_name"`
	Version       string           `json:"version,omitempty"`
	MaxConcurrent int              `json:"max_concurrent"`
	Models        []api.Model      `json:"models,omitempty"`
	Engines       []api.EngineInfo `json:"engines,omitempty"`
	Features      []string         `json:"features,omitempty"`
	E2EKey        *api.E2EKey      `json:"e2e_key,omitempty"`
	// OfflineSince is when it went offline; a worker connected when the
	// gateway stopped is offline since the stop.
	OfflineSince time.Time `json:"offline_since"`
	LastSeen     time.Time `json:"last_seen"`
	// Checkpoint marks a record made while the gateway ran (Remember's
	// checkpoint): found by the next gateway, the last went down without
	// stopping, a crash or a kill, and took the links with it. A record
	// made as it stopped has none.
	Checkpoint bool `json:"checkpoint,omitempty"`
	// Connected marks a worker linked when the record was made: offline
	// since then, or since the gateway was last known to be running with
	// it (StillConnectedAt).
	Connected bool `json:"connected,omitempty"`
	// Private says, of a worker adopted from its events (Adopt), whether
	// its last connect offered private inference: its key is not in them.
	// Nil when its events are older than the ones telling it, and its
	// features are then unknown too.
	Private *bool `json:"-"`
}

// Remember lists, by organisation, every worker the fleet lists now: for
// the gateway replacing this one (Config.Remembered). A connected worker
// is recorded offline from now, which is when its link ends. A checkpoint
// is a record made while the gateway runs, for a restart after a crash.
func (f *Fleet) Remember(checkpoint bool) map[string][]Remembered {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	out := map[string][]Remembered{}
	for id, o := range f.orgs {
		for _, w := range o.workers {
			if w.pending {
				continue // awaiting approval: it was never served, nor is it now
			}
			r := Remembered{ID: w.id, Name: w.name, Version: w.version, MaxConcurrent: w.maxConcurrent,
				Models: w.models, Engines: w.engines, Features: w.features, E2EKey: w.e2eKey,
				OfflineSince: w.offlineSince, LastSeen: w.lastSeen, Checkpoint: checkpoint}
			if r.OfflineSince.IsZero() {
				r.OfflineSince, r.LastSeen, r.Connected = now, now, true
			}
			out[id] = append(out[id], r)
		}
	}
	return out
}

// StillConnectedAt moves to at the end of the links of the workers byOrg
// lists as connected at a checkpoint, when the gateway that made it was
// known to be running with them until at, later than the record: the
// fleet did not change meanwhile, or a newer record would have been made.
func StillConnectedAt(byOrg map[string][]Remembered, at time.Time) {
	for _, ws := range byOrg {
		for i := range ws {
			if r := &ws[i]; r.Checkpoint && r.Connected && at.After(r.OfflineSince) {
				r.OfflineSince, r.LastSeen = at, at
			}
		}
	}
}

// Changes counts the changes of the workers the fleet lists and of what
// Remember records of them (a worker's coming, going, models, draining):
// a record taken when the count was n is out of date once it is past n,
// save for the times Remember gives a connected worker. It may count a
// change that changed nothing.
func (f *Fleet) Changes() uint64 { return f.changes.Load() }

// Adopt lists, for an organisation this gateway has just become the home
// of, the workers its last home listed that are not linked here: offline
// until they connect, as Remembered does for a restart. Those of back
// were connected there; each that has not connected here within the
// grace gets the disconnect its last home could not record, on Run's
// ticker.
func (f *Fleet) Adopt(orgID string, ws []Remembered, back []string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.org(orgID)
	var fresh []Remembered
	for _, r := range ws {
		w := o.workers[r.ID]
		if w != nil && (w.offlineSince.IsZero() || !r.LastSeen.After(w.lastSeen)) {
			continue // linked here, or listed here since its events
		}
		if w != nil {
			// Left from an earlier time as the organisation's home: its
			// events have been written by other homes since.
			delete(o.workers, r.ID)
			f.reindexLocked(o, w, now)
			w.stopTimersLocked()
		}
		fresh = append(fresh, r)
	}
	f.rememberLocked(map[string][]Remembered{orgID: fresh}, now)
	for _, r := range fresh {
		if w := o.workers[r.ID]; w != nil {
			w.adopted = &adoptedSettings{known: r.Private != nil, private: r.Private != nil && *r.Private}
		}
	}
	if len(back) > 0 {
		f.adopted = append(f.adopted, adoption{orgID: orgID, back: back, at: now, due: now.Add(f.cfg.Grace)})
	}
}

// adoption is an Adopt's workers awaited back until due.
type adoption struct {
	orgID string
	back  []string
	at    time.Time
	due   time.Time
}

// dueAdopted is the settlement owed for adopted workers not back when
// their grace ended (settleUnreturned), one per adoption; nil when none
// is due.
func (f *Fleet) dueAdopted(now time.Time) []*settlement {
	f.mu.Lock()
	defer f.mu.Unlock()
	var due []*settlement
	keep := f.adopted[:0]
	for _, a := range f.adopted {
		if now.Before(a.due) {
			keep = append(keep, a)
			continue
		}
		due = append(due, &settlement{since: a.at, ids: map[string][]string{a.orgID: a.back},
			detail: "the organisation's home replica stopped, and the worker has not reconnected since",
			meta:   map[string]any{"grace_ms": f.cfg.Grace.Milliseconds()}})
	}
	f.adopted = keep
	return due
}

// rememberLocked lists the workers of byOrg offline; what has been
// offline KeepOffline already is left out.
func (f *Fleet) rememberLocked(byOrg map[string][]Remembered, now time.Time) {
	for orgID, ws := range byOrg {
		for _, r := range ws {
			if r.ID == "" || r.OfflineSince.IsZero() || now.Sub(r.OfflineSince) > f.cfg.KeepOffline {
				continue
			}
			o := f.org(orgID)
			if o.workers[r.ID] != nil {
				continue
			}
			w := &worker{id: r.ID, orgID: orgID, name: r.Name, version: r.Version, maxConcurrent: r.MaxConcurrent,
				engines: r.Engines, features: r.Features, e2eKey: r.E2EKey,
				offlineSince: r.OfflineSince, lastSeen: r.LastSeen, status: api.StatusOffline, crashed: r.Checkpoint}
			w.setModels(r.Models)
			o.workers[r.ID] = w
			f.reindexLocked(o, w, now)
		}
	}
}
