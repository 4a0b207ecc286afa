package account_test

import (
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/money"
)

type fixture struct {
	dir     string
	store   *bolt.Store
	svc     *account.Service
	secrets account.Secrets
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir()}
	f.open(t)
	created, err := f.svc.Bootstrap(func(s account.Secrets) error { f.secrets = s; return nil })
	if err != nil || !created {
		t.Fatalf("Bootstrap = %v, %v", created, err)
	}
	return f
}

func (f *fixture) open(t *testing.T) {
	t.Helper()
	st, err := bolt.Open(f.dir, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	svc, err := account.New(st, account.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.store, f.svc = st, svc
}

// reopen closes the store and loads everything again, as a restart does.
func (f *fixture) reopen(t *testing.T) {
	t.Helper()
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	f.open(t)
}

func status(t *testing.T, err error) int {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an *api.Error", err)
	}
	return ae.HTTPStatus()
}

func TestBootstrapOnceAndReload(t *testing.T) {
	f := newFixture(t)
	p, err := f.svc.Authenticate(f.secrets.AdminKey)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Unrestricted || p.Role != auth.RoleOwner {
		t.Fatalf("admin principal = %+v", p)
	}
	org, ok := f.svc.OrgByID(p.OrgID)
	if !ok || org.Name != account.DefaultOrg || org.Plan != api.PlanPro {
		t.Fatalf("org = %+v", org)
	}
	if _, _, err := f.svc.AuthenticateWorker(f.secrets.WorkerToken); err != nil {
		t.Fatalf("worker token: %v", err)
	}

	f.reopen(t)
	created, err := f.svc.Bootstrap(func(account.Secrets) error { t.Fatal("persist called on restart"); return nil })
	if err != nil || created {
		t.Fatalf("second Bootstrap = %v, %v", created, err)
	}
	if _, err := f.svc.Authenticate(f.secrets.AdminKey); err != nil {
		t.Fatalf("admin key after restart: %v", err)
	}
	if _, _, err := f.svc.AuthenticateWorker(f.secrets.WorkerToken); err != nil {
		t.Fatalf("worker token after restart: %v", err)
	}
}

func TestBootstrapPersistFailureCommitsNothing(t *testing.T) {
	dir := t.TempDir()
	st, err := bolt.Open(dir, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc, err := account.New(st, account.Options{})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	if _, err := svc.Bootstrap(func(account.Secrets) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Bootstrap = %v, want %v", err, boom)
	}
	if n := len(svc.ListOrgs()); n != 0 {
		t.Fatalf("%d orgs after failed bootstrap", n)
	}
	svc2, _ := account.New(st, account.Options{})
	if n := len(svc2.ListOrgs()); n != 0 {
		t.Fatalf("%d orgs stored after failed bootstrap", n)
	}
}

func TestAuthenticate(t *testing.T) {
	f := newFixture(t)
	key, err := f.svc.CreateKey(account.DefaultOrg, api.CreateKeyRequest{User: account.DefaultUser, Name: "ci", Permissions: []string{"usage:read"}})
	if err != nil {
		t.Fatal(err)
	}
	revoked, _ := f.svc.CreateKey(account.DefaultOrg, api.CreateKeyRequest{User: account.DefaultUser, Name: "old"})
	if _, err := f.svc.RevokeKey(account.DefaultOrg, revoked.ID); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		secret string
		ok     bool
	}{
		{"valid", key.Secret, true},
		{"empty", "", false},
		{"garbage", "hello", false},
		{"worker token is not a key", f.secrets.WorkerToken, false},
		{"right id wrong secret", wrongLast(key.Secret), false},
		{"revoked", revoked.Secret, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := f.svc.Authenticate(tt.secret)
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				if !p.Has(auth.UsageRead) || p.Has(auth.InferenceWrite) {
					t.Fatalf("permissions = %v", p.Permissions)
				}
				return
			}
			if err == nil || status(t, err) != http.StatusUnauthorized {
				t.Fatalf("Authenticate = %v, want 401", err)
			}
		})
	}
}

