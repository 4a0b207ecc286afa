package power

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// rediscoverEvery is how often sources look for devices again, so that
// hot-plugged cards come and go.
const rediscoverEvery = time.Minute

// systemKey is the key of the whole-machine channel.
const systemKey = "system"

// point is a channel's reading and when it was taken.
type point struct {
	at time.Time
	r  reading
}

// Sampler takes readings, integrates them into windows and shares GPU
// energy among requests. Its methods are safe for concurrent use.
type Sampler struct {
	cfg    Config
	maxGap time.Duration
	// Sources by role, best first: every GPU source is read, only the
	// first cpu and system sources that find a sensor are.
	gpuSrc, cpuSrc, sysSrc []source

	// readMu makes samples take turns: sources keep state between reads.
	// It is never held with mu while a source is read, so that a slow
	// program does not hold up Live or Pending.
	readMu       sync.Mutex
	active       []source  // the sources with sensors, read at every sample
	lastDiscover time.Time // zero before the first look

	mu         sync.Mutex
	channels   []api.PowerChannel
	keys       map[string]string // sensor id -> channel key
	gpuKeys    []string
	gpuIndex   map[string]int   // GPU sensor id -> index, kept across rediscovery
	components []string         // keys summed into an estimated system figure; nil when it is measured
	last       map[string]point // by sensor id
	lastSample time.Time
	live       *api.LivePower
	// gpus and driver describe the GPUs, as of gpusAt.
	gpus     []api.GPU
	driver   string
	gpusAt   time.Time
	gpuW     float64 // GPU watts at the last sample, when gpuKnown
	gpuKnown bool
	win      *windows
	att      attribution
}

func newSampler(cfg Config, d deps) (*Sampler, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if d.fsys == nil {
		d.fsys = os.DirFS(cfg.Root)
	}
	s := &Sampler{
		cfg:    cfg,
		maxGap: 5 * cfg.Interval,
		keys:   map[string]string{},
		last:   map[string]point{},
		win:    newWindows(cfg.Window, cfg.Keep),
	}
	s.gpuSrc, s.cpuSrc, s.sysSrc = pickSources(cfg, d)
	return s, nil
}

// Run samples every Interval until ctx ends. Every goroutine it starts
// has ended when it returns.
func (s *Sampler) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.sample(ctx, s.cfg.Now)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sample takes one sample at time now, as Run does at every tick; it
// looks for devices again first when the last look is a minute old.
func (s *Sampler) Sample(now time.Time) {
	s.sample(context.Background(), func() time.Time { return now })
}

// sample takes one sample at clock's time, read after any look for
// devices: a look can take a while (nvidia-smi, a hundred devices), and
// readings stamped with the time before it would put the energy of that
// while into one window and take it from the next.
func (s *Sampler) sample(ctx context.Context, clock func() time.Time) {
	s.readMu.Lock()
	if now := clock(); s.lastDiscover.IsZero() || now.Sub(s.lastDiscover) >= rediscoverEvery || now.Before(s.lastDiscover) {
		s.discover(ctx)
		s.lastDiscover = now
	}
	now := clock()
	readings := s.readAll(ctx, now)
	var gpus []api.GPU
	var driver string
	describe := s.gpusAt.IsZero() || now.Sub(s.gpusAt) >= describeEvery || now.Before(s.gpusAt)
	if describe {
		gpus, driver = s.describeGPUs(ctx)
	}
	s.mu.Lock()
	closed := s.integrate(now, readings)
	if describe {
		s.gpus, s.driver, s.gpusAt = gpus, driver, now
	}
	s.mu.Unlock()
	s.readMu.Unlock()
	if closed && s.cfg.OnWindow != nil {
		s.cfg.OnWindow()
	}
}

// describeEvery is how often the GPUs' memory is read: the worker reports
// it in its heartbeat, which goes every few seconds.
const describeEvery = 5 * time.Second

// describeGPUs asks the GPU sources that found GPUs to describe them.
func (s *Sampler) describeGPUs(ctx context.Context) ([]api.GPU, string) {
	var out []api.GPU
	driver := ""
	for _, src := range s.active {
		d, ok := src.(gpuDescriber)
		if !ok {
			continue
		}
		gpus, v := d.gpus(ctx)
		out = append(out, gpus...)
		if driver == "" {
			driver = v
		}
	}
	return out, driver
}

// GPUs describes the machine's GPUs (by their reader's index) and the
// driver's release, as of the latest look: none without a GPU, or before
// the first sample.
func (s *Sampler) GPUs() ([]api.GPU, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.gpus), s.driver
}

