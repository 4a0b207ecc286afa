package pgstore

import (
	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/rental"
	"github.com/svc-dev/svc/internal/store"
)

var (
	_ account.SharedStore = (*Store)(nil)
	_ store.RentLimiter   = (*Store)(nil)
	_ rental.Ledger       = (*Rentals)(nil)
)
