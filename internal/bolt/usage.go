package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/store"
	"github.com/svc-dev/svc/internal/usage"
)

// Usage stores the usage log and the totals it adds up to through a
// Writer; what a row adds up to, and what is told from the totals, is
// package usage's.
//
// Rows live in usage_rows as a time log (see timeKey), so a listing is
// one reverse range scan, each row in the compact layout of usagerow.go
// (or JSON, if it was written before that layout).
//
// Totals are kept at write time, in the same transaction as the row, so
// that summaries never scan rows:
//
//	usage_days:    org id, 0x00, YYYY-MM-DD                -> totals
//	usage_models:  org id, 0x00, YYYY-MM-DD, 0x00, model   -> totals
//	usage_workers: org id, 0x00, YYYY-MM-DD, 0x00, worker  -> totals, name
//
// The date sorts chronologically right after the organisation, so a window
// of days is one forward range scan in each bucket, touching only that
// window's aggregates. Totals are fixed-width binary (see appendTotals):
// they are read, added to and rewritten for every row.
type Usage struct {
	store *Store
	w     *Writer
	seq   atomic.Uint64
	// pruneBatch bounds the rows one pruning transaction deletes.
	pruneBatch int
}

// usagePruneBatch is how many rows one pruning transaction deletes by
// default. BenchmarkUsagePrune, on a million rows: the write transaction
// takes about 0.2 ms and 0.65 µs a row (1.4 ms for 2,000, 3.6 ms for
// 5,000, 13 ms for 20,000), against 0.3 ms for a one-row commit. At 2,000
// the writer waits for a round about as long as for a few of its own
// commits, and a year of 10M rows is still pruned in 5,000 rounds.
const usagePruneBatch = 2000

// Usage returns the usage store writing through w.
func (s *Store) Usage(w *Writer) *Usage {
	u := &Usage{store: s, w: w, pruneBatch: usagePruneBatch}
	startSeq(&u.seq)
	return u
}

const (
	// totalsVersion leads every encoded aggregate so the layout can grow
	// without guessing what an old value holds. Version 1 ended after
	// audio seconds; version 2 adds energy.
	totalsVersion = 2
	totalsFields  = 13
	totalsSize    = 1 + totalsFields*8
	totalsV1Size  = 1 + 12*8
	dateLen       = len(time.DateOnly)
)

// appendTotals encodes t as a version byte and thirteen little-endian
// 8-byte fields: eleven int64 counters, then audio seconds and energy
// (Wh) as float64 bits.
func appendTotals(b []byte, t *api.UsageTotals) []byte {
	b = append(b, totalsVersion)
	for _, v := range [...]int64{
		t.Requests, t.Succeeded, t.Failed, t.Cancelled,
		t.PromptTokens, t.CompletionTokens, t.TotalTokens, t.ReasoningTokens, t.CachedTokens,
		t.Images, t.RequestDurationMs,
	} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(t.AudioSeconds))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(t.EnergyWh))
}

var errBadTotals = errors.New("malformed usage totals")

// decodeTotals decodes the totals encoded at the start of v into t and
// returns what follows them (a worker's name). A version 1 aggregate,
// from before energy was counted, reads as having none; it is rewritten
// as version 2 the next time a row adds to it.
func decodeTotals(t *api.UsageTotals, v []byte) ([]byte, error) {
	size := totalsSize
	switch {
	case len(v) > 0 && v[0] == 1:
		size = totalsV1Size
	case len(v) == 0 || v[0] != totalsVersion:
		return nil, errBadTotals
	}
	if len(v) < size {
		return nil, errBadTotals
	}
	f := func(i int) int64 { return int64(binary.LittleEndian.Uint64(v[1+i*8:])) }
	*t = api.UsageTotals{
		Requests:          f(0),
		Succeeded:         f(1),
		Failed:            f(2),
		Cancelled:         f(3),
		PromptTokens:      f(4),
		CompletionTokens:  f(5),
		TotalTokens:       f(6),
		ReasoningTokens:   f(7),
		CachedTokens:      f(8),
		Images:            f(9),
		RequestDurationMs: f(10),
		AudioSeconds:      math.Float64frombits(uint64(f(11))),
	}
	if size == totalsSize {
		t.EnergyWh = math.Float64frombits(uint64(f(12)))
	}
	return v[size:], nil
}

