package power

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func onlyWindow(t *testing.T, s *Sampler) api.PowerWindow {
	t.Helper()
	ws := s.Pending(time.Time{})
	if len(ws) != 1 {
		t.Fatalf("got %d windows, want 1: %+v", len(ws), ws)
	}
	return ws[0]
}

func TestCounterDeltasAreExact(t *testing.T) {
	nv := &fakeNVML{gpus: []fakeGPU{{name: "NVIDIA H100 80GB HBM3", limitMW: 700_000}}}
	var closed atomic.Int32
	s, c := newTestSampler(t, Config{NVML: nv, OnWindow: func() { closed.Add(1) }}, nil)
	// Millijoules at 12:00:57 to 12:01:01: 250, 300, 200, then 250 W.
	for i, mj := range []uint64{1_000_000, 1_250_000, 1_550_000, 1_750_000, 2_000_000} {
		nv.set(0, func(g *fakeGPU) { g.mj = mj })
		sampleAt(s, c, at(57+float64(i)))
	}
	if n := closed.Load(); n != 1 {
		t.Fatalf("OnWindow called %d times, want 1", n)
	}
	w := onlyWindow(t, s)
	if !w.Start.Equal(t0) || w.Seconds != 60 {
		t.Errorf("window %v + %vs, want %v + 60s", w.Start, w.Seconds, t0)
	}
	assertNear(t, "gpu0 joules", w.Joules["gpu0"], 750)
	assertNear(t, "gpu0 covered", w.Covered["gpu0"], 3)
	assertNear(t, "gpu0 peak", w.PeakW["gpu0"], 300)
	// No cpu, no meter: the machine is the GPU plus the 50 W baseline.
	assertNear(t, "system joules", w.Joules["system"], 750+3*50)
	assertNear(t, "system peak", w.PeakW["system"], 350)
	if got := s.Machine(); got != api.MethodEstimated {
		t.Errorf("Machine() = %q, want estimated", got)
	}

	live := s.Live()
	if live == nil {
		t.Fatal("no live reading")
	}
	assertNear(t, "live gpu0", live.Watts["gpu0"], 250)
	assertNear(t, "live system", live.Watts["system"], 300)
	if !live.At.Equal(at(61)) || live.Machine != api.MethodEstimated || len(live.Channels) != 2 {
		t.Errorf("live = %+v", live)
	}

	chs := s.Channels()
	want := []api.PowerChannel{
		{Key: "gpu0", Scope: api.ScopeGPU, Index: new(0), Name: "NVIDIA H100 80GB HBM3", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: new(700.0)},
		{Key: "system", Scope: api.ScopeSystem, Source: "estimate", Method: api.MethodEstimated},
	}
	assertChannels(t, chs, want)
	// The estimate is read from no sensor: its channel has no name at
	// all on the wire, like the other nameless channels.
	if b, err := json.Marshal(chs[len(chs)-1]); err != nil || strings.Contains(string(b), `"name"`) {
		t.Errorf("estimated system channel = %s, %v; want no name", b, err)
	}
}

func assertChannels(t *testing.T, got, want []api.PowerChannel) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("channels %s, want %s", channelKeys(got), channelKeys(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Key != w.Key || g.Scope != w.Scope || g.Name != w.Name || g.Source != w.Source || g.Method != w.Method ||
			!samePtr(g.Index, w.Index) || !samePtr(g.PowerLimitW, w.PowerLimitW) {
			t.Errorf("channel %d = %s, want %s", i, describe(g), describe(w))
		}
	}
}

func samePtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func describe(ch api.PowerChannel) string {
	s := fmt.Sprintf("%s %s %q %s %s", ch.Key, ch.Scope, ch.Name, ch.Source, ch.Method)
	if ch.Index != nil {
		s += fmt.Sprintf(" index %d", *ch.Index)
	}
	if ch.PowerLimitW != nil {
		s += fmt.Sprintf(" limit %g W", *ch.PowerLimitW)
	}
	return s
}

