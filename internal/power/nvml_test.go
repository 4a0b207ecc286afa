package power

import (
	"os"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestNVMLSource(t *testing.T) {
	nv := &fakeNVML{gpus: []fakeGPU{
		{name: "NVIDIA H100 80GB HBM3", mj: 7_500, mw: 310_000, limitMW: 700_000},
		{name: "Tesla P100-PCIE-16GB", mw: 45_500, limitMW: 250_000, noEnergy: true},
		{name: "lost", fail: true},
		{name: "NVIDIA A10"}, // a counter but no limit
	}}
	n := newNVMLSource(nv, testLogger(t))
	found := n.discover(t.Context())
	var got []api.PowerChannel
	for _, f := range found {
		got = append(got, f.ch)
	}
	assertChannels(t, got, []api.PowerChannel{
		{Scope: api.ScopeGPU, Index: new(0), Name: "NVIDIA H100 80GB HBM3", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: new(700.0)},
		{Scope: api.ScopeGPU, Index: new(1), Name: "Tesla P100-PCIE-16GB", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: new(250.0)},
		{Scope: api.ScopeGPU, Index: new(3), Name: "NVIDIA A10", Source: "nvml", Method: api.MethodMeasured},
	})

	read := n.read(t.Context(), time.Time{})
	want := map[string]reading{
		found[0].id: counterReading(7.5), // the counter, not the power
		found[1].id: powerReading(45.5),
		found[2].id: counterReading(0),
	}
	for id, w := range want {
		if read[id] != w {
			t.Errorf("read[%s] = %+v, want %+v", id, read[id], w)
		}
	}

	// A counter that fails once falls back to power for that sample.
	nv.set(0, func(g *fakeGPU) { g.noEnergy = true })
	if r := n.read(t.Context(), time.Time{})[found[0].id]; r != powerReading(310) {
		t.Errorf("after the counter failed: %+v, want 310 W", r)
	}
}

func TestNVMLIndexesStayAfterAMD(t *testing.T) {
	// NVIDIA GPUs keep NVML's index; AMD cards take the next free ones,
	// and keep them when a card before them goes.
	nv := &fakeNVML{gpus: []fakeGPU{{name: "A", mw: 1}, {name: "B", mw: 1}}}
	root := copyTree(t, "amdgpu")
	s, c := newTestSampler(t, Config{NVML: nv}, os.DirFS(root))
	sampleAt(s, c, at(0))
	var got []string
	for _, ch := range s.Channels() {
		got = append(got, ch.Key+"="+ch.Name)
	}
	want := []string{"gpu0=A", "gpu1=B", "gpu2=AMD Instinct MI210", "gpu3=AMD GPU 0x744c", "system="}
	if !equalStrings(got, want...) {
		t.Errorf("channels %v, want %v", got, want)
	}
}

// The sampler describes the GPUs its sources found: an NVML without the
// detail calls (a recording) gives names without memory, and a machine
// without a GPU none.
func TestSamplerDescribesGPUs(t *testing.T) {
	nv := &fakeNVML{gpus: []fakeGPU{{name: "A", mw: 1}, {name: "B", mw: 1}}}
	s, c := newTestSampler(t, Config{NVML: nv}, os.DirFS(t.TempDir()))
	if gpus, _ := s.GPUs(); len(gpus) != 0 {
		t.Fatalf("GPUs before the first sample: %+v", gpus)
	}
	sampleAt(s, c, at(0))
	gpus, driver := s.GPUs()
	if len(gpus) != 2 || gpus[0] != (api.GPU{Index: 0, Name: "A"}) || gpus[1].Name != "B" || driver != "" {
		t.Fatalf("GPUs = %+v, %q", gpus, driver)
	}

	none, c := newTestSampler(t, Config{NVML: &fakeNVML{}}, os.DirFS(t.TempDir()))
	sampleAt(none, c, at(0))
	if gpus, driver := none.GPUs(); len(gpus) != 0 || driver != "" {
		t.Fatalf("GPUs without a GPU = %+v, %q", gpus, driver)
	}
}
