package bolt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/powerlog"
)

// What is here reads a whole store out, for `svc cluster migrate` to copy
// it into the shared store, and encodes rows as this store does, for the
// shared store to keep them in the same layout.

// EncodeUsageRow appends row's compact encoding (usagerow.go) to b.
func EncodeUsageRow(b []byte, row *api.UsageRow) []byte { return appendUsageRow(b, row) }

// DecodeUsageRow reads a usage row as stored: compact, or JSON as rows
// were stored before the compact layout.
func DecodeUsageRow(v []byte) (api.UsageRow, error) { return decodeUsageRow(v) }

// logOwner is the org id of a time log's key (see timeKey).
func logOwner(k []byte) (string, bool) {
	i := len(k) - timeKeySuffix
	if i < 0 || k[i] != 0 {
		return "", false
	}
	return string(k[:i]), true
}

// EachUsageRow calls fn with every usage row of every organisation,
// organisation by organisation, oldest first within one, in one read
// transaction, and data, the row's compact encoding (a row stored as
// JSON is encoded anew). A row that cannot be read ends it with an error.
func (s *Store) EachUsageRow(fn func(orgID string, row api.UsageRow, data []byte) error) error {
	return s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketUsageRows).ForEach(func(k, v []byte) error {
			org, ok := logOwner(k)
			if !ok {
				return fmt.Errorf("usage row key %q: not a time key", k)
			}
			r, err := decodeUsageRow(v)
			if err != nil {
				return fmt.Errorf("usage row %q: %w", k, err)
			}
			data := bytes.Clone(v)
			if len(v) > 0 && v[0] == '{' || r.RequestType == api.RequestSpeech && r.AudioFormat != nil {
				r = speechWithoutFormat(r)
				data = appendUsageRow(nil, &r)
			}
			return fn(org, r, data)
		})
	})
}

// TotalsKind names which of an organisation's totals a UsageTotal is.
type TotalsKind uint8

const (
	TotalsDay TotalsKind = iota + 1
	TotalsModel
	TotalsWorker
)

// UsageTotal is one stored aggregate (see Usage).
type UsageTotal struct {
	Kind  TotalsKind
	OrgID string
	// Day is the UTC date, YYYY-MM-DD.
	Day string
	// Key is the model (TotalsModel) or the worker id (TotalsWorker).
	Key string
	// Name is the name a worker's totals go by (TotalsWorker).
	Name   string
	Totals api.UsageTotals
}

