package power

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestLoadNVMLRecording(t *testing.T) {
	lib, err := LoadNVMLRecording("testdata/nvml.json")
	if err != nil {
		t.Fatal(err)
	}
	rec := lib.(*NVMLRecording)
	c := newClock(t0)
	rec.Now = c.Now
	if n, _ := rec.DeviceCount(); n != 2 {
		t.Fatalf("%d devices, want 2", n)
	}
	c.Set(at(40))
	if mj, err := rec.TotalEnergy(0); mj != 300*40*1000 || err != nil {
		t.Errorf("H100 energy after 40 s = %d mJ, %v; want 12,000,000", mj, err)
	}
	if _, err := rec.TotalEnergy(1); err == nil {
		t.Error("the P100 has an energy counter")
	}
	if mw, _ := rec.PowerUsage(1); mw != 200_000 {
		t.Errorf("P100 after 40 s draws %d mW, want 200 W (the second step)", mw)
	}
	c.Set(at(10))
	if mw, _ := rec.PowerUsage(1); mw != 40_000 {
		t.Errorf("P100 after 10 s draws %d mW, want 40 W", mw)
	}
	if mw, _ := rec.PowerLimit(0); mw != 700_000 {
		t.Errorf("H100 limit %d mW", mw)
	}
	if _, err := rec.DeviceName(2); err == nil {
		t.Error("a third device")
	}
}

func TestRecordedGPUJoules(t *testing.T) {
	d := RecordedGPU{Steps: []PowerStep{{0, 100}, {10, 200}, {20, 50}}}
	for _, tc := range []struct{ at, want float64 }{{0, 0}, {5, 500}, {10, 1000}, {15, 2000}, {30, 3500}} {
		if got := d.joules(tc.at); got != tc.want {
			t.Errorf("joules(%v) = %v, want %v", tc.at, got, tc.want)
		}
	}
}

func TestLoadNVMLRecordingRejects(t *testing.T) {
	for name, body := range map[string]string{
		"unknown field":  `{"devices": [{"name": "A", "watts": 3}]}`,
		"no name":        `{"devices": [{"power_w": 3}]}`,
		"negative":       `{"devices": [{"name": "A", "power_w": -3}]}`,
		"late first":     `{"devices": [{"name": "A", "steps": [{"after_s": 5, "w": 1}]}]}`,
		"steps in order": `{"devices": [{"name": "A", "steps": [{"after_s": 0, "w": 1}, {"after_s": 0, "w": 2}]}]}`,
		"not JSON":       `devices: A`,
		"both":           `{"devices": [{"name": "A", "power_w": 1, "steps": [{"after_s": 0, "w": 2}]}]}`,
	} {
		p := filepath.Join(t.TempDir(), "rec.json")
		must(t, os.WriteFile(p, []byte(body), 0o644))
		if lib, err := LoadNVMLRecording(p); err == nil || lib != nil {
			t.Errorf("%s: loaded %v, %v", name, lib, err)
		}
	}
	if _, err := LoadNVMLRecording("testdata/absent.json"); err == nil || !strings.Contains(err.Error(), "NVML recording") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestRecordedMachine is what `svc worker --power-root testdata/sysfs
// --power-nvml testdata/nvml.json` reports, as testdata/README.md says.
func TestRecordedMachine(t *testing.T) {
	lib, err := LoadNVMLRecording("testdata/nvml.json")
	if err != nil {
		t.Fatal(err)
	}
	c := newClock(t0)
	lib.(*NVMLRecording).Now = c.Now
	s, err := New(Config{Root: "testdata/sysfs", NVML: lib, IPMITool: "-", Now: c.Now, Logger: testLogger(t), Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for sec := 0; sec <= 60; sec++ {
		sampleAt(s, c, at(float64(sec)))
	}
	assertChannels(t, s.Channels(), []api.PowerChannel{
		{Key: "gpu0", Scope: api.ScopeGPU, Index: new(0), Name: "NVIDIA H100 80GB HBM3", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: new(700.0)},
		{Key: "gpu1", Scope: api.ScopeGPU, Index: new(1), Name: "NVIDIA Tesla P100-PCIE-16GB", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: new(250.0)},
		{Key: "gpu2", Scope: api.ScopeGPU, Index: new(2), Name: "AMD Radeon PRO W7800", Source: "amdgpu", Method: api.MethodMeasured, PowerLimitW: new(300.0)},
		{Key: "cpu", Scope: api.ScopeCPU, Name: "package-0", Source: "rapl", Method: api.MethodMeasured},
		{Key: "system", Scope: api.ScopeSystem, Name: "corsairpsu", Source: "hwmon", Method: api.MethodMeasured},
	})
	live := s.Live()
	for key, want := range map[string]float64{"gpu0": 300, "gpu1": 200, "gpu2": 120, "cpu": 0, "system": 400} {
		assertNear(t, "live "+key, live.Watts[key], want)
	}
	w := onlyWindow(t, s)
	assertNear(t, "gpu0 joules", w.Joules["gpu0"], 300*60)
	// Power readings: 40 W until 0:29, 200 W from 0:30, and a straight
	// line between the two readings around the step.
	assertNear(t, "gpu1 joules", w.Joules["gpu1"], 40*29+(40+200)/2+200*30)
	assertNear(t, "system joules", w.Joules["system"], 400*60)
	if s.Machine() != api.MethodMeasured {
		t.Errorf("Machine() = %q", s.Machine())
	}
}
