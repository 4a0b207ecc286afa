package server

import (
	"net/http"
	"regexp"
	"strings"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/jsonbody"
)

// approvalActor is the actor of the approvals the console records.
const approvalActor = "svc admin"

// workerIDRE is the form of a worker id (fleet.WorkerID).
var workerIDRE = regexp.MustCompile(`^wk_[0-9a-f]{16}$`)

// approvalGate answers the fleet from the organisation's settings and the
// approvals the account service keeps.
func approvalGate(accounts *account.Service) fleet.ApprovalGate {
	return func(orgID, workerID string) (bool, string) {
		switch accounts.WorkerApproval(orgID, workerID) {
		case account.ApprovalPending:
			return true, ""
		case account.ApprovalGranted:
			return false, "approved"
		}
		return false, "the organisation no longer requires worker approval"
	}
}

// seenWorkers are the workers the fleet lists for an organisation: those
// turning worker approval on counts as approved.
func (s *Server) seenWorkers(orgID string) []account.WorkerRef {
	ws := s.fleet.Workers(orgID)
	out := make([]account.WorkerRef, len(ws))
	for i, w := range ws {
		out[i] = account.WorkerRef{ID: w.WorkerID, Name: w.WorkerName}
	}
	return out
}

// approveWorker is POST /api/v1/console/orgs/{org}/workers/approve. The
// worker is named by its id or its name; a name no worker has connected
// with yet is approved ahead of its first connection, since its id follows
// from it, and an unknown id is a 404.
func (s *Server) approveWorker(c *call) error {
	var req api.ApproveWorkerRequest
	if err := jsonbody.Strict(c.ctx.PostBody(), &req); err != nil {
		return err
	}
	org, err := s.accounts.Org(c.params.get("org"))
	if err != nil {
		return err
	}
	arg := strings.TrimSpace(req.Worker)
	if arg == "" {
		return api.Invalid(api.FieldError{Field: "worker", Type: api.FieldMissing, Message: "a worker's name or id"})
	}
	var found *api.Worker
	ws := s.fleet.Workers(org.ID)
	for i := range ws {
		if ws[i].WorkerID == arg {
			found = &ws[i]
			break
		}
	}
	for i := range ws {
		if found == nil && ws[i].WorkerName == arg {
			found = &ws[i]
		}
	}
	ref := account.WorkerRef{ID: fleet.WorkerID(org.ID, arg), Name: arg}
	switch {
	case found != nil:
		ref = account.WorkerRef{ID: found.WorkerID, Name: found.WorkerName}
	case workerIDRE.MatchString(arg):
		return &api.Error{Kind: api.KindNotFound, Code: api.CodeWorkerNotFound,
			Message: "No worker " + arg + " is listed in organisation " + org.Name + "; approve a worker not yet connected by its name"}
	case api.WorkerNameError(arg) != "":
		// No worker could connect under it: approving it would do nothing.
		return api.Invalid(api.FieldError{Field: "worker", Type: api.FieldInvalid, Message: api.WorkerNameError(arg)})
	}
	a, err := s.accounts.ApproveWorker(org.Name, ref, approvalActor)
	if err != nil {
		return err
	}
	s.fleet.Approve(org.ID, ref.ID, approvalActor)
	a.Connected = found != nil && found.Status != api.StatusOffline
	writeJSON(c.ctx, http.StatusOK, a)
	return nil
}
