package bolt

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// keyReturning holds the workers connected when the last server stopped.
var keyReturning = []byte("workers_at_stop")

// TakeReturning reads, by organisation, the worker ids connected as the
// last server stopped (SaveFleet), and forgets them: the server that
// starts next expects them to reconnect, and lets requests wait for them
// a moment rather than answer that no worker is online; a worker that
// never comes back is waited for once.
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

// SaveFleet records both what SaveReturning and what SaveListed record, in
// one transaction: as a server stops, and every few seconds while it
// runs, so that a server that starts after a crash finds the fleet as it
// was moments before.
func (s *Store) SaveFleet(returning map[string][]string, listed any) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if err := putJSON(meta, keyReturning, returning); err != nil {
			return err
		}
		return putJSON(meta, keyListed, listed)
	})
}

// TakeListed decodes the workers the last server listed (SaveFleet) into
// out and forgets them; it leaves out as it is when nothing was recorded.
// A record that does not decode is dropped all the same, with an error.
func (s *Store) TakeListed(out any) error { return s.takeJSON(keyListed, out) }

// keyAlive holds when the server last said it was running with the fleet
// it last recorded (SaveAlive).
var keyAlive = []byte("fleet_alive_at")

// SaveAlive records that the server was running at t with the fleet as
// SaveFleet last recorded it: a few bytes every few seconds, where the
// fleet's record may be megabytes. A server that starts after a crash
// takes the workers that record lists as connected to have been so until
// then (TakeAlive).
func (s *Store) SaveAlive(t time.Time) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyAlive, binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano())))
	})
}

// TakeAlive reads the time SaveAlive last recorded, zero when none, and
// forgets it.
func (s *Store) TakeAlive() (time.Time, error) {
	var at time.Time
	err := s.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyAlive); len(v) == 8 {
			at = time.Unix(0, int64(binary.BigEndian.Uint64(v)))
		}
		return meta.Delete(keyAlive)
	})
	return at, err
}
