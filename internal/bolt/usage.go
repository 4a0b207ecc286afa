package bolt

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
)

// Usage stores the usage log and its aggregates through a Writer.
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

// addEncoded adds the totals encoded at the start of v to t and returns
// what follows them (a worker's name). A version 1 aggregate, from before
// energy was counted, reads as having none; it is rewritten as version 2
// the next time a row adds to it.
func addEncoded(t *api.UsageTotals, v []byte) ([]byte, error) {
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
	t.Requests += f(0)
	t.Succeeded += f(1)
	t.Failed += f(2)
	t.Cancelled += f(3)
	t.PromptTokens += f(4)
	t.CompletionTokens += f(5)
	t.TotalTokens += f(6)
	t.ReasoningTokens += f(7)
	t.CachedTokens += f(8)
	t.Images += f(9)
	t.RequestDurationMs += f(10)
	t.AudioSeconds += math.Float64frombits(uint64(f(11)))
	if size == totalsSize {
		t.EnergyWh += math.Float64frombits(uint64(f(12)))
	}
	return v[size:], nil
}

// rowTotals is what one row adds to every aggregate it counts toward.
func rowTotals(r *api.UsageRow) api.UsageTotals {
	t := api.UsageTotals{
		Requests:          1,
		PromptTokens:      int64(r.PromptTokens),
		CompletionTokens:  int64(r.CompletionTokens),
		TotalTokens:       int64(r.TotalTokens),
		Images:            int64(r.Images),
		RequestDurationMs: r.RequestDurationMs,
	}
	switch {
	case r.StatusCode < 400:
		t.Succeeded = 1
	case r.StatusCode == 499:
		t.Cancelled = 1
	default:
		t.Failed = 1
	}
	if r.ReasoningTokens != nil {
		t.ReasoningTokens = int64(*r.ReasoningTokens)
	}
	if r.CachedTokens != nil {
		t.CachedTokens = int64(*r.CachedTokens)
	}
	if r.AudioSeconds != nil {
		t.AudioSeconds = *r.AudioSeconds
	}
	if r.EnergyWh != nil {
		t.EnergyWh = *r.EnergyWh
	}
	return t
}

// finite drops a NaN or infinite measurement: the API's JSON cannot carry
// it, and one in an aggregate would spoil every total it is added to.
func finite(p *float64) *float64 {
	if p == nil || math.IsNaN(*p) || math.IsInf(*p, 0) {
		return nil
	}
	return p
}

// Sync waits until the rows recorded so far are committed, so a read that
// follows sees them (see Writer.Sync).
func (u *Usage) Sync(ctx context.Context) error { return u.w.Sync(ctx) }

