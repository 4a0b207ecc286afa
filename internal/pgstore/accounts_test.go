package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/money"
	"github.com/svc-dev/svc/internal/pgstore"
	"github.com/svc-dev/svc/internal/store/storetest"
)

func TestAccountsConformance(t *testing.T) {
	storetest.Accounts(t, func(t *testing.T) account.Store { return open(t, pg.CreateDB(t)) })
}

func newService(t *testing.T, st account.Store) *account.Service {
	t.Helper()
	svc, err := account.New(st, account.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// follow runs svc.Follow on st's notifications (and no timely resync)
// until the test ends.
func follow(t *testing.T, svc *account.Service, st *pgstore.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Follow(ctx, time.Hour, st.ListenAccounts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Follow: %v", err)
		}
	})
}

// A change on one replica reaches another's memory by notification: a key
// made there authenticates here, and once revoked there fails here.
func TestNotifyReloadsOtherReplica(t *testing.T) {
	url := pg.CreateDB(t)
	a, b := newService(t, open(t, url)), open(t, url)
	if _, err := a.Bootstrap(func(account.Secrets) error { return nil }); err != nil {
		t.Fatal(err)
	}
	sb := newService(t, b)
	follow(t, sb, b)
	key, err := a.CreateKey(account.DefaultOrg, api.CreateKeyRequest{User: account.DefaultUser, Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new key authenticates on the other replica", func() bool {
		_, err := sb.Authenticate(key.Secret)
		return err == nil
	})
	if _, err := a.RevokeKey(account.DefaultOrg, key.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a revoked key fails on the other replica", func() bool {
		_, err := sb.Authenticate(key.Secret)
		return err != nil
	})
}

// The listener survives the database's restart, and reports once it
// listens again, since changes may have been missed meanwhile; a quiet
// connection is checked without being lost.
func TestListenReconnects(t *testing.T) {
	srv := newServer(t)
	url, err := srv.CreateDB(context.Background(), "listen")
	if err != nil {
		t.Fatal(err)
	}
	st, writer := open(t, url), open(t, url)
	pgstore.SetListenPing(st, 50*time.Millisecond)
	var n atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.ListenAccounts(ctx, func() { n.Add(1) }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ListenAccounts: %v", err)
		}
	}()
	eventually(t, "a report once listening", func() bool { return n.Load() == 1 })
	time.Sleep(200 * time.Millisecond) // a few pings with nothing to report
	if got := n.Load(); got != 1 {
		t.Fatalf("%d reports with nothing written", got)
	}
	put := func() {
		t.Helper()
		// The pool's connections from before a restart fail once each.
		eventually(t, "a write", func() bool {
			return writer.WriteAccounts(func(w account.Writer) error {
				return w.PutUser(account.User{ID: time.Now().String(), Name: time.Now().String()})
			}) == nil
		})
	}
	put()
	eventually(t, "a report of a change", func() bool { return n.Load() == 2 })
	// Last-used times are not changes anyone needs to reload for.
	if err := writer.WriteAccounts(func(w account.Writer) error { return w.PutLastUsed("svc_k_x", time.Now()) }); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a report after reconnecting", func() bool { return n.Load() == 3 })
	put()
	eventually(t, "a report of a change after reconnecting", func() bool { return n.Load() == 4 })
}

// Replicas starting together on an empty database make one default
// organisation between them, and only the one that made it keeps secrets.
func TestBootstrapRace(t *testing.T) {
	for round := range 5 {
		url := pg.CreateDB(t)
		svcs := []*account.Service{newService(t, open(t, url)), newService(t, open(t, url)), newService(t, open(t, url))}
		var persisted atomic.Int32
		created := make([]bool, len(svcs))
		errs := make([]error, len(svcs))
		var wg sync.WaitGroup
		for i, svc := range svcs {
			wg.Go(func() {
				created[i], errs[i] = svc.Bootstrap(func(account.Secrets) error { persisted.Add(1); return nil })
			})
		}
		wg.Wait()
		n := 0
		for i := range svcs {
			if errs[i] != nil {
				t.Fatalf("round %d, replica %d: %v", round, i, errs[i])
			}
			if created[i] {
				n++
			}
		}
		if n != 1 || persisted.Load() != 1 {
			t.Fatalf("round %d: %d replicas created the default organisation, %d kept secrets", round, n, persisted.Load())
		}
		for i, svc := range svcs {
			if err := svc.Reload(); err != nil {
				t.Fatal(err)
			}
			if orgs := svc.ListOrgs(); len(orgs) != 1 {
				t.Fatalf("round %d, replica %d: %d organisations", round, i, len(orgs))
			}
		}
	}
}

