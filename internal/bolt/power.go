package bolt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/powerlog"
)

// Power stores workers' power history through a Writer: the buckets
// powerlog adds reports up into, at each of its resolutions, and what it
// knows of each worker beyond them.
//
//	power_60:       worker id, 0x00, bucket start -> channel sums
//	power_300:      worker id, 0x00, bucket start -> channel sums
//	power_3600:     worker id, 0x00, bucket start -> channel sums
//	power_through:  worker id -> end of the last window recorded   (big-endian Unix ns)
//	power_channels: worker id -> latest channels and machine method (JSON)
//
// Through changes with every report and channels hardly ever, so they are
// kept apart: a report rewrites 8 bytes rather than a kilobyte of JSON.
//
// The bucket start is big-endian Unix seconds, so a worker's buckets are
// contiguous and in time order and a history is one forward range scan.
//
// One key holds every channel of a bucket (see appendPowerSums) rather
// than one key per channel. A 30-day history then reads 720 keys, already
// one per point in time order, instead of 7,200 to be merged by time; and
// the key and bbolt's 16-byte element header are paid once per bucket
// rather than per channel. Both were measured on 100 workers of ten
// channels and 30 days of hourly buckets: a key per channel took twice
// the space (16.1 kB a worker-day in use against 8.0 kB) and took 1.8
// times as long to read a worker's 30 days (115 µs against 65 µs; the
// whole History, which must build a map per point, 450 µs against 370 µs).
// The price is that adding to one channel rewrites the bucket's ~300
// bytes, but a report adds to every channel at once anyway.
type Power struct {
	store *Store
	w     *Writer
	// pruneBatch bounds the keys one pruning transaction deletes.
	pruneBatch int
}

// powerMeta is a power_channels value.
type powerMeta struct {
	Machine  string             `json:"machine,omitempty"`
	Channels []api.PowerChannel `json:"channels"`
}

const (
	// powerSumsVersion leads every bucket value so the layout can grow.
	powerSumsVersion = 1
	// powerSumSize is one channel's sums after its key: joules, covered
	// seconds and peak watts.
	powerSumSize = 3 * 8
	// powerPruneBatch is how many keys one pruning transaction deletes by
	// default: measured at half a millisecond of work before the commit,
	// whose fsyncs cost what any group commit's do, so the writer waits
	// about as long for it as for one of its own commits.
	powerPruneBatch = 1000
)

// Power returns the power history store writing through w.
func (s *Store) Power(w *Writer) *Power {
	return &Power{store: s, w: w, pruneBatch: powerPruneBatch}
}

// Logger is where the store logs what it could not store or read, for
// the history's rules to log what they drop beside it.
func (p *Power) Logger() *slog.Logger { return p.w.log }

// powerBucket is the bbolt bucket of the layer of res seconds.
func powerBucket(res int64) ([]byte, error) {
	switch res {
	case 60:
		return bucketPower60, nil
	case 300:
		return bucketPower300, nil
	case 3600:
		return bucketPower3600, nil
	}
	return nil, fmt.Errorf("no power bucket of %d s", res)
}

// Workers calls fn with every worker's through and channels as stored.
//
// A value that cannot be read is logged and left for the worker's next
// report to rewrite: without its through, the worker may send its
// windows again and they count twice; without its channels, it shows
// none until it reports.
func (p *Power) Workers(fn func(workerID string, st powerlog.Stored)) {
	workers := map[string]*powerlog.Stored{}
	worker := func(k []byte) *powerlog.Stored {
		st := workers[string(k)]
		if st == nil {
			st = &powerlog.Stored{}
			workers[string(k)] = st
		}
		return st
	}
	err := p.store.db.View(func(tx *bbolt.Tx) error {
		err := tx.Bucket(bucketPowerThrough).ForEach(func(k, v []byte) error {
			if len(v) != 8 {
				p.w.log.Error("power through unreadable", "worker", string(k))
				return nil
			}
			worker(k).Through = int64(binary.BigEndian.Uint64(v))
			return nil
		})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketPowerChans).ForEach(func(k, v []byte) error {
			var m powerMeta
			if err := json.Unmarshal(v, &m); err != nil {
				p.w.log.Error("power channels unreadable", "worker", string(k), "err", err)
				return nil
			}
			worker(k).Meta = &powerlog.Meta{Channels: m.Channels, Machine: m.Machine}
			return nil
		})
	})
	if err != nil {
		p.w.log.Error("load power worker state", "err", err)
	}
	for id, st := range workers {
		fn(id, *st)
	}
}

// powerAdd is one delta on its way to a bucket.
type powerAdd struct {
	bucket, key []byte
	sums        []powerlog.Sum
}

