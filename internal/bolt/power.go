package bolt

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
)

// Power stores workers' power history through a Writer.
//
// The windows a worker reports are added, at write time and in the same
// transaction, to buckets of three resolutions, each kept as long as the
// longest range told in it needs:
//
//	power_60:       worker id, 0x00, bucket start -> channel sums  (kept 2 h, for 1h)
//	power_300:      worker id, 0x00, bucket start -> channel sums  (kept 25 h, for 24h)
//	power_3600:     worker id, 0x00, bucket start -> channel sums  (kept 31 d, for 7d and 30d)
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
	store  *Store
	w      *Writer
	layers [3]powerLayer
	// pruneBatch bounds the keys one pruning transaction deletes.
	pruneBatch int

	mu sync.Mutex
	// workers holds, per worker that ever reported, what power_through
	// and power_channels hold, and ahead of them: a report's through and
	// channels count from the moment it is queued, so a resend is
	// recognised before the report before it is committed.
	workers map[string]*powerWorker
}

// powerLayer is one resolution of the history.
type powerLayer struct {
	res       int64 // seconds
	bucket    []byte
	retention time.Duration
}

// powerWorker is what is known of one worker beyond its buckets.
type powerWorker struct {
	// through is the end of the last window recorded, Unix nanoseconds;
	// zero when none was (a window cannot end at 1970-01-01T00:00:00Z).
	through  int64
	channels []api.PowerChannel
	machine  string
	// stored is false until the channels and machine are queued to be
	// stored, so even a worker that never names them has a value.
	stored bool
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
	// maxPowerWindow bounds a window's length. The sampler closes windows
	// of about a minute; a day-long one is a broken clock, and splitting it
	// would fill 1,440 minute buckets.
	maxPowerWindow = 24 * time.Hour
	// joulesPerKWh converts energy to what the endpoint reports.
	joulesPerKWh = 3.6e6
	// powerPruneBatch is how many keys one pruning transaction deletes by
	// default: measured at half a millisecond of work before the commit,
	// whose fsyncs cost what any group commit's do, so the writer waits
	// about as long for it as for one of its own commits.
	powerPruneBatch = 1000
)

// Power returns the power history store writing through w. It reads
// every worker's through and channels once, here, so that Record and
// Through never wait for the disk.
func (s *Store) Power(w *Writer) *Power {
	p := &Power{
		store: s,
		w:     w,
		layers: [3]powerLayer{
			{60, bucketPower60, 2 * time.Hour},
			{300, bucketPower300, 25 * time.Hour},
			{3600, bucketPower3600, 31 * 24 * time.Hour},
		},
		pruneBatch: powerPruneBatch,
		workers:    map[string]*powerWorker{},
	}
	worker := func(k []byte) *powerWorker {
		st := p.workers[string(k)]
		if st == nil {
			st = &powerWorker{}
			p.workers[string(k)] = st
		}
		return st
	}
	// A value that cannot be read is logged and left for the worker's
	// next report to rewrite: without its through, the worker may send
	// its windows again and they count twice; without its channels, it
	// shows none until it reports.
	err := s.db.View(func(tx *bbolt.Tx) error {
		err := tx.Bucket(bucketPowerThrough).ForEach(func(k, v []byte) error {
			if len(v) != 8 {
				w.log.Error("power through unreadable", "worker", string(k))
				return nil
			}
			worker(k).through = int64(binary.BigEndian.Uint64(v))
			return nil
		})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketPowerChans).ForEach(func(k, v []byte) error {
			var m powerMeta
			if err := json.Unmarshal(v, &m); err != nil {
				w.log.Error("power channels unreadable", "worker", string(k), "err", err)
				return nil
			}
			st := worker(k)
			st.channels, st.machine, st.stored = m.Channels, m.Machine, true
			return nil
		})
	})
	if err != nil {
		w.log.Error("load power worker state", "err", err)
	}
	return p
}

// powerFigures are one channel's readings in a window or bucket. Three
// floats and no pointer, they stay in registers when returned; a whole
// powerSum is copied through memory, which made reading a 30-day history
// three times as slow.
type powerFigures struct {
	joules  float64
	covered float64
	peak    float64
}

// powerSum is a channel's key and figures. Decoded from a stored value,
// key points into it and is valid only inside the transaction.
type powerSum struct {
	key []byte
	powerFigures
}

