package bolt

import (
	"encoding/json"
	"fmt"

	bbolt "go.etcd.io/bbolt"
)

// keyReturning holds the workers connected when the last server stopped.
var keyReturning = []byte("workers_at_stop")

// SaveReturning records, by organisation, the worker ids connected as the
// server stops: the server that starts next on this store expects them to
// reconnect, and lets requests wait for them a moment rather than answer
// that no worker is online.
func (s *Store) SaveReturning(byOrg map[string][]string) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		return putJSON(tx.Bucket(bucketMeta), keyReturning, byOrg)
	})
}

// TakeReturning reads what SaveReturning recorded and forgets it, so a
// worker that never comes back is waited for once. It is empty after a
// crash, when nothing was recorded.
func (s *Store) TakeReturning() (map[string][]string, error) {
	var out map[string][]string
	err := s.takeJSON(keyReturning, &out)
	return out, err
}

// takeJSON decodes the meta record at key into out and deletes it. A
// record that does not decode is dropped all the same, with an error: it
// would fail every start after. Without one, out is left as it is.
func (s *Store) takeJSON(key []byte, out any) error {
	var decodeErr error
	err := s.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		v := meta.Get(key)
		if v == nil {
			return nil
		}
		if err := json.Unmarshal(v, out); err != nil {
			decodeErr = fmt.Errorf("decode %s: %w", key, err)
		}
		return meta.Delete(key)
	})
	if err != nil {
		return err
	}
	return decodeErr
}

// keyListed holds the workers listed when the last server stopped.
var keyListed = []byte("workers_listed_at_stop")

// SaveListed records the workers the server lists as it stops (connected
// and recently offline; fleet.Remember), for the server that starts next
// on this store to list them offline until they reconnect.
func (s *Store) SaveListed(v any) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		return putJSON(tx.Bucket(bucketMeta), keyListed, v)
	})
}

// TakeListed decodes what SaveListed recorded into out and forgets it; it
// leaves out as it is after a crash, when nothing was recorded. A record
// that does not decode is dropped all the same, with an error.
func (s *Store) TakeListed(out any) error { return s.takeJSON(keyListed, out) }
