package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// RentLimiter is the rental rate limit of a gateway on its own, kept in
// its store: when each API key's last counted request came. Every call
// counts, the refused ones too, and the count outlives a restart.
type RentLimiter struct {
	store *Store
	now   func() time.Time
}

// RentLimiter returns the store's rental rate limit, on the clock now
// reads.
func (s *Store) RentLimiter(now func() time.Time) *RentLimiter {
	return &RentLimiter{store: s, now: now}
}

// AllowRent implements store.RentLimiter. A call that is refused is only
// read: the writes, one a minute per key at most, are of calls counted.
func (l *RentLimiter) AllowRent(_ context.Context, keyID string, every time.Duration) (bool, time.Duration, error) {
	now := l.now()
	key := []byte(keyID)
	var wait time.Duration
	err := l.store.db.View(func(tx *bbolt.Tx) error {
		wait = l.wait(tx.Bucket(bucketRentLimits), key, now, every)
		return nil
	})
	if err != nil || wait > 0 {
		return false, wait, err
	}
	err = l.store.db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketRentLimits)
		if err != nil {
			return err
		}
		// Another call of the key may have been counted since the read.
		if wait = l.wait(b, key, now, every); wait > 0 {
			return nil
		}
		// What no longer limits anyone goes; there are a few a minute.
		var stale [][]byte
		_ = b.ForEach(func(k, v []byte) error {
			if len(v) != 8 || now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(v)))) >= every {
				stale = append(stale, bytes.Clone(k))
			}
			return nil
		})
		for _, k := range stale {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return b.Put(key, binary.BigEndian.AppendUint64(nil, uint64(now.UnixNano())))
	})
	if err != nil || wait > 0 {
		return false, wait, err
	}
	return true, 0, nil
}

// wait is how long until key may ask again, 0 when it may now. A last
// call dated after now (the clock stepped back) holds it for every at
// most.
func (l *RentLimiter) wait(b *bbolt.Bucket, key []byte, now time.Time, every time.Duration) time.Duration {
	if b == nil {
		return 0
	}
	v := b.Get(key)
	if len(v) != 8 {
		return 0
	}
	since := now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(v))))
	if since >= every {
		return 0
	}
	return min(every-since, every)
}