// Add queues a report's additions; it never blocks. The deltas, the
// worker's through (0: unchanged) and its channels (nil: unchanged) are
// written in the same group-commit transaction. While the store cannot
// write, the report waits in the writer's backlog; at the backlog's bound
// it is dropped and counted (see Writer), and its windows are lost: the
// worker, told they were recorded, does not send them again.
//
// A worker id that is empty or holds a 0x00 cannot be keyed, and a delta
// of a resolution without a bucket cannot be stored: such a report is
// logged and dropped.
func (p *Power) Add(workerID string, deltas []powerlog.Delta, through int64, meta *powerlog.Meta) {
	if workerID == "" || strings.IndexByte(workerID, 0) >= 0 {
		// The 0x00 separates the id from the bucket start in every key.
		p.w.log.Error("power report dropped: bad worker id", "worker", workerID)
		return
	}
	adds := make([]powerAdd, len(deltas))
	for i, d := range deltas {
		b, err := powerBucket(d.Res)
		if err != nil {
			p.w.log.Error("power report dropped", "worker", workerID, "err", err)
			return
		}
		adds[i] = powerAdd{b, powerKey(workerID, d.Start), d.Sums}
	}
	var metaJSON []byte
	if meta != nil {
		var err error
		if metaJSON, err = json.Marshal(powerMeta{Machine: meta.Machine, Channels: meta.Channels}); err != nil {
			// Were a channel to hold what JSON cannot carry, the windows are
			// kept regardless.
			p.w.log.Error("power channels not stored", "worker", workerID, "err", err)
		}
	}
	var throughVal []byte
	if through != 0 {
		throughVal = binary.BigEndian.AppendUint64(nil, uint64(through))
	}
	id := []byte(workerID)
	size := len(id) + len(metaJSON) + len(throughVal)
	for _, a := range adds {
		size += len(a.key) + len(a.sums)*(powerSumSize+16)
		for _, s := range a.sums {
			size += len(s.Key)
		}
	}
	p.w.add(kindPower, size, func(tx *txn) error {
		for _, a := range adds {
			if err := p.addToBucket(tx.Tx, a); err != nil {
				return err
			}
		}
		if throughVal != nil {
			// Two reports of one worker may be queued in either order; the
			// later through wins.
			b := tx.Bucket(bucketPowerThrough)
			if old := b.Get(id); len(old) != 8 || bytes.Compare(old, throughVal) < 0 {
				if err := b.Put(id, throughVal); err != nil {
					return fmt.Errorf("put power through: %w", err)
				}
			}
		}
		if metaJSON != nil {
			if err := tx.Bucket(bucketPowerChans).Put(id, metaJSON); err != nil {
				return fmt.Errorf("put power channels: %w", err)
			}
		}
		return nil
	})
}

// powerFillPercent is how full a split leaves a page. A new bucket's key
// goes at the end of its worker's keys, in the middle of the tree, and
// the page it splits from is not written to again: bbolt's default of
// half full would leave every page half empty. Measured on 30 days of
// 100 workers' hourly buckets: 16.6 kB a worker-day at 0.5, 10.1 kB at
// 0.9, 10.7 kB at 1.0 (full pages split again on the next insert).
const powerFillPercent = 0.9

// addToBucket adds a's sums to the bucket value at its key.
//
// A malformed value is started over rather than failed: failing would
// fail every later commit touching the bucket, and the usage rows and
// events sharing those commits.
func (p *Power) addToBucket(tx *bbolt.Tx, a powerAdd) error {
	b := tx.Bucket(a.bucket)
	// The setting lasts only as long as the transaction.
	b.FillPercent = powerFillPercent
	var old []powerlog.Sum
	if v := b.Get(a.key); v != nil {
		var err error
		if old, err = decodePowerSums(make([]powerlog.Sum, 0, len(a.sums)), v); err != nil {
			p.w.log.Error("power bucket reset", "key", fmt.Sprintf("%q", a.key), "err", err)
			old = nil
		}
	}
	sums := powerlog.AddSums(old, a.sums, 1)
	size := 1
	for _, s := range sums {
		size += 1 + len(s.Key) + powerSumSize
	}
	if err := b.Put(a.key, appendPowerSums(make([]byte, 0, size), sums)); err != nil {
		return fmt.Errorf("put power bucket: %w", err)
	}
	return nil
}

// powerKey is a bucket's key: worker id, 0x00, big-endian Unix seconds.
func powerKey(workerID string, start int64) []byte {
	k := make([]byte, 0, len(workerID)+1+8)
	k = append(k, workerID...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, uint64(start))
}

// appendPowerSums encodes a bucket's channels, sorted by key: a version
// byte, then per channel its key's length (one byte), the key, and
// joules, covered seconds and peak watts as little-endian float64 bits.
// Ten channels take about 300 bytes.
func appendPowerSums(b []byte, sums []powerlog.Sum) []byte {
	b = append(b, powerSumsVersion)
	for _, s := range sums {
		b = append(b, byte(len(s.Key)))
		b = append(b, s.Key...)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.Joules))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.Covered))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.Peak))
	}
	return b
}

var errBadPowerSums = errors.New("malformed power bucket")

