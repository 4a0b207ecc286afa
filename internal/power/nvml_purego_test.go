//go:build linux && !nonvml

package power

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// The real loader must fail politely where there is no NVIDIA driver:
// this machine, CI, and any worker without a GPU.
func TestOpenNVMLWithoutTheLibrary(t *testing.T) {
	if _, err := openNVMLAt("libnvidia-ml-absent.so.1"); err == nil {
		t.Fatal("loaded a library that does not exist")
	}
}

func TestOpenNVMLWrongLibrary(t *testing.T) {
	// libc loads but has no NVML functions: an error, not a panic.
	_, err := openNVMLAt("libc.so.6")
	if err == nil {
		t.Fatal("libc passed for NVML")
	}
	if !strings.Contains(err.Error(), "nvmlInit_v2") {
		t.Errorf("error %q does not name the missing function", err)
	}
}

func TestOpenNVMLHere(t *testing.T) {
	lib, err := openNVML()
	if err != nil {
		t.Logf("no NVML here: %v", err)
		return
	}
	n, err := lib.DeviceCount()
	t.Logf("NVML here: %d devices, %v", n, err)
}

// fakeNVMLLibrary builds testdata/fakenvml into a shared library, so that
// the purego binding is exercised through a real dlopen.
func fakeNVMLLibrary(t *testing.T, defines ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the fake NVML library")
	}
	lib := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	args := append([]string{"-shared", "-fPIC", "-o", lib, "testdata/fakenvml/fakenvml.c"}, defines...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Skipf("cannot build the fake NVML library: %v\n%s", err, out)
	}
	return lib
}

func TestPuregoBinding(t *testing.T) {
	lib, err := openNVMLAt(fakeNVMLLibrary(t))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := lib.DeviceCount(); n != 2 || err != nil {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	if name, err := lib.DeviceName(0); name != "NVIDIA H100 80GB HBM3" || err != nil {
		t.Errorf("DeviceName(0) = %q, %v", name, err)
	}
	e1, err1 := lib.TotalEnergy(0)
	e2, err2 := lib.TotalEnergy(0)
	if err1 != nil || err2 != nil || e2-e1 != 1000 {
		t.Errorf("TotalEnergy = %d, %v then %d, %v; want 1000 mJ apart", e1, err1, e2, err2)
	}
	if _, err := lib.TotalEnergy(1); err == nil || !strings.Contains(err.Error(), "Not Supported") {
		t.Errorf("TotalEnergy(1) error %v, want NVML's Not Supported", err)
	}
	if mw, err := lib.PowerUsage(1); mw != 45500 || err != nil {
		t.Errorf("PowerUsage(1) = %d, %v", mw, err)
	}
	if mw, err := lib.PowerLimit(0); mw != 700000 || err != nil {
		t.Errorf("PowerLimit(0) = %d, %v", mw, err)
	}
	// No enforced limit: the management limit.
	if mw, err := lib.PowerLimit(1); mw != 250000 || err != nil {
		t.Errorf("PowerLimit(1) = %d, %v", mw, err)
	}
	if _, err := lib.DeviceName(2); err == nil || !strings.Contains(err.Error(), "Invalid Argument") {
		t.Errorf("DeviceName(2) error %v, want Invalid Argument", err)
	}

	// Through the source: the counter for the H100, power for the P100.
	n := newNVMLSource(lib, testLogger(t))
	found := n.discover(t.Context())
	if len(found) != 2 {
		t.Fatalf("found %+v", found)
	}
	read := n.read(t.Context(), t0)
	if r := read[found[0].id]; !r.counter {
		t.Errorf("H100 reading %+v, want the counter", r)
	}
	if r := read[found[1].id]; r != powerReading(45.5) {
		t.Errorf("P100 reading %+v, want 45.5 W", r)
	}
}

func TestPuregoBindingOldDriver(t *testing.T) {
	lib, err := openNVMLAt(fakeNVMLLibrary(t, "-DNO_ENERGY"))
	if err != nil {
		t.Fatalf("a driver without the energy counter: %v", err)
	}
	if _, err := lib.TotalEnergy(0); err == nil {
		t.Error("TotalEnergy without the function succeeded")
	}
	if mw, err := lib.PowerUsage(0); mw != 250000 || err != nil {
		t.Errorf("PowerUsage(0) = %d, %v", mw, err)
	}
}

func TestPuregoInitFails(t *testing.T) {
	path := fakeNVMLLibrary(t)
	t.Setenv("FAKE_NVML_INIT", "9")
	_, err := openNVMLAt(path)
	if err == nil || !strings.Contains(err.Error(), "Driver Not Loaded") {
		t.Errorf("openNVMLAt = %v, want NVML's Driver Not Loaded", err)
	}
}

// GPU details for the worker list come through the same binding: names,
// memory and the driver's release, and none of them fails the source
// where the driver lacks the calls.
func TestPuregoGPUDetails(t *testing.T) {
	lib, err := openNVMLAt(fakeNVMLLibrary(t))
	if err != nil {
		t.Fatal(err)
	}
	n := newNVMLSource(lib, testLogger(t))
	n.discover(t.Context())
	gpus, driver := n.gpus(t.Context())
	want := []api.GPU{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemoryTotalMiB: 81559, MemoryUsedMiB: 1024},
		{Index: 1, Name: "Tesla P100-PCIE-16GB"}, // its memory read fails
	}
	if !slices.Equal(gpus, want) || driver != "550.54.15" {
		t.Errorf("gpus = %+v, %q; want %+v, 550.54.15", gpus, driver, want)
	}

	old, err := openNVMLAt(fakeNVMLLibrary(t, "-DNO_DETAILS"))
	if err != nil {
		t.Fatalf("a driver without the detail calls: %v", err)
	}
	n = newNVMLSource(old, testLogger(t))
	n.discover(t.Context())
	gpus, driver = n.gpus(t.Context())
	if len(gpus) != 2 || gpus[0].Name != "NVIDIA H100 80GB HBM3" || gpus[0].MemoryTotalMiB != 0 || driver != "" {
		t.Errorf("without the detail calls: %+v, %q", gpus, driver)
	}
}
