package bolt

import (
	"fmt"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/rental"
)

// Rentals is the rental ledger: one value per rental, written in its own
// transaction before the change it records is acted on or answered, so a
// rental the gateway has told anyone about survives a crash. Rentals
// change a few times in their life, far below what needs group commit.
type Rentals struct{ store *Store }

// Rentals returns the rental ledger.
func (s *Store) Rentals() *Rentals { return &Rentals{store: s} }

// Save writes a rental's record (JSON, encoded by the caller). One
// gateway has no homes to fence by.
func (r *Rentals) Save(_ rental.Fence, id string, record []byte) error {
	if err := r.store.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketRentals).Put([]byte(id), record)
	}); err != nil {
		return fmt.Errorf("save rental %s: %w", id, err)
	}
	return nil
}

// All returns every rental record.
func (r *Rentals) All() ([][]byte, error) {
	var out [][]byte
	err := r.store.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketRentals).ForEach(func(_, v []byte) error {
			out = append(out, append([]byte(nil), v...))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read rentals: %w", err)
	}
	return out, nil
}

// Org returns the records of one organisation's rentals.
func (r *Rentals) Org(orgID string) ([][]byte, error) {
	all, err := r.All()
	if err != nil {
		return nil, err
	}
	return rental.OfOrg(all, orgID)
}
