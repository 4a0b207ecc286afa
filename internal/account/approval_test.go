package account_test

import (
	"testing"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/api"
)

func TestWorkerApprovalIsRememberedAcrossRestarts(t *testing.T) {
	f := newFixture(t)
	org, err := f.svc.Org(account.DefaultOrg)
	if err != nil {
		t.Fatal(err)
	}
	if s := f.svc.WorkerApproval(org.ID, "wk_new"); s != account.ApprovalNotRequired {
		t.Fatalf("approval with the setting off: %v", s)
	}
	// The workers known when the setting is turned on count as approved.
	seen := func(orgID string) []account.WorkerRef {
		if orgID != org.ID {
			t.Errorf("seen asked about org %s", orgID)
		}
		return []account.WorkerRef{{ID: "wk_old", Name: "old"}}
	}
	o, err := f.svc.UpdateOrgSeeing(account.DefaultOrg, api.OrgPatch{RequireWorkerApproval: api.Some(true)}, seen)
	if err != nil || !o.Settings.RequireWorkerApproval {
		t.Fatalf("UpdateOrgSeeing = %+v, %v", o.Settings, err)
	}
	if s := f.svc.WorkerApproval(org.ID, "wk_old"); s != account.ApprovalGranted {
		t.Fatalf("a worker seen as the setting was turned on: %v", s)
	}
	if s := f.svc.WorkerApproval(org.ID, "wk_new"); s != account.ApprovalPending {
		t.Fatalf("a new worker: %v", s)
	}
	a, err := f.svc.ApproveWorker(account.DefaultOrg, account.WorkerRef{ID: "wk_new", Name: "new"}, "svc admin")
	if err != nil || a.WorkerID != "wk_new" || a.WorkerName != "new" || a.By != "svc admin" || a.ApprovedAt.IsZero() {
		t.Fatalf("ApproveWorker = %+v, %v", a, err)
	}
	again, err := f.svc.ApproveWorker(account.DefaultOrg, account.WorkerRef{ID: "wk_new", Name: "new"}, "someone else")
	if err != nil || again != a {
		t.Fatalf("approving again = %+v, %v; want the first approval %+v", again, err, a)
	}
	if _, err := f.svc.ApproveWorker("nope", account.WorkerRef{ID: "wk_x", Name: "x"}, "svc admin"); status(t, err) != 404 {
		t.Fatalf("approval in an unknown org: %v", err)
	}

	f.reopen(t)
	for _, id := range []string{"wk_old", "wk_new"} {
		if s := f.svc.WorkerApproval(org.ID, id); s != account.ApprovalGranted {
			t.Fatalf("%s after a restart: %v", id, s)
		}
	}
	if s := f.svc.WorkerApproval(org.ID, "wk_other"); s != account.ApprovalPending {
		t.Fatalf("an unapproved worker after a restart: %v", s)
	}
	// Off and on again: approvals stay, and nobody new is let in.
	if _, err := f.svc.UpdateOrg(account.DefaultOrg, api.OrgPatch{RequireWorkerApproval: api.Some(false)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.UpdateOrg(account.DefaultOrg, api.OrgPatch{RequireWorkerApproval: api.Some(true)}); err != nil {
		t.Fatal(err)
	}
	if f.svc.WorkerApproval(org.ID, "wk_new") != account.ApprovalGranted || f.svc.WorkerApproval(org.ID, "wk_other") != account.ApprovalPending {
		t.Fatal("approvals changed when the setting went off and on")
	}
}