// Sync waits until the rows recorded so far are committed, so a read that
// follows sees them (see Writer.Sync).
func (u *Usage) Sync(ctx context.Context) error { return u.w.Sync(ctx) }

// Record queues a row, cleaned and added up as package usage says; it
// never blocks. The row and what it adds to the organisation's totals are
// written in the same group-commit transaction. A row is never dropped:
// while the store cannot write, it waits in the writer's backlog (see
// Writer), which tells the server to refuse new inference at its bound.
func (u *Usage) Record(orgID string, row api.UsageRow) {
	usage.Clean(&row)
	u.put(orgID, &row, usage.RollupOf(&row))
}

// put queues row and adds r to the totals it names.
func (u *Usage) put(orgID string, row *api.UsageRow, r usage.Rollup) {
	// Encode here, on the caller's goroutine, so the single committing
	// goroutine only does the tree work.
	data := appendUsageRow(make([]byte, 0, 160), row)
	rowKey := timeKey(orgID, row.CreatedAt, u.seq.Add(1))

	dayKey := make([]byte, 0, len(orgID)+1+len(r.Day))
	dayKey = append(dayKey, orgID...)
	dayKey = append(dayKey, 0)
	dayKey = append(dayKey, r.Day...)
	modelKey := subKey(dayKey, r.Model)
	var workerKey []byte
	if r.WorkerID != "" {
		workerKey = subKey(dayKey, r.WorkerID)
	}

	size := len(data) + len(rowKey) + len(dayKey) + len(modelKey) + len(workerKey) + len(r.WorkerName)
	u.w.add(kindUsage, size, func(tx *bbolt.Tx) error {
		rows := tx.Bucket(bucketUsageRows)
		// Keys grow with time, so pages only ever fill at the end: split
		// them full rather than half full, which would double the file.
		rows.FillPercent = 0.95
		if err := rows.Put(rowKey, data); err != nil {
			return fmt.Errorf("put usage row: %w", err)
		}
		if err := u.bump(tx.Bucket(bucketUsageDays), dayKey, &r.Totals, false, ""); err != nil {
			return err
		}
		if err := u.bump(tx.Bucket(bucketUsageModels), modelKey, &r.Totals, false, ""); err != nil {
			return err
		}
		if workerKey == nil {
			return nil
		}
		return u.bump(tx.Bucket(bucketUsageWorkers), workerKey, &r.Totals, true, r.WorkerName)
	})
}

// subKey is a day key, 0x00 and a model or worker id.
func subKey(dayKey []byte, id string) []byte {
	k := make([]byte, 0, len(dayKey)+1+len(id))
	k = append(k, dayKey...)
	k = append(k, 0)
	return append(k, id...)
}

// bump adds d to the aggregate at key. A named aggregate (a worker's)
// carries the name after the totals: an empty name keeps the one stored.
//
// Each row reads and rewrites its aggregates directly. Caching the decoded
// values per transaction was measured and gained nothing: the Put that
// must follow seeks the same path the Get did, and commit dominates.
func (u *Usage) bump(b *bbolt.Bucket, key []byte, d *api.UsageTotals, named bool, name string) error {
	t := *d
	var old []byte
	if v := b.Get(key); v != nil {
		var stored api.UsageTotals
		rest, err := decodeTotals(&stored, v)
		if err != nil {
			// Failing would fail every later commit touching this key, and
			// the events sharing those commits: start the aggregate over.
			u.w.log.Error("usage aggregate reset", "key", fmt.Sprintf("%q", key), "err", err)
			rest = nil
		} else {
			usage.Add(&t, &stored)
		}
		old = rest
	}
	buf := make([]byte, 0, totalsSize+max(len(name), len(old)))
	buf = appendTotals(buf, &t)
	if named {
		if name != "" {
			buf = append(buf, name...)
		} else {
			buf = append(buf, old...)
		}
	}
	if err := b.Put(key, buf); err != nil {
		return fmt.Errorf("put usage aggregate: %w", err)
	}
	return nil
}