// decodePowerSums appends v's channels to dst. Their keys point into v.
// Every figure is checked, since readers divide by covered seconds and a
// NaN could not be sent as JSON; and the keys' order, since adding to
// them relies on it.
func decodePowerSums(dst []powerlog.Sum, v []byte) ([]powerlog.Sum, error) {
	if len(v) == 0 || v[0] != powerSumsVersion {
		return nil, errBadPowerSums
	}
	var prev []byte
	for v = v[1:]; len(v) > 0; {
		n := int(v[0])
		if n == 0 || len(v) < 1+n+powerSumSize {
			return nil, errBadPowerSums
		}
		key, b := v[1:1+n], v[1+n:1+n+powerSumSize]
		v = v[1+n+powerSumSize:]
		f := powerlog.Figures{
			Joules:  math.Float64frombits(binary.LittleEndian.Uint64(b)),
			Covered: math.Float64frombits(binary.LittleEndian.Uint64(b[8:])),
			Peak:    math.Float64frombits(binary.LittleEndian.Uint64(b[16:])),
		}
		if !finiteNonNeg(f.Joules) || !finiteNonNeg(f.Peak) || !finiteNonNeg(f.Covered) || f.Covered == 0 {
			return nil, errBadPowerSums
		}
		if bytes.Compare(key, prev) <= 0 {
			return nil, errBadPowerSums
		}
		dst = append(dst, powerlog.Sum{Key: key, Figures: f})
		prev = key
	}
	return dst, nil
}

// finiteNonNeg is false for NaN, infinities and negative numbers.
func finiteNonNeg(v float64) bool { return v >= 0 && v <= math.MaxFloat64 }

// Buckets calls fn with the start and sums of each of workerID's buckets
// of res seconds that start in [first, last] (Unix seconds), oldest
// first. The sums are decoded into one slice, reused from bucket to
// bucket, and their keys point into the database: both are valid only
// during the call. A bucket that cannot be read is logged and skipped.
func (p *Power) Buckets(workerID string, res, first, last int64, fn func(start int64, sums []powerlog.Sum)) error {
	name, err := powerBucket(res)
	if err != nil {
		return err
	}
	return p.store.db.View(func(tx *bbolt.Tx) error {
		var sums []powerlog.Sum
		scanPower(tx.Bucket(name), workerID, first, last, func(start int64, v []byte) {
			var err error
			if sums, err = decodePowerSums(sums[:0], v); err != nil {
				p.w.log.Error("power bucket skipped", "worker", workerID, "start", start, "err", err)
				return
			}
			fn(start, sums)
		})
		return nil
	})
}

// scanPower calls fn with the start and value of each of workerID's
// buckets in b that starts in [first, last], oldest first.
func scanPower(b *bbolt.Bucket, workerID string, first, last int64, fn func(start int64, v []byte)) {
	seek := powerKey(workerID, first)
	prefix := seek[:len(workerID)+1]
	c := b.Cursor()
	for k, v := c.Seek(seek); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(k) != len(prefix)+8 {
			continue // another worker's, whose id goes on after a 0x00; Add refuses those
		}
		start := int64(binary.BigEndian.Uint64(k[len(prefix):]))
		if start > last {
			break
		}
		fn(start, v)
	}
}

// Prune deletes the buckets of each resolution that start before its
// retention (powerlog.Layers), at most pruneBatch of them per write
// transaction, and returns how many it deleted. What to delete is found
// in a read transaction, so a write transaction only deletes known keys
// and the writer's commits wait for it briefly. Workers' through and
// channels are kept: a few hundred bytes per worker ever seen.
func (p *Power) Prune(now time.Time) (int, error) {
	total := 0
	for _, l := range powerlog.Layers() {
		name, err := powerBucket(l.Res)
		if err != nil {
			return total, err
		}
		n, err := p.pruneBucket(name, l.Cutoff(now))
		total += n
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", name, err)
		}
	}
	return total, nil
}

// pruneBucket deletes the buckets in name that start before cutoff (Unix
// seconds).
func (p *Power) pruneBucket(name []byte, cutoff int64) (int, error) {
	n := 0
	var from []byte // where the next round's scan resumes
	for {
		var old [][]byte
		var next []byte
		err := p.store.db.View(func(tx *bbolt.Tx) error {
			c := tx.Bucket(name).Cursor()
			k, _ := c.Seek(from)
			// Take the old head of each worker's buckets, then seek straight
			// past the rest of them.
			for k != nil && len(old) < p.pruneBatch {
				i := len(k) - 8
				if i < 1 || k[i-1] != 0 {
					k, _ = c.Next() // not a bucket key; cannot happen
					continue
				}
				if int64(binary.BigEndian.Uint64(k[i:])) < cutoff {
					old = append(old, bytes.Clone(k))
					k, _ = c.Next()
					continue
				}
				k, _ = c.Seek(append(bytes.Clone(k[:i-1]), 1))
			}
			next = bytes.Clone(k)
			return nil
		})
		if err != nil {
			return n, err
		}
		if len(old) == 0 {
			return n, nil
		}
		err = p.store.db.Update(func(tx *bbolt.Tx) error {
			b := tx.Bucket(name)
			for _, k := range old {
				if err := b.Delete(k); err != nil {
					return fmt.Errorf("delete power bucket: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		n += len(old)
		if next == nil {
			return n, nil
		}
		from = next
	}
}