// Two replicas changing one organisation from stale copies lose nothing:
// every credit that was accepted is in the balance.
func TestNoLostUpdates(t *testing.T) {
	url := pg.CreateDB(t)
	a, b := newService(t, open(t, url)), newService(t, open(t, url))
	if _, err := a.Bootstrap(func(account.Secrets) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// b has not reloaded: its copy is empty.
	if _, err := a.AddCredit(account.DefaultOrg, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddCredit(account.DefaultOrg, 50); err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	accepted.Store(150)
	var wg sync.WaitGroup
	for _, svc := range []*account.Service{a, b, a, b} {
		wg.Go(func() {
			for range 10 {
				_, err := svc.AddCredit(account.DefaultOrg, 1)
				var ae *api.Error
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.As(err, &ae) && ae.HTTPStatus() == 409:
					// Lost a race with the other replica: refused, not lost.
				default:
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for _, svc := range []*account.Service{a, b} {
		if err := svc.Reload(); err != nil {
			t.Fatal(err)
		}
		o, err := svc.Org(account.DefaultOrg)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.Settings.CreditBalanceGBP; got != money.GBP(accepted.Load()) {
			t.Fatalf("balance %v, accepted %v", got, accepted.Load())
		}
	}
	t.Logf("%d of 40 concurrent credits accepted", accepted.Load()-150)
}

// A last-used time never moves back, whichever replica flushes last.
func TestLastUsedOnlyMovesForward(t *testing.T) {
	st := open(t, pg.CreateDB(t))
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Time{t0, t0.Add(time.Hour), t0.Add(time.Minute)} {
		if err := st.WriteAccounts(func(w account.Writer) error { return w.PutLastUsed("svc_k_a", at) }); err != nil {
			t.Fatal(err)
		}
	}
	r, err := st.LoadAccounts()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.LastUsed["svc_k_a"]; !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("last used %v, want %v", got, t0.Add(time.Hour))
	}
}

// A write decided on records another replica changed since is refused.
func TestWriteAccountsIfStale(t *testing.T) {
	st := open(t, pg.CreateDB(t))
	r, err := st.LoadAccounts()
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string) func(account.Writer) error {
		return func(w account.Writer) error { return w.PutUser(account.User{ID: name, Name: name}) }
	}
	v, err := st.WriteAccountsIf(r.Version, put("a"))
	if err != nil || v != r.Version+1 {
		t.Fatalf("WriteAccountsIf = %d, %v; want %d", v, err, r.Version+1)
	}
	called := false
	if _, err := st.WriteAccountsIf(r.Version, func(account.Writer) error { called = true; return nil }); !errors.Is(err, account.ErrStale) || called {
		t.Fatalf("a stale write: %v, fn called %v", err, called)
	}
	// Last-used flushes move no version.
	if err := st.WriteAccounts(func(w account.Writer) error { return w.PutLastUsed("svc_k_a", time.Now()) }); err != nil {
		t.Fatal(err)
	}
	if _, err := st.WriteAccountsIf(v, put("b")); err != nil {
		t.Fatal(err)
	}
}

// A migration refuses, whole, accounts whose names the database gives to
// other ids, naming each pair; the same accounts copied again are not a
// clash.
func TestImportAccountsRefusesNameClashes(t *testing.T) {
	st := open(t, pg.CreateDB(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	first := account.Records{
		Orgs:  []account.Org{{ID: "org-a", Name: "acme", CreatedAt: at}},
		Users: []account.User{{ID: "user-a", Name: "ann", CreatedAt: at}},
	}
	if err := st.ImportAccounts(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := st.ImportAccounts(ctx, first); err != nil {
		t.Fatalf("the same accounts again: %v", err)
	}
	other := account.Records{
		Orgs:  []account.Org{{ID: "org-b", Name: "acme", CreatedAt: at}, {ID: "org-c", Name: "beta", CreatedAt: at}},
		Users: []account.User{{ID: "user-b", Name: "ann", CreatedAt: at}},
	}
	err := st.ImportAccounts(ctx, other)
	for _, want := range []string{`organisation "acme" is org-a in the database and org-b in the data directory`,
		`user "ann" is user-a in the database and user-b in the data directory`, "nothing was copied"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("ImportAccounts with clashing names = %v, want %q", err, want)
		}
	}
	got, err := st.LoadAccounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Orgs) != 1 || got.Orgs[0].ID != "org-a" || len(got.Users) != 1 || got.Users[0].ID != "user-a" {
		t.Fatalf("after a refused copy the database holds %+v and %+v", got.Orgs, got.Users)
	}
}

// A replica hears of another's revocation of a worker token at its next
// reload, and of nothing at a reload that revoked none.
func TestReloadSignalsRevokedTokensOnly(t *testing.T) {
	url := pg.CreateDB(t)
	a, b := newService(t, open(t, url)), newService(t, open(t, url))
	if _, err := a.Bootstrap(func(account.Secrets) error { return nil }); err != nil {
		t.Fatal(err)
	}
	signalled := func() bool {
		select {
		case <-b.TokensRevoked():
			return true
		default:
			return false
		}
	}
	tok, err := a.CreateWorkerToken(account.DefaultOrg, api.CreateWorkerTokenRequest{Name: "gpu-box"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.Reload(); err != nil {
			t.Fatal(err)
		}
		if signalled() {
			t.Fatal("a reload that revoked nothing was signalled")
		}
	}
	if _, err := a.RevokeWorkerToken(account.DefaultOrg, tok.Prefix); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	if !signalled() || b.WorkerTokenLive(tok.ID) {
		t.Fatal("another replica's revocation was not signalled at the reload")
	}
}
