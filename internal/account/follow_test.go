package account_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/api"
)

// Follow reloads when the listener reports a change, and a reload keeps a
// last use newer in memory than in the store.
func TestFollowReloadsOnChange(t *testing.T) {
	f := newFixture(t)
	other, err := account.New(f.store, account.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan func(), 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- other.Follow(ctx, time.Hour, func(ctx context.Context, changed func()) error {
			reports <- changed
			<-ctx.Done()
			return nil
		})
	}()
	changed := <-reports

	// A use of the admin key on this side, not flushed.
	if _, err := other.Authenticate(f.secrets.AdminKey); err != nil {
		t.Fatal(err)
	}
	used := lastUsed(t, other, f)
	key, err := f.svc.CreateKey(account.DefaultOrg, api.CreateKeyRequest{User: account.DefaultUser, Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Authenticate(key.Secret); err == nil {
		t.Fatal("a key made elsewhere authenticates before any report")
	}
	changed()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := other.Authenticate(key.Secret); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a reported change was not reloaded")
		}
	}
	if got := lastUsed(t, other, f); got == nil || !got.Equal(*used) {
		t.Fatalf("last used %v after the reload, was %v", got, used)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func lastUsed(t *testing.T, svc *account.Service, f *fixture) *time.Time {
	t.Helper()
	p, err := svc.Authenticate(f.secrets.AdminKey)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := svc.ListKeys(account.DefaultOrg)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.ID == p.KeyID {
			return k.LastUsedAt
		}
	}
	t.Fatal("no admin key")
	return nil
}

// A listener that stops leaves Follow to its periodic resync.
func TestFollowResyncsWithoutListener(t *testing.T) {
	f := newFixture(t)
	other, err := account.New(f.store, account.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- other.Follow(ctx, 10*time.Millisecond, func(context.Context, func()) error {
			return errors.New("no notifications here")
		})
	}()
	key, err := f.svc.CreateKey(account.DefaultOrg, api.CreateKeyRequest{User: account.DefaultUser, Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := other.Authenticate(key.Secret); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not reloaded by the resync")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