// discover asks the sources for their sensors and rebuilds the channels.
// Readings of sensors still there carry on; those gone are forgotten.
func (s *Sampler) discover(ctx context.Context) {
	var found []sensor
	s.active = s.active[:0]
	for _, src := range s.gpuSrc {
		if got := src.discover(ctx); len(got) > 0 {
			found = append(found, got...)
			s.active = append(s.active, src)
		}
	}
	for _, role := range [][]source{s.cpuSrc, s.sysSrc} {
		for _, src := range role {
			if got := src.discover(ctx); len(got) > 0 {
				found = append(found, got...)
				s.active = append(s.active, src)
				break
			}
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.arrange(found)
}

// arrange turns the sensors found into channels: GPUs by index, then the
// processor (soc before cpu), then the machine, measured or estimated.
func (s *Sampler) arrange(found []sensor) {
	var gpus []sensor
	var chip, system *sensor
	for i := range found {
		f := &found[i]
		switch f.ch.Scope {
		case api.ScopeGPU:
			gpus = append(gpus, *f)
		case api.ScopeSoC:
			if chip == nil || chip.ch.Scope != api.ScopeSoC {
				chip = f
			}
		case api.ScopeCPU:
			if chip == nil {
				chip = f
			}
		case api.ScopeSystem:
			if system == nil {
				system = f
			}
		}
	}
	assignGPUIndexes(gpus, s.gpuIndex)

	keys := map[string]string{}
	var channels []api.PowerChannel
	add := func(f sensor, key string) {
		f.ch.Key = key
		keys[f.id] = key
		channels = append(channels, f.ch)
	}
	s.gpuKeys = s.gpuKeys[:0]
	s.gpuIndex = map[string]int{}
	for _, g := range gpus {
		key := fmt.Sprintf("gpu%d", *g.ch.Index)
		add(g, key)
		s.gpuKeys = append(s.gpuKeys, key)
		s.gpuIndex[g.id] = *g.ch.Index
	}
	if chip != nil {
		add(*chip, chip.ch.Scope)
	}
	s.components = nil
	switch {
	case system != nil:
		add(*system, systemKey)
	case len(channels) > 0:
		// Nothing measures the machine: estimate it from its parts.
		for _, ch := range channels {
			s.components = append(s.components, ch.Key)
		}
		source := "estimate"
		if s.cfg.Simulated != nil {
			source = "simulated"
		}
		// No sensor reads it, so it has no sensor's name.
		channels = append(channels, api.PowerChannel{
			Key:    systemKey,
			Scope:  api.ScopeSystem,
			Source: source,
			Method: api.MethodEstimated,
		})
	}
	s.channels, s.keys = channels, keys
	for id := range s.last {
		if _, ok := keys[id]; !ok {
			delete(s.last, id)
		}
	}
}

// assignGPUIndexes gives each GPU without an index of its own (AMD
// cards) the index it had before (prev, by sensor id) when that is free,
// so that a card going does not move the others to other keys; else the
// lowest free index, in the order found. It sorts gpus by index.
func assignGPUIndexes(gpus []sensor, prev map[string]int) {
	taken := map[int]bool{}
	for i, g := range gpus {
		if g.ch.Index != nil && !taken[*g.ch.Index] {
			taken[*g.ch.Index] = true
			continue
		}
		gpus[i].ch.Index = nil
	}
	give := func(g *sensor, idx int) {
		taken[idx] = true
		g.ch.Index = &idx
	}
	for i := range gpus {
		if idx, ok := prev[gpus[i].id]; ok && gpus[i].ch.Index == nil && !taken[idx] {
			give(&gpus[i], idx)
		}
	}
	next := 0
	for i := range gpus {
		if gpus[i].ch.Index != nil {
			continue
		}
		for taken[next] {
			next++
		}
		give(&gpus[i], next)
	}
	slices.SortFunc(gpus, func(a, b sensor) int { return cmp.Compare(*a.ch.Index, *b.ch.Index) })
}

// readAll reads the active sources side by side: a slow program (such
// as nvidia-smi or ipmitool) holds up the sample only once.
func (s *Sampler) readAll(ctx context.Context, now time.Time) map[string]reading {
	got := make([]map[string]reading, len(s.active))
	var wg sync.WaitGroup
	for i, src := range s.active {
		wg.Go(func() { got[i] = src.read(ctx, now) })
	}
	wg.Wait()
	all := map[string]reading{}
	for _, m := range got {
		maps.Copy(all, m)
	}
	return all
}

// integrate turns the readings taken at now into segments since the
// previous readings, adds them to the windows and the requests, updates
// the live figures and reports whether a window closed.
func (s *Sampler) integrate(now time.Time, readings map[string]reading) bool {
	if !s.lastSample.IsZero() && !now.After(s.lastSample) {
		// The clock went back: nothing before can be differenced against
		// these readings.
		clear(s.last)
	}
	segs := map[string]segment{}
	watts := map[string]float64{}
	for id, r := range readings {
		key, ok := s.keys[id]
		if !ok {
			continue
		}
		cur := point{at: now, r: r}
		if seg, ok := s.between(s.last[id], cur); ok {
			segs[key] = seg
			watts[key] = seg.w1
		} else if r.instant {
			watts[key] = r.watts
		}
		s.last[id] = cur
	}
	interval := segment{t0: s.lastSample, t1: now}
	fresh := !s.lastSample.IsZero() && now.After(s.lastSample) && now.Sub(s.lastSample) <= s.maxGap
	if s.components != nil {
		if seg, ok := sumClipped(segs, s.components, interval); ok && fresh {
			seg.w0 += s.cfg.BaselineW
			seg.w1 += s.cfg.BaselineW
			segs[systemKey] = seg
		}
		if w, ok := sumWatts(watts, s.components); ok {
			watts[systemKey] = w + s.cfg.BaselineW
		}
	}
	for key, seg := range segs {
		s.win.add(key, seg)
	}

	// A GPU that missed this sample leaves the others still worth sharing.
	gpu, ok := sumSome(segs, s.gpuKeys, interval)
	s.att.sampled(gpu, ok && fresh)
	s.gpuW, s.gpuKnown = 0, false
	for _, key := range s.gpuKeys {
		if w, ok := watts[key]; ok {
			s.gpuW += w
			s.gpuKnown = true
		}
	}

	if len(watts) > 0 {
		s.live = &api.LivePower{At: now.UTC(), Watts: watts, Channels: s.channels, Machine: s.machine()}
	}
	s.lastSample = now
	return s.win.close(now) > 0
}

// between is the segment from prev to cur, if they can be joined: both
// counters (the energy between them, spread evenly) or both powers (a
// straight line), not too far apart, and a counter that did not go back.
func (s *Sampler) between(prev, cur point) (segment, bool) {
	if prev.at.IsZero() {
		return segment{}, false
	}
	d := cur.at.Sub(prev.at)
	if d <= 0 || d > s.maxGap {
		return segment{}, false
	}
	switch {
	case prev.r.counter && cur.r.counter:
		j := cur.r.joules - prev.r.joules
		if j < 0 {
			return segment{}, false
		}
		w := j / d.Seconds()
		return segment{t0: prev.at, t1: cur.at, w0: w, w1: w}, true
	case prev.r.instant && cur.r.instant:
		return segment{t0: prev.at, t1: cur.at, w0: prev.r.watts, w1: cur.r.watts}, true
	}
	return segment{}, false
}

// sumClipped adds up the segments of keys within interval; ok is false
// unless every key has one covering all of it.
func sumClipped(segs map[string]segment, keys []string, interval segment) (segment, bool) {
	sum := segment{t0: interval.t0, t1: interval.t1}
	if len(keys) == 0 || !interval.t1.After(interval.t0) {
		return sum, false
	}
	for _, key := range keys {
		seg, ok := segs[key]
		if !ok || seg.t0.After(interval.t0) {
			return sum, false
		}
		c, _ := seg.clip(interval.t0, interval.t1)
		sum.w0 += c.w0
		sum.w1 += c.w1
	}
	return sum, true
}

// sumSome is sumClipped over the keys that have a segment.
func sumSome(segs map[string]segment, keys []string, interval segment) (segment, bool) {
	var have []string
	for _, key := range keys {
		if seg, ok := segs[key]; ok && !seg.t0.After(interval.t0) {
			have = append(have, key)
		}
	}
	return sumClipped(segs, have, interval)
}

func sumWatts(watts map[string]float64, keys []string) (float64, bool) {
	var sum float64
	for _, key := range keys {
		w, ok := watts[key]
		if !ok {
			return 0, false
		}
		sum += w
	}
	return sum, true
}

func (s *Sampler) machine() string {
	for _, ch := range s.channels {
		if ch.Key == systemKey {
			return ch.Method
		}
	}
	return ""
}

// Channels are the channels found at the last look for devices.
func (s *Sampler) Channels() []api.PowerChannel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.channels)
}