// Record queues a row; it never blocks. The row and the organisation's
// aggregates are written in the same group-commit transaction.
func (u *Usage) Record(orgID string, row api.UsageRow) {
	row.CreatedAt = row.CreatedAt.UTC()
	row.TokensPerSecond = finite(row.TokensPerSecond)
	row.DraftAcceptanceRate = finite(row.DraftAcceptanceRate)
	row.AudioSeconds = finite(row.AudioSeconds)
	row.EnergyWh = finite(row.EnergyWh)
	// Encode here, on the caller's goroutine, so the single committing
	// goroutine only does the tree work.
	data := appendUsageRow(make([]byte, 0, 160), &row)
	rowKey := timeKey(orgID, row.CreatedAt, u.seq.Add(1))
	d := rowTotals(&row)

	dayKey := make([]byte, 0, len(orgID)+1+dateLen)
	dayKey = append(dayKey, orgID...)
	dayKey = append(dayKey, 0)
	dayKey = row.CreatedAt.AppendFormat(dayKey, time.DateOnly)
	modelKey := subKey(dayKey, row.Model)
	var workerKey []byte
	if row.WorkerID != "" {
		workerKey = subKey(dayKey, row.WorkerID)
	}
	name := row.WorkerName

	u.w.add(func(tx *bbolt.Tx) error {
		rows := tx.Bucket(bucketUsageRows)
		// Keys grow with time, so pages only ever fill at the end: split
		// them full rather than half full, which would double the file.
		rows.FillPercent = 0.95
		if err := rows.Put(rowKey, data); err != nil {
			return fmt.Errorf("put usage row: %w", err)
		}
		if err := u.bump(tx.Bucket(bucketUsageDays), dayKey, &d, false, ""); err != nil {
			return err
		}
		if err := u.bump(tx.Bucket(bucketUsageModels), modelKey, &d, false, ""); err != nil {
			return err
		}
		if workerKey == nil {
			return nil
		}
		return u.bump(tx.Bucket(bucketUsageWorkers), workerKey, &d, true, name)
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
// carries the name after the totals: the latest non-empty name wins.
//
// Each row reads and rewrites its aggregates directly. Caching the decoded
// values per transaction was measured and gained nothing: the Put that
// must follow seeks the same path the Get did, and commit dominates.
func (u *Usage) bump(b *bbolt.Bucket, key []byte, d *api.UsageTotals, named bool, name string) error {
	t := *d
	var old []byte
	if v := b.Get(key); v != nil {
		rest, err := addEncoded(&t, v)
		if err != nil {
			// Failing would fail every later commit touching this key, and
			// the events sharing those commits: start the aggregate over.
			u.w.log.Error("usage aggregate reset", "key", fmt.Sprintf("%q", key), "err", err)
			t, rest = *d, nil
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
type UsageQuery struct {
	WorkerID string
	Limit    int
	Offset   int
}

// Logs lists rows newest first, filtered by worker when WorkerID != "".
// Only the rows of the page are decoded: the filter reads a compact row's
// worker field alone.
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
		k, v := c.Seek(append([]byte(orgID), 1))
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		skipped := 0
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
			if skipped < q.Offset {
				skipped++
				continue
			}
			r, err := decodeUsageRow(v)
			if err != nil {
				return fmt.Errorf("usage row %q: %w", k, err)
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

// window is the inclusive range of UTC dates of the last days days.
type window struct {
	first    time.Time
	from, to string
}

func newWindow(days int, now time.Time) (window, error) {
	if days < 1 {
		return window{}, fmt.Errorf("usage window of %d days", days)
	}
	y, m, d := now.UTC().Date()
	last := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	first := last.AddDate(0, 0, -(days - 1))
	return window{first: first, from: first.Format(time.DateOnly), to: last.Format(time.DateOnly)}, nil
}

// scan calls fn with the date, the part after the date (empty for day
// aggregates, else 0x00 and the model or worker) and the value of every
// aggregate of orgID in w, oldest day first.
func (w window) scan(b *bbolt.Bucket, orgID string, fn func(date, rest, v []byte) error) error {
	prefix := make([]byte, 0, len(orgID)+1+dateLen)
	prefix = append(prefix, orgID...)
	prefix = append(prefix, 0)
	start := append(prefix, w.from...)
	to := []byte(w.to)
	c := b.Cursor()
	for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(k) < len(prefix)+dateLen {
			continue // not an aggregate key; cannot happen, but never slice past it
		}
		date := k[len(prefix) : len(prefix)+dateLen]
		if bytes.Compare(date, to) > 0 {
			break
		}
		if err := fn(date, k[len(prefix)+dateLen:], v); err != nil {
			return fmt.Errorf("usage aggregate %q: %w", k, err)
		}
	}
	return nil
}

// Summary totals the last days UTC days up to and including now's day.
func (u *Usage) Summary(orgID string, days int, now time.Time) (api.UsageSummary, error) {
	w, err := newWindow(days, now)
	if err != nil {
		return api.UsageSummary{}, err
	}
	out := api.UsageSummary{Days: days, From: w.from, To: w.to}
	err = u.store.db.View(func(tx *bbolt.Tx) error {
		return w.scan(tx.Bucket(bucketUsageDays), orgID, func(_, _, v []byte) error {
			_, err := addEncoded(&out.UsageTotals, v)
			return err
		})
	})
	return out, err
}

// Daily returns one entry per day of the window, oldest first, including
// days with no requests (all zero).
func (u *Usage) Daily(orgID string, days int, now time.Time) ([]api.UsageDay, error) {
	w, err := newWindow(days, now)
	if err != nil {
		return nil, err
	}
	out := make([]api.UsageDay, days)
	for i := range out {
		out[i].Date = w.first.AddDate(0, 0, i).Format(time.DateOnly)
	}
	err = u.store.db.View(func(tx *bbolt.Tx) error {
		i := 0
		return w.scan(tx.Bucket(bucketUsageDays), orgID, func(date, _, v []byte) error {
			// Both run oldest first, so the slot is found by walking on.
			for i < len(out) && out[i].Date != string(date) {
				i++
			}
			if i == len(out) {
				return errors.New("date outside the window")
			}
			_, err := addEncoded(&out[i].UsageTotals, v)
			return err
		})
	})
	return out, err
}

// Breakdown orders.
const (
	sortTokens   = "tokens"
	sortRequests = "requests"
)

// breakdownTop is how many models and workers a breakdown lists.
const breakdownTop = 10

// Breakdown returns totals per model and per worker over the window, top
// 10 of each, sorted by total tokens (sort "tokens", the default: any
// other value) or by request count (sort "requests"), ties broken by the
// other measure then by name.
func (u *Usage) Breakdown(orgID string, days int, sort string, now time.Time) (api.UsageBreakdown, error) {
	w, err := newWindow(days, now)
	if err != nil {
		return api.UsageBreakdown{}, err
	}
	if sort != sortRequests {
		sort = sortTokens
	}
	out := api.UsageBreakdown{Days: days, From: w.from, To: w.to, Sort: sort, Models: []api.ModelUsage{}, Workers: []api.WorkerUsage{}}
	models := map[string]*api.ModelUsage{}
	workers := map[string]*api.WorkerUsage{}
	err = u.store.db.View(func(tx *bbolt.Tx) error {
		err := w.scan(tx.Bucket(bucketUsageModels), orgID, func(_, rest, v []byte) error {
			if len(rest) == 0 || rest[0] != 0 {
				return errBadTotals
			}
			m := models[string(rest[1:])] // no allocation for the lookup
			if m == nil {
				m = &api.ModelUsage{Model: string(rest[1:])}
				models[m.Model] = m
			}
			_, err := addEncoded(&m.UsageTotals, v)
			return err
		})
		if err != nil {
			return err
		}
		return w.scan(tx.Bucket(bucketUsageWorkers), orgID, func(_, rest, v []byte) error {
			if len(rest) == 0 || rest[0] != 0 {
				return errBadTotals
			}
			wu := workers[string(rest[1:])]
			if wu == nil {
				wu = &api.WorkerUsage{WorkerID: string(rest[1:])}
				workers[wu.WorkerID] = wu
			}
			name, err := addEncoded(&wu.UsageTotals, v)
			// Days come oldest first, so the newest day's name wins.
			if len(name) > 0 && string(name) != wu.WorkerName {
				wu.WorkerName = string(name)
			}
			return err
		})
	})
	if err != nil {
		return api.UsageBreakdown{}, err
	}
	for _, m := range models {
		m.WhPer1KTokens = whPer1K(&m.UsageTotals)
		out.Models = append(out.Models, *m)
	}
	for _, wu := range workers {
		wu.WhPer1KTokens = whPer1K(&wu.UsageTotals)
		out.Workers = append(out.Workers, *wu)
	}
	slices.SortFunc(out.Models, func(a, b api.ModelUsage) int {
		return cmp.Or(rank(sort, &a.UsageTotals, &b.UsageTotals), cmp.Compare(a.Model, b.Model))
	})
	slices.SortFunc(out.Workers, func(a, b api.WorkerUsage) int {
		return cmp.Or(rank(sort, &a.UsageTotals, &b.UsageTotals),
			cmp.Compare(a.WorkerName, b.WorkerName), cmp.Compare(a.WorkerID, b.WorkerID))
	})
	out.Models = out.Models[:min(len(out.Models), breakdownTop)]
	out.Workers = out.Workers[:min(len(out.Workers), breakdownTop)]
	return out, nil
}

// whPer1K is the energy a thousand tokens took, when both were counted.
func whPer1K(t *api.UsageTotals) *float64 {
	if t.EnergyWh <= 0 || t.TotalTokens <= 0 {
		return nil
	}
	v := t.EnergyWh * 1000 / float64(t.TotalTokens)
	return &v
}

// rank orders a before b when it has more of the sort's measure, then
// more of the other.
func rank(sort string, a, b *api.UsageTotals) int {
	if sort == sortRequests {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(b.TotalTokens, a.TotalTokens))
	}
	return cmp.Or(cmp.Compare(b.TotalTokens, a.TotalTokens), cmp.Compare(b.Requests, a.Requests))
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
