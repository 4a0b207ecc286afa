package powerlog

import (
	"slices"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// memStore is a Store in memory that stores at once what it is handed.
type memStore struct {
	mu sync.Mutex
	// buckets[res][worker][start] are a bucket's sums.
	buckets map[int64]map[string]map[int64][]Sum
	workers map[string]*Stored
	// adds counts Add calls; metas are the channels handed, in order.
	adds  int
	metas []*Meta
}

func newMemStore() *memStore {
	return &memStore{buckets: map[int64]map[string]map[int64][]Sum{}, workers: map[string]*Stored{}}
}

func (m *memStore) Workers(fn func(string, Stored)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, st := range m.workers {
		fn(id, *st)
	}
}

func (m *memStore) Add(workerID string, deltas []Delta, through int64, meta *Meta) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.adds++
	m.metas = append(m.metas, meta)
	for _, d := range deltas {
		byWorker := m.buckets[d.Res]
		if byWorker == nil {
			byWorker = map[string]map[int64][]Sum{}
			m.buckets[d.Res] = byWorker
		}
		if byWorker[workerID] == nil {
			byWorker[workerID] = map[int64][]Sum{}
		}
		byWorker[workerID][d.Start] = AddSums(byWorker[workerID][d.Start], d.Sums, 1)
	}
	st := m.workers[workerID]
	if st == nil {
		st = &Stored{}
		m.workers[workerID] = st
	}
	if through != 0 {
		st.Through = max(st.Through, through)
	}
	if meta != nil {
		st.Meta = &Meta{Channels: cloneChannels(meta.Channels), Machine: meta.Machine}
	}
}

func (m *memStore) Buckets(workerID string, res, first, last int64, fn func(int64, []Sum)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	bs := m.buckets[res][workerID]
	starts := make([]int64, 0, len(bs))
	for s := range bs {
		if s >= first && s <= last {
			starts = append(starts, s)
		}
	}
	slices.Sort(starts)
	for _, s := range starts {
		fn(s, bs[s])
	}
	return nil
}

// reading is one channel's figures in a window: joules, covered seconds,
// peak watts.
type reading struct{ j, c, p float64 }

// buckets are one layer's buckets of one worker, by start.
type buckets = map[time.Time]map[string]reading

// stored is the worker's buckets of res seconds as the store holds them.
func (m *memStore) stored(res int64, worker string) buckets {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := buckets{}
	for start, sums := range m.buckets[res][worker] {
		b := map[string]reading{}
		for _, s := range sums {
			b[string(s.Key)] = reading{s.Joules, s.Covered, s.Peak}
		}
		out[time.Unix(start, 0).UTC()] = b
	}
	return out
}

// powerNow is the clock of the tests: on the hour.
var powerNow = time.Date(2026, 11, 15, 10, 0, 0, 0, time.UTC)

func at(min float64) time.Time { return powerNow.Add(time.Duration(min * float64(time.Minute))) }

// win is a window of secs seconds at start.
func win(start time.Time, secs float64, rs map[string]reading) api.PowerWindow {
	w := api.PowerWindow{Start: start, Seconds: secs,
		Joules: map[string]float64{}, Covered: map[string]float64{}, PeakW: map[string]float64{}}
	for k, r := range rs {
		w.Joules[k], w.Covered[k], w.PeakW[k] = r.j, r.c, r.p
	}
	return w
}

// sys is a window whose only channel is the whole machine's.
func sys(start time.Time, secs float64, r reading) api.PowerWindow {
	return win(start, secs, map[string]reading{api.ScopeSystem: r})
}

func ptr[T any](v T) *T { return &v }

var testChannels = []api.PowerChannel{
	{Key: "gpu0", Scope: api.ScopeGPU, Index: ptr(0), Name: "NVIDIA L4", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: ptr(72.0)},
	{Key: "cpu", Scope: api.ScopeCPU, Source: "rapl", Method: api.MethodMeasured},
	{Key: api.ScopeSystem, Scope: api.ScopeSystem, Source: "estimate", Method: api.MethodEstimated},
}