// powerWindow is a reported window, checked: its span in Unix
// nanoseconds and the sums of the channels that had readings, by key.
type powerWindow struct {
	start, end int64
	sums       []powerSum
}

// powerDelta is what one report adds to one bucket.
type powerDelta struct {
	layer int
	start int64 // Unix seconds
	key   []byte
	sums  []powerSum
}

// powerBucketID names a bucket while a report is split among them.
type powerBucketID struct {
	layer int
	start int64
}

// Record queues a worker's report; it never blocks. Its windows and the
// worker's through, channels and machine method are written in the same
// group-commit transaction.
//
// A window that starts before the end of the last one recorded for the
// worker was sent again after a reconnect and is skipped. A window that
// straddles bucket boundaries is split between the buckets in proportion
// to the time it spent in each: joules and covered seconds alike, as if
// its readings were spread evenly; its peak goes to every bucket it
// touches, since where in the window it fell is not known.
//
// Readings that cannot be right are dropped rather than stored: a channel
// with no covered seconds, a non-finite or negative figure, a window of
// no length or longer than a day, or one outside years 1970-2199. A peak
// that is missing or below the window's average is taken as the average.
// A report without channels (or machine method) leaves the known ones.
func (p *Power) Record(workerID string, rep api.PowerReport) {
	if workerID == "" || strings.IndexByte(workerID, 0) >= 0 {
		// The 0x00 separates the id from the bucket start in every key.
		p.w.log.Error("power report dropped: bad worker id", "worker", workerID)
		return
	}
	wins := make([]powerWindow, 0, len(rep.Windows))
	for i := range rep.Windows {
		if w, ok := checkPowerWindow(&rep.Windows[i]); ok {
			wins = append(wins, w)
		} else {
			p.w.log.Warn("power window dropped", "worker", workerID, "start", rep.Windows[i].Start, "seconds", rep.Windows[i].Seconds)
		}
	}
	// A report lists its windows oldest first; sorting anyway keeps one out
	// of order from being taken for a resend of the one after it.
	slices.SortStableFunc(wins, func(a, b powerWindow) int { return cmp.Compare(a.start, b.start) })

	p.mu.Lock()
	st := p.workers[workerID]
	if st == nil {
		st = &powerWorker{}
		p.workers[workerID] = st
	}
	fresh := wins[:0]
	for _, w := range wins {
		if w.start < st.through {
			continue // sent again: already counted
		}
		fresh = append(fresh, w)
		st.through = w.end
	}
	through := st.through
	// A worker sends its channels with every report; they are copied and
	// stored only when they change.
	changed := !st.stored
	if len(rep.Channels) > 0 && !slices.EqualFunc(st.channels, rep.Channels, sameChannel) {
		st.channels = cloneChannels(rep.Channels)
		changed = true
	}
	if rep.Machine != "" && rep.Machine != st.machine {
		st.machine = rep.Machine
		changed = true
	}
	st.stored = true
	// st.channels is replaced, never changed in place: it can be encoded
	// after the lock is let go.
	meta := powerMeta{Machine: st.machine, Channels: st.channels}
	p.mu.Unlock()

	if len(fresh) == 0 && !changed {
		return // nothing new: a resend, or a report with no windows
	}
	var metaJSON []byte
	if changed {
		var err error
		if metaJSON, err = json.Marshal(meta); err != nil {
			// cloneChannels leaves only strings and finite numbers, so this
			// cannot happen; were it to, the windows are kept regardless.
			p.w.log.Error("power channels not stored", "worker", workerID, "err", err)
		}
	}
	deltas := p.split(workerID, fresh)
	var throughVal []byte
	if len(fresh) > 0 {
		throughVal = binary.BigEndian.AppendUint64(nil, uint64(through))
	}
	id := []byte(workerID)
	p.w.add(func(tx *bbolt.Tx) error {
		for _, d := range deltas {
			if err := p.addToBucket(p.bucket(tx, d.layer), d.key, d.sums); err != nil {
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

// split adds windows up into what they add to each bucket they touch, in
// every layer, in key order so the transaction walks each tree forward.
func (p *Power) split(workerID string, wins []powerWindow) []powerDelta {
	adds := map[powerBucketID]*powerDelta{}
	for _, w := range wins {
		for li, l := range p.layers {
			splitPowerWindow(w, l.res, func(start int64, frac float64) {
				id := powerBucketID{li, start}
				d := adds[id]
				if d == nil {
					d = &powerDelta{layer: li, start: start, key: powerKey(workerID, start)}
					adds[id] = d
				}
				d.sums = addPowerSums(d.sums, w.sums, frac)
			})
		}
	}
	deltas := make([]powerDelta, 0, len(adds))
	for _, d := range adds {
		deltas = append(deltas, *d)
	}
	slices.SortFunc(deltas, func(a, b powerDelta) int {
		return cmp.Or(cmp.Compare(a.layer, b.layer), cmp.Compare(a.start, b.start))
	})
	return deltas
}

// checkPowerWindow converts a reported window, keeping the channels whose
// readings can be right; ok is false for a window that cannot be.
func checkPowerWindow(w *api.PowerWindow) (powerWindow, bool) {
	if y := w.Start.Year(); y < 1970 || y >= 2200 {
		return powerWindow{}, false
	}
	if !(w.Seconds > 0) || w.Seconds > maxPowerWindow.Seconds() {
		return powerWindow{}, false // also NaN
	}
	start := w.Start.UnixNano()
	out := powerWindow{start: start, end: start + int64(math.Round(w.Seconds*1e9))}
	for key, j := range w.Joules {
		c := min(w.Covered[key], w.Seconds)
		if key == "" || len(key) > math.MaxUint8 || !finiteNonNeg(j) || !finiteNonNeg(c) || c == 0 {
			continue
		}
		peak, ok := w.PeakW[key]
		if avg := j / c; !ok || !finiteNonNeg(peak) || peak < avg {
			peak = avg
		}
		out.sums = append(out.sums, powerSum{[]byte(key), powerFigures{j, c, peak}})
	}
	slices.SortFunc(out.sums, func(a, b powerSum) int { return bytes.Compare(a.key, b.key) })
	return out, true
}

// finiteNonNeg is false for NaN, infinities and negative numbers.
func finiteNonNeg(v float64) bool { return v >= 0 && v <= math.MaxFloat64 }

// splitPowerWindow calls fn with the start (Unix seconds) of each bucket
// of res seconds that w overlaps and the share of w's time spent in it.
func splitPowerWindow(w powerWindow, res int64, fn func(start int64, frac float64)) {
	resNs := res * int64(time.Second)
	for b := w.start / resNs * resNs; b < w.end; b += resNs {
		lo, hi := max(w.start, b), min(w.end, b+resNs)
		frac := 1.0
		if lo != w.start || hi != w.end {
			frac = float64(hi-lo) / float64(w.end-w.start)
		}
		fn(b/int64(time.Second), frac)
	}
}

// addPowerSums adds frac of each of add's sums to sums, both sorted by
// key, and returns them still sorted. Peaks are not scaled: a peak is a
// reading, not an amount.
func addPowerSums(sums, add []powerSum, frac float64) []powerSum {
	if len(sums) == 0 {
		// A bucket's first window, the usual case: no merging.
		sums = make([]powerSum, len(add))
		for i, a := range add {
			sums[i] = powerSum{a.key, powerFigures{a.joules * frac, a.covered * frac, a.peak}}
		}
		return sums
	}
	for _, a := range add {
		i, found := slices.BinarySearchFunc(sums, a.key, func(s powerSum, k []byte) int { return bytes.Compare(s.key, k) })
		if !found {
			sums = slices.Insert(sums, i, powerSum{key: a.key})
		}
		s := &sums[i]
		s.joules += a.joules * frac
		s.covered += a.covered * frac
		s.peak = max(s.peak, a.peak)
	}
	return sums
}

// powerFillPercent is how full a split leaves a page. A new bucket's key
// goes at the end of its worker's keys, in the middle of the tree, and
// the page it splits from is not written to again: bbolt's default of
// half full would leave every page half empty. Measured on 30 days of
// 100 workers' hourly buckets: 16.6 kB a worker-day at 0.5, 10.1 kB at
// 0.9, 10.7 kB at 1.0 (full pages split again on the next insert).
const powerFillPercent = 0.9

// bucket is layer's bbolt bucket, set to split pages full (the setting
// lasts only as long as the transaction).
func (p *Power) bucket(tx *bbolt.Tx, layer int) *bbolt.Bucket {
	b := tx.Bucket(p.layers[layer].bucket)
	b.FillPercent = powerFillPercent
	return b
}

// addToBucket adds sums to the bucket value at key.
//
// A malformed value is started over rather than failed: failing would
// fail every later commit touching the bucket, and the usage rows and
// events sharing those commits.
func (p *Power) addToBucket(b *bbolt.Bucket, key []byte, add []powerSum) error {
	var old []powerSum
	if v := b.Get(key); v != nil {
		var err error
		if old, err = decodePowerSums(make([]powerSum, 0, len(add)), v); err != nil {
			p.w.log.Error("power bucket reset", "key", fmt.Sprintf("%q", key), "err", err)
			old = nil
		}
	}
	sums := addPowerSums(old, add, 1)
	size := 1
	for _, s := range sums {
		size += 1 + len(s.key) + powerSumSize
	}
	if err := b.Put(key, appendPowerSums(make([]byte, 0, size), sums)); err != nil {
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
func appendPowerSums(b []byte, sums []powerSum) []byte {
	b = append(b, powerSumsVersion)
	for _, s := range sums {
		b = append(b, byte(len(s.key)))
		b = append(b, s.key...)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.joules))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.covered))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.peak))
	}
	return b
}

var errBadPowerSums = errors.New("malformed power bucket")

// powerSumReader reads an encoded bucket value a channel at a time,
// checking every figure: an average is divided by covered, and a NaN
// could not be sent as JSON. Reading in place rather than into a slice
// keeps the 30-day history from copying 7,200 sums it reads only once.
type powerSumReader struct {
	v   []byte
	err error
}

func newPowerSumReader(v []byte) powerSumReader {
	if len(v) == 0 || v[0] != powerSumsVersion {
		return powerSumReader{err: errBadPowerSums}
	}
	return powerSumReader{v: v[1:]}
}

// next reads the next channel; ok is false at the end and when the value
// is malformed (then err is set). key points into the value.
func (r *powerSumReader) next() (key []byte, f powerFigures, ok bool) {
	if r.err != nil || len(r.v) == 0 {
		return nil, f, false
	}
	v := r.v
	n := int(v[0])
	if n == 0 || len(v) < 1+n+powerSumSize {
		r.err = errBadPowerSums
		return nil, f, false
	}
	key, b := v[1:1+n], v[1+n:1+n+powerSumSize]
	f = powerFigures{
		joules:  math.Float64frombits(binary.LittleEndian.Uint64(b)),
		covered: math.Float64frombits(binary.LittleEndian.Uint64(b[8:])),
		peak:    math.Float64frombits(binary.LittleEndian.Uint64(b[16:])),
	}
	if !finiteNonNeg(f.joules) || !finiteNonNeg(f.peak) || !finiteNonNeg(f.covered) || f.covered == 0 {
		r.err = errBadPowerSums
		return nil, f, false
	}
	r.v = v[1+n+powerSumSize:]
	return key, f, true
}

// decodePowerSums appends v's channels to dst. Their keys point into v.
// Adding to them relies on the keys' order, so it is checked here; a
// reader only looks at each key once and need not.
func decodePowerSums(dst []powerSum, v []byte) ([]powerSum, error) {
	r := newPowerSumReader(v)
	var prev []byte
	for key, f, ok := r.next(); ok; key, f, ok = r.next() {
		if bytes.Compare(key, prev) <= 0 {
			return nil, errBadPowerSums
		}
		dst = append(dst, powerSum{key, f})
		prev = key
	}
	if r.err != nil {
		return nil, r.err
	}
	return dst, nil
}

// cloneChannels copies channels deeply: the caller's slice and pointers
// may be reused, and History's are handed to its caller. A power limit
// that is not a finite number is dropped: JSON cannot carry it.
func cloneChannels(cs []api.PowerChannel) []api.PowerChannel {
	out := make([]api.PowerChannel, len(cs))
	for i, c := range cs {
		if c.Index != nil {
			v := *c.Index
			c.Index = &v
		}
		if c.PowerLimitW = finite(c.PowerLimitW); c.PowerLimitW != nil {
			v := *c.PowerLimitW
			c.PowerLimitW = &v
		}
		out[i] = c
	}
	return out
}

// sameChannel reports whether a and b describe a channel alike.
func sameChannel(a, b api.PowerChannel) bool {
	// A limit that is not a finite number is stored as none.
	samePtr := func(x, y *float64) bool {
		x, y = finite(x), finite(y)
		return x == nil && y == nil || x != nil && y != nil && *x == *y
	}
	return a.Key == b.Key && a.Scope == b.Scope && a.Name == b.Name && a.Source == b.Source && a.Method == b.Method &&
		(a.Index == nil && b.Index == nil || a.Index != nil && b.Index != nil && *a.Index == *b.Index) &&
		samePtr(a.PowerLimitW, b.PowerLimitW)
}

// Through is the end of the last window recorded for the worker (zero
// when none was): the worker sends again only windows after it. It
// counts reports queued and not yet committed.
func (p *Power) Through(workerID string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.workers[workerID]; st != nil && st.through != 0 {
		return time.Unix(0, st.through).UTC()
	}
	return time.Time{}
}

// reported returns the worker's channels and machine method when it has
// recorded any window; ok is false when it never has.
func (p *Power) reported(workerID string) (channels []api.PowerChannel, machine string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.workers[workerID]
	if st == nil || st.through == 0 {
		return nil, "", false
	}
	return cloneChannels(st.channels), st.machine, true
}

// History answers the power endpoint for one range at now.
//
// The range is [now-span, now] and a bucket is in it when its start is:
// the bucket running at now-span, which started before it, is left out,
// and the bucket running at now is in with what it holds so far. So a
// point's time is its bucket's start, and 1h shows at most 60 minutes
// that all began within the hour (61 when now falls on a minute, the
// last one empty until a window reaches it). Totals are over the same
// buckets; coverage is their covered seconds over the span's.
//
// A worker that never recorded a window has no channels, no points and
// no machine; one that has, but not in the range, has its latest
// channels and machine and no points.
func (p *Power) History(workerID, rng string, now time.Time) (api.PowerHistory, error) {
	res, span, ok := api.RangeResolution(rng)
	if !ok {
		return api.PowerHistory{}, fmt.Errorf("unknown power range %q", rng)
	}
	l, err := p.layer(res)
	if err != nil {
		return api.PowerHistory{}, err
	}
	out := api.PowerHistory{
		WorkerID: workerID, Range: rng, ResolutionSeconds: int(l.res),
		Channels: []api.PowerChannel{}, Points: []api.PowerPoint{},
	}
	channels, machine, ok := p.reported(workerID)
	if !ok {
		return out, nil
	}
	out.Channels = channels
	if machine != "" {
		out.Machine = &machine
	}

	first, last := rangeBuckets(now, span, l.res)
	out.Points = make([]api.PowerPoint, 0, max(0, (last-first)/l.res+1))
	var sys powerFigures
	// names[i] is the i-th channel key of the bucket before: buckets
	// mostly have the same channels, so a key's string is made once, not
	// once per point.
	var names []string
	err = p.store.db.View(func(tx *bbolt.Tx) error {
		scanPower(tx.Bucket(l.bucket), workerID, first, last, func(start int64, v []byte) {
			values := make(map[string]float64, max(1, len(names)))
			var bucketSys powerFigures
			r := newPowerSumReader(v)
			i := 0
			for key, f, ok := r.next(); ok; key, f, ok = r.next() {
				if i == len(names) {
					names = append(names, "")
				}
				if names[i] != string(key) {
					names[i] = string(key)
				}
				values[names[i]] = f.joules / f.covered
				if names[i] == api.ScopeSystem {
					bucketSys = f
				}
				i++
			}
			if r.err != nil {
				p.w.log.Error("power bucket skipped", "worker", workerID, "start", start, "err", r.err)
				return
			}
			if len(values) == 0 {
				return
			}
			out.Points = append(out.Points, api.PowerPoint{T: time.Unix(start, 0).UTC(), Values: values})
			sys.joules += bucketSys.joules
			sys.covered += bucketSys.covered
			sys.peak = max(sys.peak, bucketSys.peak)
		})
		return nil
	})
	if err != nil {
		return api.PowerHistory{}, fmt.Errorf("power history: %w", err)
	}
	// The whole machine's channel is keyed by its scope: system.
	out.Totals = api.PowerTotals{
		EnergyKWh: sys.joules / joulesPerKWh,
		PeakW:     sys.peak,
		Coverage:  min(1, sys.covered/span.Seconds()),
	}
	if sys.covered > 0 {
		out.Totals.AvgW = sys.joules / sys.covered
	}
	return out, nil
}

// layer is the layer of resolution res.
func (p *Power) layer(res time.Duration) (powerLayer, error) {
	for _, l := range p.layers {
		if time.Duration(l.res)*time.Second == res {
			return l, nil
		}
	}
	return powerLayer{}, fmt.Errorf("no power history at %v resolution", res)
}

// rangeBuckets is the first and last bucket start (Unix seconds) of res
// seconds in [now-span, now]: the first at or after now-span, the last at
// or before now.
func rangeBuckets(now time.Time, span time.Duration, res int64) (first, last int64) {
	from := now.Add(-span)
	first = from.Unix()
	if from.Nanosecond() > 0 {
		first++ // a bucket starting at the whole second before from is out
	}
	first = max(0, (first+res-1)/res*res)
	return first, now.Unix()
}

// scanPower calls fn with the start and value of each of workerID's
// buckets in b that starts in [first, last], oldest first.
func scanPower(b *bbolt.Bucket, workerID string, first, last int64, fn func(start int64, v []byte)) {
	seek := powerKey(workerID, first)
	prefix := seek[:len(workerID)+1]
	c := b.Cursor()
	for k, v := c.Seek(seek); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(k) != len(prefix)+8 {
			continue // another worker's, whose id goes on after a 0x00; Record refuses those
		}
		start := int64(binary.BigEndian.Uint64(k[len(prefix):]))
		if start > last {
			break
		}
		fn(start, v)
	}
}