func channelKeys(chs []api.PowerChannel) []string {
	var keys []string
	for _, ch := range chs {
		keys = append(keys, ch.Key)
	}
	return keys
}

func TestPowerReadingsIntegrateAsTrapezoids(t *testing.T) {
	nv := &fakeNVML{gpus: []fakeGPU{{name: "Tesla P100", noEnergy: true}}}
	s, c := newTestSampler(t, Config{NVML: nv}, nil)
	// 100 W at :58.5, 200 W at :59.5, 100 W at 1:00.5, 100 W at 1:01.5.
	for i, mw := range []uint32{100_000, 200_000, 100_000, 100_000} {
		nv.set(0, func(g *fakeGPU) { g.mw = mw })
		sampleAt(s, c, at(58.5+float64(i)))
	}
	w := onlyWindow(t, s)
	// 150 J from :58.5 to :59.5, then half a second from 200 W down to
	// 150 W at the boundary.
	assertNear(t, "gpu0 joules", w.Joules["gpu0"], 150+87.5)
	assertNear(t, "gpu0 covered", w.Covered["gpu0"], 1.5)
	assertNear(t, "gpu0 peak", w.PeakW["gpu0"], 200)

	sampleAt(s, c, at(120.5))
	ws := s.Pending(t0.Add(time.Minute))
	if len(ws) != 1 {
		t.Fatalf("got %d windows after 12:01, want 1", len(ws))
	}
	// 150 W down to 100 W, then 100 W flat: the sample at 2:00.5 is too
	// far from the one before to be joined to it.
	assertNear(t, "second window joules", ws[0].Joules["gpu0"], 62.5+100)
	assertNear(t, "second window covered", ws[0].Covered["gpu0"], 1.5)
}

func TestWindowsAlignToTheClock(t *testing.T) {
	nv := &fakeNVML{gpus: []fakeGPU{{name: "GPU"}}}
	s, c := newTestSampler(t, Config{NVML: nv, Window: 10 * time.Second}, nil)
	var mj uint64
	for sec := 3; sec <= 25; sec++ {
		nv.set(0, func(g *fakeGPU) { g.mj = mj })
		mj += 100_000 // 100 W
		sampleAt(s, c, at(float64(sec)))
	}
	ws := s.Pending(time.Time{})
	if len(ws) != 2 {
		t.Fatalf("got %d windows, want 2", len(ws))
	}
	for i, want := range []struct {
		start   time.Time
		covered float64
	}{{at(0), 7}, {at(10), 10}} {
		w := ws[i]
		if !w.Start.Equal(want.start) || w.Seconds != 10 {
			t.Errorf("window %d starts %v and lasts %vs, want %v and 10s", i, w.Start, w.Seconds, want.start)
		}
		assertNear(t, "covered", w.Covered["gpu0"], want.covered)
		assertNear(t, "joules", w.Joules["gpu0"], 100*want.covered)
	}
}