// EachUsageTotal calls fn with every stored aggregate: the days, then the
// models, then the workers, each in key order. It includes the totals of
// rows pruned since: they are kept for good.
func (s *Store) EachUsageTotal(fn func(UsageTotal) error) error {
	return s.db.View(func(tx *bbolt.Tx) error {
		for _, b := range []struct {
			kind TotalsKind
			name []byte
		}{{TotalsDay, bucketUsageDays}, {TotalsModel, bucketUsageModels}, {TotalsWorker, bucketUsageWorkers}} {
			err := tx.Bucket(b.name).ForEach(func(k, v []byte) error {
				t := UsageTotal{Kind: b.kind}
				i := bytes.IndexByte(k, 0)
				if i < 0 || len(k) < i+1+dateLen {
					return fmt.Errorf("usage aggregate %s/%q: malformed key", b.name, k)
				}
				t.OrgID, t.Day = string(k[:i]), string(k[i+1:i+1+dateLen])
				rest := k[i+1+dateLen:]
				if b.kind == TotalsDay {
					if len(rest) != 0 {
						return fmt.Errorf("usage aggregate %s/%q: malformed key", b.name, k)
					}
				} else {
					if len(rest) == 0 || rest[0] != 0 {
						return fmt.Errorf("usage aggregate %s/%q: malformed key", b.name, k)
					}
					t.Key = string(rest[1:])
				}
				name, err := decodeTotals(&t.Totals, v)
				if err != nil {
					return fmt.Errorf("usage aggregate %s/%q: %w", b.name, k, err)
				}
				if b.kind == TotalsWorker {
					t.Name = string(name)
				}
				return fn(t)
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// EachEvent calls fn with every worker event of every organisation,
// oldest first within one, and its JSON as stored.
func (s *Store) EachEvent(fn func(orgID string, ev api.WorkerEvent, data []byte) error) error {
	return s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketEvents).ForEach(func(k, v []byte) error {
			org, ok := logOwner(k)
			if !ok {
				return fmt.Errorf("worker event key %q: not a time key", k)
			}
			var ev api.WorkerEvent
			if err := json.Unmarshal(v, &ev); err != nil {
				return fmt.Errorf("worker event %q: %w", k, err)
			}
			return fn(org, ev, bytes.Clone(v))
		})
	})
}

// PowerBucket is one stored bucket of a worker's power history.
type PowerBucket struct {
	WorkerID string
	// Res is the layer's resolution and Start the bucket's start, both in
	// seconds.
	Res, Start int64
	// Sums are sorted by key.
	Sums []powerlog.Sum
}

// EachPowerBucket calls fn with every stored power bucket, layer by
// layer, finest first, each worker's oldest first.
func (s *Store) EachPowerBucket(fn func(PowerBucket) error) error {
	return s.db.View(func(tx *bbolt.Tx) error {
		for _, l := range powerlog.Layers() {
			name, err := powerBucket(l.Res)
			if err != nil {
				return err
			}
			err = tx.Bucket(name).ForEach(func(k, v []byte) error {
				i := len(k) - 8
				if i < 1 || k[i-1] != 0 {
					return fmt.Errorf("power bucket %s/%q: malformed key", name, k)
				}
				sums, err := decodePowerSums(nil, v)
				if err != nil {
					return fmt.Errorf("power bucket %s/%q: %w", name, k, err)
				}
				for j := range sums {
					sums[j].Key = bytes.Clone(sums[j].Key)
				}
				return fn(PowerBucket{WorkerID: string(k[:i-1]), Res: l.Res, Start: int64(binary.BigEndian.Uint64(k[i:])), Sums: sums})
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// EachPowerWorker calls fn with what is stored of every worker beyond its
// buckets, in worker id order. Unlike Power.Workers, a value that cannot
// be read ends it with an error.
func (s *Store) EachPowerWorker(fn func(workerID string, st powerlog.Stored) error) error {
	return s.db.View(func(tx *bbolt.Tx) error {
		through, chans := tx.Bucket(bucketPowerThrough).Cursor(), tx.Bucket(bucketPowerChans).Cursor()
		tk, tv := through.First()
		ck, cv := chans.First()
		// Both buckets are keyed by worker id: walk them side by side.
		for tk != nil || ck != nil {
			var id []byte
			switch {
			case ck == nil || (tk != nil && bytes.Compare(tk, ck) < 0):
				id = tk
			default:
				id = ck
			}
			var st powerlog.Stored
			if tk != nil && bytes.Equal(tk, id) {
				if len(tv) != 8 {
					return fmt.Errorf("power through of %q: malformed", tk)
				}
				st.Through = int64(binary.BigEndian.Uint64(tv))
				tk, tv = through.Next()
			}
			if ck != nil && bytes.Equal(ck, id) {
				var m powerMeta
				if err := json.Unmarshal(cv, &m); err != nil {
					return fmt.Errorf("power channels of %q: %w", ck, err)
				}
				st.Meta = &powerlog.Meta{Channels: m.Channels, Machine: m.Machine}
				ck, cv = chans.Next()
			}
			if err := fn(string(id), st); err != nil {
				return err
			}
		}
		return nil
	})
}

// Inventory counts what a store holds, for a copy to be checked against
// its source.
type Inventory struct {
	UsageRows, UsageDays, UsageModels, UsageWorkers int
	Events                                          int
	// PowerBuckets counts the buckets of every layer; PowerWorkers the
	// workers with a through or channels stored.
	PowerBuckets, PowerWorkers int
}

// Inventory counts what the store holds.
func (s *Store) Inventory() (Inventory, error) {
	var inv Inventory
	err := s.db.View(func(tx *bbolt.Tx) error {
		n := func(name []byte) int { return tx.Bucket(name).Stats().KeyN }
		inv.UsageRows = n(bucketUsageRows)
		inv.UsageDays = n(bucketUsageDays)
		inv.UsageModels = n(bucketUsageModels)
		inv.UsageWorkers = n(bucketUsageWorkers)
		inv.Events = n(bucketEvents)
		inv.PowerBuckets = n(bucketPower60) + n(bucketPower300) + n(bucketPower3600)
		return nil
	})
	if err != nil {
		return inv, err
	}
	err = s.EachPowerWorker(func(string, powerlog.Stored) error {
		inv.PowerWorkers++
		return nil
	})
	return inv, err
}