// UsageQuery filters and pages a listing.
type UsageQuery = store.UsageQuery

// Logs lists rows newest first, filtered by worker, status and model when
// set. Without a status or model filter only the rows of the page are
// decoded: the worker filter reads a compact row's worker field alone.
func (u *Usage) Logs(orgID string, q UsageQuery) ([]api.UsageRow, error) {
	out := []api.UsageRow{}
	if q.Limit <= 0 {
		return out, nil
	}
	var filter *workerFilter
	if q.WorkerID != "" {
		filter = newWorkerFilter(q.WorkerID)
	}
	err := u.store.db.View(func(tx *bbolt.Tx) error {
		prefix := append([]byte(orgID), 0)
		c := tx.Bucket(bucketUsageRows).Cursor()
		// The organisation's newest row is the last key before orgID, 0x01.
		var v []byte
		k, _ := c.Seek(append([]byte(orgID), 1))
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		skipped := 0
		// A status or model filter decodes each row the worker filter
		// kept: those fields sit behind variable-length ones.
		decodeAll := q.Status != 0 || q.Model != ""
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Prev() {
			if filter != nil {
				ok, err := filter.match(v)
				if err != nil {
					return fmt.Errorf("usage row %q: %w", k, err)
				}
				if !ok {
					continue
				}
			}
			var r api.UsageRow
			if decodeAll {
				var err error
				if r, err = decodeUsageRow(v); err != nil {
					return fmt.Errorf("usage row %q: %w", k, err)
				}
				if q.Status != 0 && r.StatusCode != q.Status || q.Model != "" && r.Model != q.Model {
					continue
				}
			}
			if skipped < q.Offset {
				skipped++
				continue
			}
			if !decodeAll {
				var err error
				if r, err = decodeUsageRow(v); err != nil {
					return fmt.Errorf("usage row %q: %w", k, err)
				}
			}
			out = append(out, r)
			if len(out) >= q.Limit {
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

// Days calls fn with each of orgID's day totals dated from to to
// (YYYY-MM-DD, both in), oldest first. day and t are valid only during the
// call.
func (u *Usage) Days(orgID, from, to string, fn func(day []byte, t *api.UsageTotals) error) error {
	return u.scan(bucketUsageDays, orgID, from, to, func(day, rest, v []byte, t *api.UsageTotals) error {
		if _, err := decodeTotals(t, v); err != nil {
			return err
		}
		return fn(day, t)
	})
}

// Models calls fn with each of orgID's model totals dated from to to,
// oldest day first. Its arguments are valid only during the call.
func (u *Usage) Models(orgID, from, to string, fn func(day, model []byte, t *api.UsageTotals) error) error {
	return u.scan(bucketUsageModels, orgID, from, to, func(day, rest, v []byte, t *api.UsageTotals) error {
		if len(rest) == 0 || rest[0] != 0 {
			return errBadTotals
		}
		if _, err := decodeTotals(t, v); err != nil {
			return err
		}
		return fn(day, rest[1:], t)
	})
}

// Workers calls fn with each of orgID's worker totals dated from to to,
// oldest day first, and the name the worker went by that day. Its
// arguments are valid only during the call.
func (u *Usage) Workers(orgID, from, to string, fn func(day, workerID, name []byte, t *api.UsageTotals) error) error {
	return u.scan(bucketUsageWorkers, orgID, from, to, func(day, rest, v []byte, t *api.UsageTotals) error {
		if len(rest) == 0 || rest[0] != 0 {
			return errBadTotals
		}
		name, err := decodeTotals(t, v)
		if err != nil {
			return err
		}
		return fn(day, rest[1:], name, t)
	})
}

// scan calls fn with the date, the part after the date (empty for day
// aggregates, else 0x00 and the model or worker) and the value of every
// aggregate of orgID in bucket dated from to to, oldest day first, and
// one UsageTotals to decode each into.
func (u *Usage) scan(bucket []byte, orgID, from, to string, fn func(date, rest, v []byte, t *api.UsageTotals) error) error {
	return u.store.db.View(func(tx *bbolt.Tx) error {
		prefix := make([]byte, 0, len(orgID)+1+dateLen)
		prefix = append(prefix, orgID...)
		prefix = append(prefix, 0)
		start := append(prefix, from...)
		last := []byte(to)
		var t api.UsageTotals
		c := tx.Bucket(bucket).Cursor()
		for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(k) < len(prefix)+dateLen {
				continue // not an aggregate key; cannot happen, but never slice past it
			}
			date := k[len(prefix) : len(prefix)+dateLen]
			if bytes.Compare(date, last) > 0 {
				break
			}
			if err := fn(date, k[len(prefix)+dateLen:], v, &t); err != nil {
				return fmt.Errorf("usage aggregate %q: %w", k, err)
			}
		}
		return nil
	})
}

// Summary totals the last days UTC days up to and including now's day
// (usage.Summary).
func (u *Usage) Summary(orgID string, days int, now time.Time) (api.UsageSummary, error) {
	return usage.Summary(u, orgID, days, now)
}

// Daily returns one entry per day of the window, oldest first, including
// days with no requests (usage.Daily).
func (u *Usage) Daily(orgID string, days int, now time.Time) ([]api.UsageDay, error) {
	return usage.Daily(u, orgID, days, now)
}

// Breakdown returns the top models and workers over the window
// (usage.Breakdown).
func (u *Usage) Breakdown(orgID string, days int, sort string, now time.Time) (api.UsageBreakdown, error) {
	return usage.Breakdown(u, orgID, days, sort, now)
}

// PruneUsage deletes the rows created before before, never the aggregates,
// and returns how many it deleted. It works in rounds of at most
// pruneBatch rows: a read transaction finds them, a write transaction
// deletes them, so the writer's group commits, which wait for that write
// transaction, are held up briefly however many rows are due (a year's
// worth the first time a store is pruned). It stops early, between
// rounds, when ctx ends.
func (u *Usage) PruneUsage(ctx context.Context, before time.Time) (int, error) {
	cutoff := before.UnixNano()
	n := 0
	var from []byte // where the next round's scan resumes
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		old, next, err := u.oldRows(from, cutoff)
		if err != nil {
			return n, err
		}
		if len(old) == 0 {
			return n, nil
		}
		if err := u.deleteRows(old); err != nil {
			return n, err
		}
		n += len(old)
		if next == nil {
			return n, nil
		}
		from = next
	}
}

// oldRows returns up to pruneBatch keys of rows older than cutoff (Unix
// ns), from from on, and the key the next round starts at (nil at the
// end). Keys group by organisation and run oldest first within one, so it
// takes the old head of each organisation and seeks straight past the
// rest.
func (u *Usage) oldRows(from []byte, cutoff int64) (old [][]byte, next []byte, err error) {
	err = u.store.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketUsageRows).Cursor()
		k, _ := c.Seek(from)
		for k != nil && len(old) < u.pruneBatch {
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
		next = bytes.Clone(k)
		return nil
	})
	return old, next, err
}

// deleteRows deletes keys in one write transaction.
func (u *Usage) deleteRows(keys [][]byte) error {
	return u.store.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketUsageRows)
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return fmt.Errorf("delete usage row: %w", err)
			}
		}
		return nil
	})
}