func TestGapsLeaveChannelsOut(t *testing.T) {
	nv := &fakeNVML{gpus: []fakeGPU{{name: "A"}, {name: "B"}}}
	s, c := newTestSampler(t, Config{NVML: nv, Window: 10 * time.Second}, nil)
	step := func(sec int) {
		nv.set(0, func(g *fakeGPU) { g.mj += 100_000 })
		nv.set(1, func(g *fakeGPU) { g.mj += 50_000 })
		sampleAt(s, c, at(float64(sec)))
	}
	for sec := 0; sec <= 10; sec++ {
		step(sec)
	}
	// B stops answering for the whole second window.
	nv.set(1, func(g *fakeGPU) { g.fail = true })
	for sec := 11; sec <= 20; sec++ {
		step(sec)
	}
	nv.set(1, func(g *fakeGPU) { g.fail = false })
	step(21)
	step(22)
	// Nothing is read for three minutes, then sampling resumes.
	for sec := 200; sec <= 211; sec++ {
		step(sec)
	}

	ws := s.Pending(time.Time{})
	var starts []time.Time
	for _, w := range ws {
		starts = append(starts, w.Start)
	}
	if want := []time.Time{at(0), at(10), at(20), at(200)}; !slices.EqualFunc(starts, want, time.Time.Equal) {
		t.Fatalf("windows start at %v, want %v (windows without readings are omitted)", starts, want)
	}
	second := ws[1]
	if _, ok := second.Joules["gpu1"]; ok {
		t.Errorf("gpu1 has joules in a window it was not read in: %v", second.Joules)
	}
	if _, ok := second.Covered["gpu1"]; ok {
		t.Errorf("gpu1 is covered in a window it was not read in: %v", second.Covered)
	}
	// The estimate needs every part: without gpu1 it has no figure.
	if _, ok := second.Joules["system"]; ok {
		t.Errorf("system was estimated without gpu1: %v", second.Joules)
	}
	assertNear(t, "gpu0 covered", second.Covered["gpu0"], 10)
	// The counter covered 10 to 21 too, but that is more than five
	// intervals: only 21 to 22 counts.
	assertNear(t, "gpu1 after the gap", ws[2].Covered["gpu1"], 1)
	assertNear(t, "gpu0 after the gap", ws[2].Covered["gpu0"], 2)
	assertNear(t, "gpu0 after the pause", ws[3].Covered["gpu0"], 10)
}

func TestCounterResetIsAGap(t *testing.T) {
	nv := &fakeNVML{gpus: []fakeGPU{{name: "A", mj: 9_000_000}}}
	s, c := newTestSampler(t, Config{NVML: nv}, nil)
	sampleAt(s, c, at(0))
	nv.set(0, func(g *fakeGPU) { g.mj = 1_000 }) // the driver reloaded
	sampleAt(s, c, at(1))
	nv.set(0, func(g *fakeGPU) { g.mj = 101_000 })
	sampleAt(s, c, at(2), at(60))
	w := onlyWindow(t, s)
	assertNear(t, "joules", w.Joules["gpu0"], 100)
	assertNear(t, "covered", w.Covered["gpu0"], 1)
}

func TestClockGoingBackIsNotIntegrated(t *testing.T) {
	nv := &fakeNVML{gpus: []fakeGPU{{name: "A", noEnergy: true, mw: 100_000}}}
	s, c := newTestSampler(t, Config{NVML: nv}, nil)
	sampleAt(s, c, at(10), at(11), at(5), at(6), at(70))
	w := onlyWindow(t, s)
	assertNear(t, "joules", w.Joules["gpu0"], 200)
	assertNear(t, "covered", w.Covered["gpu0"], 2)
}

func TestPendingAndForget(t *testing.T) {
	nv := &fakeNVML{gpus: []fakeGPU{{name: "A", noEnergy: true, mw: 100_000}}}
	s, c := newTestSampler(t, Config{NVML: nv, Window: 10 * time.Second}, nil)
	for sec := 0; sec <= 50; sec++ {
		sampleAt(s, c, at(float64(sec)))
	}
	if got := len(s.Pending(time.Time{})); got != 5 {
		t.Fatalf("%d windows pending, want 5", got)
	}
	ws := s.Pending(at(20))
	if len(ws) != 3 || !ws[0].Start.Equal(at(20)) {
		t.Fatalf("Pending(:20) starts %v with %d windows, want :20 and 3", ws[0].Start, len(ws))
	}
	// What Pending returns is the caller's.
	ws[0].Joules["gpu0"] = -1
	if got := s.Pending(at(20))[0].Joules["gpu0"]; got != 1000 {
		t.Errorf("changing a returned window changed the sampler's: %v", got)
	}
	if got := s.Pending(at(15)); len(got) != 4 {
		t.Errorf("Pending(:15) = %d windows, want the one ending at :20 too", len(got))
	}
	s.Forget(at(30))
	ws = s.Pending(time.Time{})
	if len(ws) != 2 || !ws[0].Start.Equal(at(30)) {
		t.Fatalf("after Forget(:30), %d windows from %v, want 2 from :30", len(ws), ws[0].Start)
	}
	s.Forget(at(100))
	if got := s.Pending(time.Time{}); got != nil {
		t.Errorf("after forgetting all, Pending = %v", got)
	}
}

