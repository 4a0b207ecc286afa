package bolt_test

import (
	"testing"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/rental"
	"github.com/svc-dev/svc/internal/store/storetest"
)

func openBolt(t *testing.T) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(t.TempDir(), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestAccountsConformance(t *testing.T) {
	storetest.Accounts(t, func(t *testing.T) account.Store { return openBolt(t) })
}

func TestRentalsConformance(t *testing.T) {
	storetest.Rentals(t, func(t *testing.T) (rental.Ledger, func(string) rental.Fence) {
		return openBolt(t).Rentals(), func(org string) rental.Fence { return rental.Fence{OrgID: org} }
	})
}
