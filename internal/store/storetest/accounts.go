// Package storetest holds the checks every store must pass, whichever
// engine it runs on: each takes a function opening a fresh, empty store
// and runs the same assertions against it, so bbolt and PostgreSQL are
// held to one behaviour.
package storetest

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/money"
)

// Accounts checks that a store keeps what account.Service writes: a
// script of every kind of change goes through one Service, and a second
// Service loaded from the store lists exactly what the first one holds in
// memory.
func Accounts(t *testing.T, open func(t *testing.T) account.Store) {
	t.Run("round trip", func(t *testing.T) { accountsRoundTrip(t, open(t)) })
	t.Run("failed bootstrap stores nothing", func(t *testing.T) { bootstrapPersistFails(t, open(t)) })
}

func newService(t *testing.T, st account.Store) *account.Service {
	t.Helper()
	svc, err := account.New(st, account.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func accountsRoundTrip(t *testing.T, st account.Store) {
	svc := newService(t, st)
	var secrets account.Secrets
	if created, err := svc.Bootstrap(func(s account.Secrets) error { secrets = s; return nil }); err != nil || !created {
		t.Fatalf("Bootstrap = %v, %v", created, err)
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(svc.CreateOrg(api.CreateOrgRequest{Name: "acme", Plan: api.PlanEnterprise}))
	budget := money.GBP(12345)
	must(svc.UpdateOrg("acme", api.OrgPatch{
		RequireE2E:       api.Optional[bool]{Set: true, Value: true},
		ModerationModel:  api.Optional[string]{Set: true, Value: "guard-b:0.6b"},
		MonthlyBudgetGBP: api.Optional[money.GBP]{Set: true, Value: budget},
	}))
	must(svc.AddCredit("acme", 5000))
	must(svc.AddCredit("acme", -1234))
	must(svc.CreateUser(api.CreateUserRequest{Name: "bob"}))
	must(svc.CreateUser(api.CreateUserRequest{Name: "alice"}))
	must(svc.SetMember("acme", "bob", api.SetMemberRequest{Role: "operator"}))
	must(svc.SetMember("acme", "alice", api.SetMemberRequest{Role: "member"}))
	must(svc.SetMember(account.DefaultOrg, "alice", api.SetMemberRequest{Role: "member"}))
	must(nil, svc.RemoveMember(account.DefaultOrg, "alice"))
	key, err := svc.CreateKey("acme", api.CreateKeyRequest{User: "bob", Name: "ci", Permissions: []string{"usage:read"}, ContentFilter: true})
	must(key, err)
	old, err := svc.CreateKey("acme", api.CreateKeyRequest{User: "alice", Name: "old"})
	must(old, err)
	must(svc.RevokeKey("acme", old.ID))
	must(svc.CreateWorkerToken("acme", api.CreateWorkerTokenRequest{Name: "gpu-1"}))
	tok, err := svc.CreateWorkerToken("acme", api.CreateWorkerTokenRequest{Name: "gpu-2"})
	must(tok, err)
	must(svc.RevokeWorkerToken("acme", tok.ID))
	must(svc.Authenticate(key.Secret))
	must(svc.Authenticate(secrets.AdminKey))
	if _, _, err := svc.AuthenticateWorker(secrets.WorkerToken); err != nil {
		t.Fatal(err)
	}
	must(nil, svc.FlushLastUsed())

	want := listing(t, svc)
	got := listing(t, newService(t, st))
	if got != want {
		t.Fatalf("loaded from the store:\n%s\nin memory before:\n%s", got, want)
	}
	// And the secrets made before still work on what was loaded.
	again := newService(t, st)
	must(again.Authenticate(key.Secret))
	if _, err := again.Authenticate(old.Secret); err == nil {
		t.Fatal("a revoked key authenticates after a reload")
	}
}

// listing is everything a Service shows, as JSON. Times are cut to the
// microsecond, the precision of PostgreSQL's timestamps.
func listing(t *testing.T, svc *account.Service) string {
	t.Helper()
	type orgListing struct {
		Org     api.Organization
		Members []api.Member
		Keys    []api.APIKey
		Tokens  []api.WorkerToken
	}
	var all struct {
		Users []api.User
		Orgs  []orgListing
	}
	all.Users = svc.ListUsers()
	for _, o := range svc.ListOrgs() {
		ol := orgListing{Org: o}
		var err error
		if ol.Members, err = svc.Members(o.Name); err != nil {
			t.Fatal(err)
		}
		if ol.Keys, err = svc.ListKeys(o.Name); err != nil {
			t.Fatal(err)
		}
		// Keys made in the same millisecond list in no set order.
		slices.SortFunc(ol.Keys, func(a, b api.APIKey) int { return strings.Compare(a.ID, b.ID) })
		for i := range ol.Keys {
			ol.Keys[i].LastUsedAt = toMicrosecond(ol.Keys[i].LastUsedAt)
		}
		if ol.Tokens, err = svc.ListWorkerTokens(o.Name); err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(ol.Tokens, func(a, b api.WorkerToken) int { return strings.Compare(a.ID, b.ID) })
		for i := range ol.Tokens {
			ol.Tokens[i].LastUsedAt = toMicrosecond(ol.Tokens[i].LastUsedAt)
		}
		all.Orgs = append(all.Orgs, ol)
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// toMicrosecond is at cut to the microsecond; nil stays nil.
func toMicrosecond(at *time.Time) *time.Time {
	if at == nil {
		return nil
	}
	micro := at.Truncate(time.Microsecond)
	return &micro
}

func bootstrapPersistFails(t *testing.T, st account.Store) {
	svc := newService(t, st)
	boom := errors.New("disk full")
	if _, err := svc.Bootstrap(func(account.Secrets) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Bootstrap = %v, want %v", err, boom)
	}
	if n := len(svc.ListOrgs()); n != 0 {
		t.Fatalf("%d orgs in memory after a failed bootstrap", n)
	}
	if n := len(newService(t, st).ListOrgs()); n != 0 {
		t.Fatalf("%d orgs stored after a failed bootstrap", n)
	}
}
