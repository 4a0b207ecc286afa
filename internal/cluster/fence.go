package cluster

import (
	"log/slog"
	"sync"

	"github.com/svc-dev/svc/internal/api"
)

// EventRecorder takes worker events.
type EventRecorder interface {
	RecordEvent(orgID string, ev api.WorkerEvent)
}

// maxHeldEvents bounds the events a Fence holds while it cannot tell
// whose they are. Past it, an event is recorded unfenced: a replica cut
// off from the database for long still records what its workers do.
const maxHeldEvents = 10000

// Fence records the worker events of the organisations this replica is
// the home of, and only theirs: an organisation's home writes its workers'
// history. A replica whose registration lapsed (frozen, or cut off from
// the database, for its TTL) cannot tell whether another took its homes
// meanwhile, so the events it makes then, its timers' verdicts on links
// gone quiet while it was away among them, are held until a reading of
// the homes begun since it renewed: those of an organisation still its
// own at the same epoch, or homed nowhere, are recorded then, and those of
// one another replica took are dropped, as are the events it makes after
// learning that, sending that organisation's workers away. Otherwise the
// history of a worker already linked at its new home would end at the old
// home's "disconnected".
type Fence struct {
	rec EventRecorder
	me  string
	// fresh reports whether home's answers are true now; home is an
	// organisation's home as this replica last read it.
	fresh func() bool
	home  func(orgID string) (Home, bool)
	log   *slog.Logger

	mu   sync.Mutex
	held map[string]*heldEvents
	n    int // events held, all organisations together
}

// heldEvents are an organisation's events made while the replica could
// not tell whose they are.
type heldEvents struct {
	// epoch is the organisation's home epoch when this replica was its
	// home, as it knew it when it held the first of them; 0 when it was
	// not.
	epoch  int64
	events []api.WorkerEvent
}

// NewFence returns a fence in front of rec for replica me.
func NewFence(rec EventRecorder, me string, fresh func() bool, home func(orgID string) (Home, bool), log *slog.Logger) *Fence {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fence{rec: rec, me: me, fresh: fresh, home: home, log: log, held: map[string]*heldEvents{}}
}

// FreshView is the freshness a Fence needs from a replica's lease and
// homes: the registration is live, and the homes were last read since it
// last lapsed.
func FreshView(l *Lease, h *Homes) func() bool {
	return func() bool {
		since, live := l.LiveSince()
		read := h.ReadBegan()
		return live && !read.IsZero() && read.After(since)
	}
}

// RecordEvent records ev now, drops it, or holds it until the homes are
// read again.
func (f *Fence) RecordEvent(orgID string, ev api.WorkerEvent) {
	if !f.fresh() {
		f.mu.Lock()
		if f.n < maxHeldEvents {
			h := f.held[orgID]
			if h == nil {
				h = &heldEvents{}
				if x, ok := f.home(orgID); ok && x.ReplicaID == f.me {
					h.epoch = x.Epoch
				}
				f.held[orgID] = h
			}
			h.events = append(h.events, ev)
			f.n++
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		f.rec.RecordEvent(orgID, ev)
		return
	}
	f.Settle()
	if f.ours(orgID, 0) {
		f.rec.RecordEvent(orgID, ev)
	}
}

// ours reports whether this replica records orgID's events: it is its
// home (at epoch, when not 0), or none is.
func (f *Fence) ours(orgID string, epoch int64) bool {
	x, ok := f.home(orgID)
	switch {
	case !ok:
		return true
	case x.ReplicaID != f.me:
		return false
	}
	return epoch == 0 || x.Epoch == epoch
}

// Settle records or drops the events held, once the homes' reading can
// tell whose they are; call it after each reading.
func (f *Fence) Settle() {
	if !f.fresh() {
		return
	}
	f.mu.Lock()
	held := f.held
	if len(held) == 0 {
		f.mu.Unlock()
		return
	}
	f.held, f.n = map[string]*heldEvents{}, 0
	f.mu.Unlock()
	for org, h := range held {
		if !f.ours(org, h.epoch) {
			x, _ := f.home(org)
			f.log.Info("cluster: dropped the worker events this replica made while it could not tell it was still the organisation's home; another replica is",
				"org", org, "events", len(h.events), "home", x.ReplicaID)
			continue
		}
		for _, ev := range h.events {
			f.rec.RecordEvent(org, ev)
		}
	}
}
