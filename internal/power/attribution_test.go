package power

import "testing"

// steadyGPU is a sampler on one GPU drawing watts, whose counter the
// returned step function advances and samples at each whole second.
func steadyGPU(t *testing.T, watts float64) (*Sampler, *clock, func(sec int)) {
	t.Helper()
	nv := &fakeNVML{gpus: []fakeGPU{{name: "GPU"}}}
	s, c := newTestSampler(t, Config{NVML: nv}, nil)
	step := func(sec int) {
		nv.set(0, func(g *fakeGPU) { g.mj = uint64(watts * 1000 * float64(sec)) })
		sampleAt(s, c, at(float64(sec)))
	}
	return s, c, step
}

func TestRequestAloneGetsTheEnergyOfItsTime(t *testing.T) {
	s, c, step := steadyGPU(t, 200)
	step(0)
	step(1)
	c.Set(at(1.5))
	s.Begin("a")
	for sec := 2; sec <= 4; sec++ {
		step(sec)
	}
	c.Set(at(4.5))
	wh, ok := s.End("a")
	if !ok {
		t.Fatal("End = not ok with a GPU measuring")
	}
	// 200 W for three seconds, the last half second at the last power.
	assertNear(t, "Wh", wh, 200*3.0/3600)
}

func TestOverlappingRequestsShare(t *testing.T) {
	s, c, step := steadyGPU(t, 200)
	step(0)
	c.Set(at(0.5))
	s.Begin("a")
	step(1)
	c.Set(at(1.5))
	s.Begin("b")
	step(2)
	c.Set(at(2.5))
	whB, okB := s.End("b")
	step(3)
	c.Set(at(3.5))
	whA, okA := s.End("a")
	if !okA || !okB {
		t.Fatalf("ok = %v, %v, want both", okA, okB)
	}
	// a alone for two seconds and half of the one second they shared.
	assertNear(t, "a Wh", whA, (2*200+100)/3600.0)
	assertNear(t, "b Wh", whB, 100/3600.0)
}

func TestRequestWithinOneInterval(t *testing.T) {
	s, c, step := steadyGPU(t, 360)
	step(0)
	step(1)
	c.Set(at(1.2))
	s.Begin("short")
	c.Set(at(1.7))
	wh, ok := s.End("short")
	if !ok {
		t.Fatal("a short request after a sample is charged at the last power")
	}
	assertNear(t, "Wh", wh, 360*0.5/3600)
	// The next sample shares nothing more with it.
	step(2)
	if _, ok := s.End("short"); ok {
		t.Error("End twice gave energy twice")
	}
}

func TestNoEnergyWithoutGPUReadings(t *testing.T) {
	t.Run("no GPU channel", func(t *testing.T) {
		s, c := newTestSampler(t, Config{}, mustSub(t, "testdata/rapl"))
		sampleAt(s, c, at(0))
		s.Begin("r")
		sampleAt(s, c, at(1), at(2))
		if wh, ok := s.End("r"); ok {
			t.Errorf("End = %v Wh, ok on a machine with only RAPL", wh)
		}
	})
	t.Run("before any reading", func(t *testing.T) {
		s, _, _ := steadyGPU(t, 100)
		s.Begin("r")
		if wh, ok := s.End("r"); ok {
			t.Errorf("End = %v Wh, ok before any sample", wh)
		}
	})
	t.Run("unknown request", func(t *testing.T) {
		s, _, step := steadyGPU(t, 100)
		step(0)
		step(1)
		if _, ok := s.End("nobody"); ok {
			t.Error("End of a request never begun is ok")
		}
	})
}

func TestSplitChargesNobodyForIdleTime(t *testing.T) {
	seg := segment{t0: at(0), t1: at(4), w0: 100, w1: 300}
	a := &request{begin: at(1), end: at(3)}
	b := &request{begin: at(2)}
	got := map[*request]float64{}
	split(seg, []*request{a, b}, func(r *request, j float64) { got[r] += j })
	// Power rises 50 W a second: 150 to 200 W from 1 to 2 (a alone),
	// 200 to 250 W from 2 to 3 (shared), 250 to 300 W from 3 to 4 (b).
	assertNear(t, "a", got[a], 175+225.0/2)
	assertNear(t, "b", got[b], 225.0/2+275)
	if total := got[a] + got[b]; total >= seg.joules() {
		t.Errorf("requests were charged %v J of %v, including the idle second", total, seg.joules())
	}
}

func TestBeginAgainRestarts(t *testing.T) {
	s, c, step := steadyGPU(t, 100)
	step(0)
	s.Begin("r")
	step(1)
	c.Set(at(1))
	s.Begin("r")
	step(2)
	c.Set(at(2))
	wh, _ := s.End("r")
	assertNear(t, "Wh", wh, 100/3600.0)
}
