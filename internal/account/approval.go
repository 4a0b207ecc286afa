package account

import (
	"maps"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// WorkerRef names a worker of an organisation: its id and its name.
type WorkerRef struct {
	ID, Name string
}

// ApprovalState is where a worker stands with its organisation's approval.
type ApprovalState int

const (
	// ApprovalNotRequired: the organisation does not require approval.
	ApprovalNotRequired ApprovalState = iota
	// ApprovalGranted: the organisation requires it and approved the worker.
	ApprovalGranted
	// ApprovalPending: the organisation requires it and has not approved
	// the worker.
	ApprovalPending
)

// WorkerApproval is whether the worker workerID of organisation orgID
// may serve. It is read when a worker
// connects and while one waits, from memory, without the store.
func (s *Service) WorkerApproval(orgID, workerID string) ApprovalState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o := s.st.orgs[orgID]
	switch {
	case o == nil || !o.Settings.RequireWorkerApproval:
		return ApprovalNotRequired
	case o.Approved[workerID].At.IsZero():
		return ApprovalPending
	}
	return ApprovalGranted
}

// ApproveWorker records that organisation org approved worker w, whether
// it is connected or not yet: approval is by the worker's id, which its
// name gives. Approving an approved worker again changes nothing.
func (s *Service) ApproveWorker(org string, w WorkerRef, by string) (api.WorkerApproval, error) {
	if err := s.lock(); err != nil {
		return api.WorkerApproval{}, err
	}
	defer s.wmu.Unlock()
	cur, err := s.st.org(org)
	if err != nil {
		return api.WorkerApproval{}, err
	}
	if a, ok := cur.Approved[w.ID]; ok {
		return api.WorkerApproval{WorkerID: w.ID, WorkerName: a.Name, ApprovedAt: a.At, By: a.By}, nil
	}
	o := *cur
	now := s.stamp()
	o.Approved = approve(o.Approved, []WorkerRef{w}, by, now)
	if err := s.commit(&change{orgs: []Org{o}}); err != nil {
		return api.WorkerApproval{}, err
	}
	return api.WorkerApproval{WorkerID: w.ID, WorkerName: w.Name, ApprovedAt: now, By: by}, nil
}

// approve returns approved with ws added (those not in it already), as a
// new map: stored records are replaced, never changed in place.
func approve(approved map[string]Approval, ws []WorkerRef, by string, at time.Time) map[string]Approval {
	out := maps.Clone(approved)
	if out == nil {
		out = map[string]Approval{}
	}
	for _, w := range ws {
		if _, ok := out[w.ID]; !ok {
			out[w.ID] = Approval{Name: w.Name, At: at, By: by}
		}
	}
	return out
}