// Machine is the method of the whole-machine figure (measured or
// estimated); "" when there are no channels.
func (s *Sampler) Machine() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.machine()
}

// Live is the latest reading: nil before the first, when there are no
// channels, or when readings stopped coming.
func (s *Sampler) Live() *api.LivePower {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil || len(s.channels) == 0 || s.lastSample.Sub(s.live.At) > s.maxGap {
		return nil
	}
	l := *s.live
	l.Watts = maps.Clone(l.Watts)
	l.Channels = slices.Clone(l.Channels)
	return &l
}

// Pending returns the closed windows that end after after, oldest first.
func (s *Sampler) Pending(after time.Time) []api.PowerWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.win.pending(after)
}

// Forget lets go of the closed windows that end by through: the gateway
// holds them.
func (s *Sampler) Forget(through time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.win.forget(through)
}

// Begin starts charging GPU energy to request id.
func (s *Sampler) Begin(id string) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.att.begin(id, now)
}

// End stops charging request id and returns the GPU energy it used, in
// watt-hours; ok is false when no GPU reading covered it.
func (s *Sampler) End(id string) (wh float64, ok bool) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	known := s.gpuKnown && now.Sub(s.lastSample) <= s.maxGap
	j, ok := s.att.end(id, now, s.lastSample, s.gpuW, known)
	if len(s.gpuKeys) == 0 {
		// No sample will share anything more: let go of it now.
		s.att.drop(id)
	}
	if !ok {
		return 0, false
	}
	return j / 3600, true
}