func TestKeepBoundsClosedWindows(t *testing.T) {
	nv := &fakeNVML{gpus: []fakeGPU{{name: "A", noEnergy: true, mw: 100_000}}}
	s, c := newTestSampler(t, Config{NVML: nv, Window: 10 * time.Second, Keep: 30 * time.Second}, nil)
	for sec := 0; sec <= 100; sec++ {
		sampleAt(s, c, at(float64(sec)))
	}
	ws := s.Pending(time.Time{})
	if len(ws) != 3 || !ws[0].Start.Equal(at(70)) {
		t.Fatalf("kept %d windows from %v, want the newest 3 from :70", len(ws), ws[0].Start)
	}
}

func TestNoChannels(t *testing.T) {
	s, c := newTestSampler(t, Config{}, nil)
	sampleAt(s, c, at(0), at(1), at(61))
	if chs := s.Channels(); len(chs) != 0 {
		t.Errorf("channels %v on a machine without sensors", chs)
	}
	if m := s.Machine(); m != "" {
		t.Errorf("Machine() = %q, want \"\"", m)
	}
	if l := s.Live(); l != nil {
		t.Errorf("Live() = %+v, want nil", l)
	}
	if ws := s.Pending(time.Time{}); ws != nil {
		t.Errorf("windows %v without channels", ws)
	}
	s.Begin("r")
	if wh, ok := s.End("r"); ok || wh != 0 {
		t.Errorf("End = %v, %v without GPUs, want 0, false", wh, ok)
	}
}

func TestLiveBeforeAndAfterReadings(t *testing.T) {
	nv := &fakeNVML{gpus: []fakeGPU{{name: "A"}}}
	s, c := newTestSampler(t, Config{NVML: nv}, nil)
	if s.Live() != nil {
		t.Fatal("live reading before the first sample")
	}
	sampleAt(s, c, at(0))
	if l := s.Live(); l != nil {
		t.Fatalf("a single counter reading has no watts yet, got %+v", l)
	}
	nv.set(0, func(g *fakeGPU) { g.mj = 42_000 })
	sampleAt(s, c, at(1))
	l := s.Live()
	if l == nil {
		t.Fatal("no live reading after two samples")
	}
	assertNear(t, "gpu0", l.Watts["gpu0"], 42)
	l.Watts["gpu0"] = 0
	assertNear(t, "gpu0 after changing a copy", s.Live().Watts["gpu0"], 42)

	nv.set(0, func(g *fakeGPU) { g.fail = true })
	sampleAt(s, c, at(2), at(3))
	if s.Live() == nil {
		t.Error("a reading two seconds old went away")
	}
	sampleAt(s, c, at(10))
	if l := s.Live(); l != nil {
		t.Errorf("a reading nine seconds old is still live: %+v", l)
	}
}

func TestSimulatedProfileFollowsLoad(t *testing.T) {
	var active atomic.Int32
	cfg := Config{Simulated: func() int { return int(active.Load()) }, Window: 10 * time.Second}
	s, c := newTestSampler(t, cfg, nil)
	sampleAt(s, c, at(0))
	assertChannels(t, s.Channels(), []api.PowerChannel{
		{Key: "gpu0", Scope: api.ScopeGPU, Index: new(0), Name: "Simulated GPU", Source: "simulated", Method: api.MethodEstimated, PowerLimitW: new(350.0)},
		{Key: "cpu", Scope: api.ScopeCPU, Name: "Simulated CPU", Source: "simulated", Method: api.MethodEstimated},
		{Key: "system", Scope: api.ScopeSystem, Source: "simulated", Method: api.MethodEstimated},
	})
	for _, tc := range []struct {
		active   int
		gpu, cpu float64
	}{{0, 60, 15}, {1, 150, 23}, {2, 240, 31}, {3, 330, 39}, {8, 350, 65}} {
		active.Store(int32(tc.active))
		sampleAt(s, c, at(float64(tc.active+1)))
		l := s.Live()
		gpu, cpu := l.Watts["gpu0"], l.Watts["cpu"]
		if gpu < tc.gpu*0.95 || gpu > min(tc.gpu*1.05, 350) {
			t.Errorf("%d active: gpu %v W, want about %v", tc.active, gpu, tc.gpu)
		}
		if cpu < tc.cpu*0.95 || cpu > tc.cpu*1.05 {
			t.Errorf("%d active: cpu %v W, want about %v", tc.active, cpu, tc.cpu)
		}
		assertNear(t, "system", l.Watts["system"], gpu+cpu+50)
	}

	// The same instant gives the same draw: demos repeat.
	other, oc := newTestSampler(t, cfg, nil)
	sampleAt(other, oc, at(9))
	sampleAt(s, c, at(9))
	if a, b := s.Live().Watts, other.Live().Watts; !maps.Equal(a, b) {
		t.Errorf("two simulated samplers differ at one instant: %v, %v", a, b)
	}
}

func TestRunSamplesUntilCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nv := &fakeNVML{gpus: []fakeGPU{{name: "A", noEnergy: true, mw: 80_000}}}
		var closed atomic.Int32
		s, err := newSampler(Config{NVML: nv, Interval: time.Second, Window: time.Minute, IPMITool: "-",
			OnWindow: func() { closed.Add(1) }}, testDeps(nil))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		synctest.Wait()
		if s.Live() == nil {
			t.Fatal("no live reading from Run")
		}
		// A bubble's clock starts on the hour: the first window closes a
		// minute on, at the sixtieth tick.
		time.Sleep(time.Minute - time.Nanosecond)
		synctest.Wait()
		if n := closed.Load(); n != 0 {
			t.Fatalf("%d windows closed within the first minute", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := closed.Load(); n != 1 {
			t.Fatalf("%d windows closed at the minute, want 1", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil once cancelled", err)
		}
	})
}

// slowLook is a recorded NVML whose look for devices takes 300 ms, as
// nvidia-smi's can on a loaded machine.
type slowLook struct{ *NVMLRecording }

func (l slowLook) DeviceCount() (int, error) {
	time.Sleep(300 * time.Millisecond)
	return l.NVMLRecording.DeviceCount()
}

// A look for devices, at the start and again every minute, does not move
// energy between windows: a GPU drawing a steady 300 W reads 300 W in
// every one-second window, also those around the minute's look.
func TestSlowLookKeepsReadingsInTheirWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &NVMLRecording{Devices: []RecordedGPU{{Name: "NVIDIA H100 80GB HBM3", PowerW: 300}}}
		var watts []float64
		var s *Sampler
		s, err := newSampler(Config{NVML: slowLook{rec}, Interval: time.Second, Window: time.Second, IPMITool: "-",
			OnWindow: func() {
				if live := s.Live(); live != nil {
					watts = append(watts, live.Watts["gpu0"])
				}
			}}, testDeps(nil))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		time.Sleep(2*rediscoverEvery + 5*time.Second)
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(watts) < 120 {
			t.Fatalf("%d windows closed in two minutes", len(watts))
		}
		for i, w := range watts {
			if w < 299 || w > 301 {
				t.Fatalf("window %d read %.1f W of a steady 300 W: %v", i, w, watts)
			}
		}
	})
}

func TestConfigIsChecked(t *testing.T) {
	for _, cfg := range []Config{
		{Interval: time.Minute, Window: time.Second},
		{BaselineW: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestNewOnThisMachine(t *testing.T) {
	// Whatever this machine has, New and a few samples must not fail.
	s, err := New(Config{IPMITool: "-"})
	if err != nil {
		t.Fatal(err)
	}
	s.Sample(time.Now())
	s.Sample(time.Now().Add(time.Second))
	t.Logf("channels here: %+v", s.Channels())
	if _, err := os.Stat("/sys/class/powercap"); err != nil {
		t.Logf("no powercap here: %v", err)
	}
}
