package bolt

import (
	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/rental"
	"github.com/svc-dev/svc/internal/store"
)

var (
	_ store.Usage   = (*Usage)(nil)
	_ store.Events  = (*Events)(nil)
	_ store.Power   = (*Power)(nil)
	_ account.Store = (*Store)(nil)
	_ rental.Ledger = (*Rentals)(nil)
)
