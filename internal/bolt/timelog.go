package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// Worker events and usage rows are both time logs: keyed by org id, 0x00,
// big-endian nanoseconds, big-endian sequence, so one organisation's
// entries are contiguous and in time order, a newest-first listing is one
// reverse range scan, and pruning takes the old head of each organisation.

// timeKeySuffix is the length after the org id: 0x00, time and sequence.
const timeKeySuffix = 1 + 8 + 8

// ctxEvery is how many entries a scan reads between looks at its context:
// a look is cheap, but not next to a key comparison.
const ctxEvery = 256

func timeKey(orgID string, t time.Time, seq uint64) []byte {
	k := make([]byte, 0, len(orgID)+timeKeySuffix)
	k = append(k, orgID...)
	k = append(k, 0)
	k = binary.BigEndian.AppendUint64(k, uint64(t.UnixNano()))
	return binary.BigEndian.AppendUint64(k, seq)
}

// startSeq starts a log's sequence at the clock rather than at zero so that
// entries of an earlier run with the very same timestamp are never
// overwritten.
func startSeq(seq *atomic.Uint64) { seq.Store(uint64(time.Now().UnixNano())) }

// newestPage decodes orgID's entries of bucket newest first and returns
// limit of them after skipping offset. skim, when set, rules an entry out
// from its encoding alone; keep, when set, confirms a decoded one. Without
// keep nothing skipped is decoded.
//
// A scan that skips many entries can run long, so ctx is checked every
// ctxEvery entries.
func newestPage[T any](ctx context.Context, db *bbolt.DB, bucket []byte, orgID string, offset, limit int, skim func([]byte) bool, keep func(*T) bool) ([]T, error) {
	out := []T{}
	if limit <= 0 {
		return out, nil
	}
	err := db.View(func(tx *bbolt.Tx) error {
		prefix := append([]byte(orgID), 0)
		c := tx.Bucket(bucket).Cursor()
		k, v := c.Seek(append([]byte(orgID), 1))
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		decode := func(x *T) error {
			if err := json.Unmarshal(v, x); err != nil {
				return fmt.Errorf("decode %s/%q: %w", bucket, k, err)
			}
			return nil
		}
		skipped, seen := 0, 0
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Prev() {
			if seen++; seen%ctxEvery == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if skim != nil && !skim(v) {
				continue
			}
			var x T
			if keep != nil {
				if err := decode(&x); err != nil {
					return err
				}
				if !keep(&x) {
					continue
				}
			}
			if skipped < offset {
				skipped++
				continue
			}
			if keep == nil {
				if err := decode(&x); err != nil {
					return err
				}
			}
			out = append(out, x)
			if len(out) >= limit {
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pruneBefore deletes the entries of bucket older than before, at most max
// of them, and returns how many.
func (s *Store) pruneBefore(bucket []byte, before time.Time, max int) (int, error) {
	if max <= 0 {
		return 0, nil
	}
	cutoff := before.UnixNano()
	n := 0
	err := s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucket)
		c := b.Cursor()
		var old [][]byte
		// Take the old head of each organisation, then seek straight past
		// the rest of it.
		for k, _ := c.First(); k != nil && len(old) < max; {
			i := len(k) - timeKeySuffix
			if i < 0 || k[i] != 0 {
				k, _ = c.Next() // not a time key; cannot happen
				continue
			}
			if int64(binary.BigEndian.Uint64(k[i+1:])) < cutoff {
				old = append(old, bytes.Clone(k))
				k, _ = c.Next()
				continue
			}
			k, _ = c.Seek(append(bytes.Clone(k[:i]), 1))
		}
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return fmt.Errorf("delete %s entry: %w", bucket, err)
			}
		}
		n = len(old)
		return nil
	})
	return n, err
}