// TodayKWh is what the worker's whole machine (system channel) used since
// midnight UTC of now, and false when the worker never recorded a window.
// It reads at most 24 hourly buckets: they are added to as windows
// arrive, like the finer ones, so the current hour's already holds all
// that the minute buckets do and adding those would count it twice.
func (p *Power) TodayKWh(workerID string, now time.Time) (float64, bool) {
	p.mu.Lock()
	st := p.workers[workerID]
	recorded := st != nil && st.through != 0
	p.mu.Unlock()
	if !recorded {
		return 0, false
	}
	y, m, d := now.UTC().Date()
	midnight := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix()
	l := p.layers[len(p.layers)-1]
	var joules float64
	err := p.store.db.View(func(tx *bbolt.Tx) error {
		scanPower(tx.Bucket(l.bucket), workerID, midnight, now.Unix(), func(_ int64, v []byte) {
			r := newPowerSumReader(v)
			for key, f, ok := r.next(); ok; key, f, ok = r.next() {
				if string(key) == api.ScopeSystem {
					joules += f.joules
					break
				}
			}
			// A malformed bucket counts for nothing past the fault; History
			// logs it.
		})
		return nil
	})
	if err != nil {
		p.w.log.Error("power today", "worker", workerID, "err", err)
		return 0, false
	}
	return joules / joulesPerKWh, true
}

// Prune deletes the buckets of each resolution that start before its
// retention, at most pruneBatch of them per write transaction, and
// returns how many it deleted. What to delete is found in a read
// transaction, so a write transaction only deletes known keys and the
// writer's commits wait for it briefly. Workers' through and channels
// are kept: a few hundred bytes per worker ever seen.
func (p *Power) Prune(now time.Time) (int, error) {
	total := 0
	for _, l := range p.layers {
		n, err := p.pruneLayer(l, now.Add(-l.retention).Unix())
		total += n
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", l.bucket, err)
		}
	}
	return total, nil
}

// pruneLayer deletes l's buckets that start before cutoff (Unix seconds).
func (p *Power) pruneLayer(l powerLayer, cutoff int64) (int, error) {
	n := 0
	var from []byte // where the next round's scan resumes
	for {
		var old [][]byte
		var next []byte
		err := p.store.db.View(func(tx *bbolt.Tx) error {
			c := tx.Bucket(l.bucket).Cursor()
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
			b := tx.Bucket(l.bucket)
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