func TestCreateKeyValidation(t *testing.T) {
	f := newFixture(t)
	if _, err := f.svc.CreateUser(api.CreateUserRequest{Name: "outsider"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		req    api.CreateKeyRequest
		fields []string
	}{
		{"missing everything", api.CreateKeyRequest{}, []string{"name", "user"}},
		{"unknown user", api.CreateKeyRequest{Name: "k", User: "nobody"}, []string{"user"}},
		{"not a member", api.CreateKeyRequest{Name: "k", User: "outsider"}, []string{"user"}},
		{"bad permission", api.CreateKeyRequest{Name: "k", User: "admin", Permissions: []string{"usage:read", "root"}}, []string{"permissions.1"}},
		{"empty permission list", api.CreateKeyRequest{Name: "k", User: "admin", Permissions: []string{}}, []string{"permissions"}},
		{"unrestricted with list", api.CreateKeyRequest{Name: "k", User: "admin", Unrestricted: true, Permissions: []string{"usage:read"}}, []string{"permissions"}},
		{"control char in name", api.CreateKeyRequest{Name: "a\x00b", User: "admin"}, []string{"name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.svc.CreateKey(account.DefaultOrg, tt.req)
			var ae *api.Error
			if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusUnprocessableEntity {
				t.Fatalf("CreateKey = %v, want 422", err)
			}
			var got []string
			for _, fe := range ae.Fields {
				got = append(got, fe.Field)
			}
			if !slices.Equal(got, tt.fields) {
				t.Fatalf("fields = %v, want %v", got, tt.fields)
			}
		})
	}
}

func TestKeyDefaultsAndListing(t *testing.T) {
	f := newFixture(t)
	k, err := f.svc.CreateKey(account.DefaultOrg, api.CreateKeyRequest{User: "admin", Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(k.Permissions, string(auth.ComputeWrite)) || len(k.Permissions) != 3 {
		t.Fatalf("default permissions = %v", k.Permissions)
	}
	if k.Secret == "" || k.Prefix != "svc_k_"+k.ID {
		t.Fatalf("created key = %+v", k)
	}
	keys, err := f.svc.ListKeys(account.DefaultOrg)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("%d keys", len(keys))
	}
	for _, lk := range keys {
		if lk.Secret != "" {
			t.Fatalf("listed key %s shows its secret", lk.ID)
		}
	}
}

// requests_per_minute is taken from 0 (no limit) to ten million, null
// clears it back to the plan's default, and it survives a restart.
func TestRequestsPerMinuteSetting(t *testing.T) {
	f := newFixture(t)
	if _, err := f.svc.CreateOrg(api.CreateOrgRequest{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		patch api.Optional[int]
		want  *int // the stored setting; nil for the plan's default
		limit int  // the limit in force
		bad   bool
	}{
		{"a limit", api.Some(6), new(6), 6, false},
		{"the largest", api.Some(10_000_000), new(10_000_000), 10_000_000, false},
		{"no limit", api.Some(0), new(0), 0, false},
		{"negative", api.Some(-1), new(0), 0, true},
		{"too large", api.Some(10_000_001), new(0), 0, true},
		{"null is the plan's default", api.Null[int](), nil, 600, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.svc.UpdateOrg("acme", api.OrgPatch{RequestsPerMinute: tt.patch})
			if tt.bad {
				var ae *api.Error
				if !errors.As(err, &ae) || ae.HTTPStatus() != 422 || len(ae.Fields) != 1 || ae.Fields[0].Field != "requests_per_minute" {
					t.Fatalf("UpdateOrg = %v, want 422 naming requests_per_minute", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			o, _ := f.svc.Org("acme")
			if got := o.Settings.RequestsPerMinute; (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want || o.RequestsPerMinute() != tt.limit {
				t.Fatalf("setting %v, limit %d; want %v, %d", got, o.RequestsPerMinute(), tt.want, tt.limit)
			}
		})
	}
	if _, err := f.svc.UpdateOrg("acme", api.OrgPatch{RequestsPerMinute: api.Some(60)}); err != nil {
		t.Fatal(err)
	}
	f.reopen(t)
	if o, err := f.svc.Org("acme"); err != nil || o.RequestsPerMinute() != 60 {
		t.Fatalf("after restart: %+v, %v", o.Settings, err)
	}
}

func TestOrgLifecycle(t *testing.T) {
	f := newFixture(t)
	if _, err := f.svc.CreateOrg(api.CreateOrgRequest{Name: "Bad Name"}); status(t, err) != 422 {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := f.svc.CreateOrg(api.CreateOrgRequest{Name: "default"}); status(t, err) != 409 {
		t.Fatalf("duplicate: %v", err)
	}
	o, err := f.svc.CreateOrg(api.CreateOrgRequest{Name: "acme"})
	if err != nil || o.Plan != api.PlanFree {
		t.Fatalf("CreateOrg = %+v, %v", o, err)
	}
	budget := money.Pounds(500)
	o, err = f.svc.UpdateOrg("acme", api.OrgPatch{
		Plan:              api.Some(api.PlanEnterprise),
		RequireE2E:        api.Some(true),
		MonthlyBudgetGBP:  api.Some(budget),
		JurisdictionFloor: api.Some("uk"),
		MaxRuntimeSeconds: api.Some(int64(3600)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.Plan != api.PlanEnterprise || !o.Settings.RequireE2E || *o.Settings.MonthlyBudgetGBP != budget ||
		*o.Settings.JurisdictionFloor != "uk" || *o.Settings.MaxRuntimeSeconds != 3600 || o.Settings.MaxRuntimeSince == nil {
		t.Fatalf("after patch: %+v", o.Settings)
	}
	// The same limit again keeps the time it was set.
	since := *o.Settings.MaxRuntimeSince
	if o, err = f.svc.UpdateOrg("acme", api.OrgPatch{MaxRuntimeSeconds: api.Some(int64(3600))}); err != nil || !o.Settings.MaxRuntimeSince.Equal(since) {
		t.Fatalf("the same limit again: %+v, %v", o.Settings, err)
	}
	o, err = f.svc.UpdateOrg("acme", api.OrgPatch{MonthlyBudgetGBP: api.Null[money.GBP](), MaxRuntimeSeconds: api.Null[int64]()})
	if err != nil || o.Settings.MonthlyBudgetGBP != nil || o.Settings.MaxRuntimeSeconds != nil || o.Settings.MaxRuntimeSince != nil || !o.Settings.RequireE2E {
		t.Fatalf("clearing: %+v, %v", o.Settings, err)
	}
	_, err = f.svc.UpdateOrg("acme", api.OrgPatch{Plan: api.Some(api.Plan("gold")), MaxRuntimeSeconds: api.Some(int64(5))})
	var ae *api.Error
	if !errors.As(err, &ae) || len(ae.Fields) != 2 || ae.Fields[0].Field != "plan" || ae.Fields[1].Field != "max_runtime_seconds" {
		t.Fatalf("invalid patch: %v", err)
	}
	if _, err := f.svc.AddCredit("acme", money.Pounds(10)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.AddCredit("acme", money.Pounds(-11)); status(t, err) != 422 {
		t.Fatalf("overdraw: %v", err)
	}
	if _, err := f.svc.AddCredit("acme", 0); status(t, err) != 422 {
		t.Fatalf("no amount: %v", err)
	}
	if _, err := f.svc.UpdateOrg("nope", api.OrgPatch{}); status(t, err) != 404 {
		t.Fatalf("unknown org: %v", err)
	}

	f.reopen(t)
	o, err = f.svc.Org("acme")
	if err != nil || o.Settings.CreditBalanceGBP != money.Pounds(10) || !o.Settings.RequireE2E || o.Plan != api.PlanEnterprise {
		t.Fatalf("after restart: %+v, %v", o, err)
	}
}

func TestMembers(t *testing.T) {
	f := newFixture(t)
	if _, err := f.svc.CreateUser(api.CreateUserRequest{Name: "bob@example.com"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SetMember("default", "bob@example.com", api.SetMemberRequest{Role: "admin"}); status(t, err) != 422 {
		t.Fatalf("bad role: %v", err)
	}
	if _, err := f.svc.SetMember("default", "bob@example.com", api.SetMemberRequest{Role: "member"}); err != nil {
		t.Fatal(err)
	}
	// The only owner can neither be demoted nor removed.
	if _, err := f.svc.SetMember("default", "admin", api.SetMemberRequest{Role: "member"}); status(t, err) != 409 {
		t.Fatalf("demote last owner: %v", err)
	}
	if err := f.svc.RemoveMember("default", "admin"); status(t, err) != 409 {
		t.Fatalf("remove last owner: %v", err)
	}
	k, err := f.svc.CreateKey("default", api.CreateKeyRequest{User: "bob@example.com", Name: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.svc.Authenticate(k.Secret)
	if err != nil || p.Role != auth.RoleMember {
		t.Fatalf("bob = %+v, %v", p, err)
	}
	if _, err := f.svc.SetMember("default", "bob@example.com", api.SetMemberRequest{Role: "operator"}); err != nil {
		t.Fatal(err)
	}
	if p, _ := f.svc.Authenticate(k.Secret); p.Role != auth.RoleOperator {
		t.Fatalf("role after promotion = %s", p.Role)
	}
	if err := f.svc.RemoveMember("default", "bob@example.com"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Authenticate(k.Secret); status(t, err) != 401 {
		t.Fatalf("key of removed member: %v", err)
	}
	keys, _ := f.svc.ListKeys("default")
	for _, lk := range keys {
		if lk.ID == k.ID && lk.RevokedAt == nil {
			t.Fatal("removed member's key not revoked")
		}
	}
	ms, _ := f.svc.Members("default")
	if len(ms) != 1 || ms[0].User != "admin" {
		t.Fatalf("members = %+v", ms)
	}
}

func TestWorkerTokens(t *testing.T) {
	f := newFixture(t)
	tok, err := f.svc.CreateWorkerToken("default", api.CreateWorkerTokenRequest{Name: "gpu-box-1"})
	if err != nil {
		t.Fatal(err)
	}
	orgID, id, err := f.svc.AuthenticateWorker(tok.Secret)
	if err != nil || id != tok.ID || !f.svc.WorkerTokenLive(id) {
		t.Fatalf("AuthenticateWorker = %s, %s, %v (live %v)", orgID, id, err, f.svc.WorkerTokenLive(id))
	}
	changed := func() bool {
		select {
		case <-f.svc.TokensRevoked():
			return true
		default:
			return false
		}
	}
	if changed() {
		t.Fatal("a creation was signalled as a revocation")
	}
	if _, err := f.svc.RevokeWorkerToken("default", tok.Prefix); err != nil {
		t.Fatal(err)
	}
	if !changed() || f.svc.WorkerTokenLive(id) || f.svc.WorkerTokenLive("nope") {
		t.Fatal("a revocation was not signalled, or the token is still live")
	}
	if _, _, err := f.svc.AuthenticateWorker(tok.Secret); status(t, err) != 401 {
		t.Fatalf("revoked token: %v", err)
	}
	if _, err := f.svc.RevokeWorkerToken("default", "nope"); status(t, err) != 404 {
		t.Fatalf("unknown token: %v", err)
	}
	list, _ := f.svc.ListWorkerTokens("default")
	if len(list) != 2 {
		t.Fatalf("%d tokens", len(list))
	}
}

func TestLastUsedFlushedAndReloaded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		if _, err := f.svc.Authenticate(f.secrets.AdminKey); err != nil {
			t.Fatal(err)
		}
		used := time.Now()
		time.Sleep(time.Hour)
		if err := f.svc.FlushLastUsed(); err != nil {
			t.Fatal(err)
		}
		f.reopen(t)
		keys, _ := f.svc.ListKeys("default")
		if keys[0].LastUsedAt == nil || !keys[0].LastUsedAt.Equal(used) {
			t.Fatalf("last used = %v, want %v", keys[0].LastUsedAt, used)
		}
	})
}

// Content filtering is a key's own setting, carried by the principal and
// kept across a reload; the organisation names the model it checks with.
func TestContentFilterAndModerationModel(t *testing.T) {
	f := newFixture(t)
	k, err := f.svc.CreateKey(account.DefaultOrg, api.CreateKeyRequest{User: "admin", Name: "filtered", ContentFilter: true})
	if err != nil || !k.ContentFilter {
		t.Fatalf("created %+v, %v", k, err)
	}
	p, err := f.svc.Authenticate(k.Secret)
	if err != nil || !p.ContentFilter {
		t.Fatalf("principal %+v, %v", p, err)
	}
	if p, _ := f.svc.Authenticate(f.secrets.AdminKey); p.ContentFilter {
		t.Fatal("the admin key filters without being asked to")
	}
	keys, _ := f.svc.ListKeys(account.DefaultOrg)
	if i := slices.IndexFunc(keys, func(x api.APIKey) bool { return x.ID == k.ID }); i < 0 || !keys[i].ContentFilter {
		t.Fatalf("listing %+v", keys)
	}

	for _, tt := range []struct {
		patch api.Optional[string]
		want  string
		ok    bool
	}{
		{api.Some("guard-a:8b"), "guard-a:8b", true},
		{api.Null[string](), "", true},
		{api.Some("has space"), "", false},
		{api.Some("sim-chat"), "", false},
		{api.Some("guard-a:2b"), "", false},
	} {
		o, err := f.svc.UpdateOrg(account.DefaultOrg, api.OrgPatch{ModerationModel: tt.patch})
		switch {
		case !tt.ok && status(t, err) != http.StatusUnprocessableEntity:
			t.Fatalf("%+v: %v, want 422", tt.patch, err)
		case tt.ok && (err != nil || o.Settings.ModerationModel != tt.want):
			t.Fatalf("%+v: %+v, %v", tt.patch, o.Settings, err)
		}
	}
}

// wrongLast is secret with its last character changed: to "x", unless it
// is one already.
func wrongLast(secret string) string {
	last := "x"
	if strings.HasSuffix(secret, last) {
		last = "y"
	}
	return secret[:len(secret)-1] + last
}

// A key or worker token revoked by its whole secret, as an operator
// revoking a leaked one pastes it, is revoked; a refusal never repeats a
// secret.
func TestRevokeByTheWholeSecret(t *testing.T) {
	f := newFixture(t)
	key, err := f.svc.CreateKey(account.DefaultOrg, api.CreateKeyRequest{User: account.DefaultUser, Name: "leaked"})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := f.svc.RevokeKey(account.DefaultOrg, key.Secret); err != nil || k.RevokedAt == nil {
		t.Fatalf("revoke by the whole secret: %+v, %v", k, err)
	}
	if _, err := f.svc.Authenticate(key.Secret); err == nil {
		t.Fatal("the key still authenticates")
	}
	tok, err := f.svc.CreateWorkerToken(account.DefaultOrg, api.CreateWorkerTokenRequest{Name: "leaked"})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := f.svc.RevokeWorkerToken(account.DefaultOrg, tok.Secret); err != nil || w.RevokedAt == nil {
		t.Fatalf("revoke a worker token by its whole secret: %+v, %v", w, err)
	}
	// Another organisation's key, named whole: not found, and not quoted.
	other, _ := f.svc.CreateKey(account.DefaultOrg, api.CreateKeyRequest{User: account.DefaultUser, Name: "other"})
	secret := other.Secret[len(other.Secret)-20:]
	if _, err := f.svc.RevokeKey("nope", other.Secret); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("revoke in another organisation: %v", err)
	}
	bogus := other.Secret[:len(other.Secret)-1] + "!"
	if _, err := f.svc.RevokeKey(account.DefaultOrg, bogus); err == nil || strings.Contains(err.Error(), secret[:19]) {
		t.Fatalf("revoke by a malformed secret: %v", err)
	}
}

// Labels and the moderation model refuse controls and bidirectional
// overrides, which would show a listing's text reversed or garbled.
func TestLabelsRefuseControls(t *testing.T) {
	f := newFixture(t)
	for _, name := range []string{"a\u202eb", "a\x1bb", "a\u2066b"} {
		if _, err := f.svc.CreateKey(account.DefaultOrg, api.CreateKeyRequest{User: account.DefaultUser, Name: name}); status(t, err) != 422 {
			t.Errorf("key named %q: %v", name, err)
		}
	}
	for _, model := range []string{"guard\x01", "guard\u202e", "guard b"} {
		if _, err := f.svc.UpdateOrg(account.DefaultOrg, api.OrgPatch{ModerationModel: api.Some(model)}); status(t, err) != 422 {
			t.Errorf("moderation_model %q: %v", model, err)
		}
	}
	if _, err := f.svc.CreateKey(account.DefaultOrg, api.CreateKeyRequest{User: account.DefaultUser, Name: "Grafikkarte Süd 計算"}); err != nil {
		t.Errorf("a key named in several scripts: %v", err)
	}
}

// Credit past what the balance can hold is refused as too much, not as a
// balance going below zero.
func TestCreditOverflow(t *testing.T) {
	f := newFixture(t)
	huge := money.GBP(math.MaxInt64 / 2)
	if _, err := f.svc.AddCredit(account.DefaultOrg, huge); err != nil {
		t.Fatal(err)
	}
	_, err := f.svc.AddCredit(account.DefaultOrg, huge+huge/2)
	if status(t, err) != 422 || strings.Contains(err.Error(), "below zero") || !strings.Contains(err.Error(), "largest") {
		t.Fatalf("credit past the largest balance: %v", err)
	}
	if _, err := f.svc.AddCredit(account.DefaultOrg, -huge-1); status(t, err) != 422 || !strings.Contains(err.Error(), "below zero") {
		t.Fatalf("credit below zero: %v", err)
	}
}
