package power

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestParseSMI(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name    string
		out     string
		want    []smiGPU
		wantErr bool
	}{
		{
			name: "two GPUs",
			out:  "0, NVIDIA A100-SXM4-80GB, 63.45, 400.00\n1, NVIDIA A100-SXM4-80GB, 312.10, 400.00\n",
			want: []smiGPU{{0, "NVIDIA A100-SXM4-80GB", 63.45, 400}, {1, "NVIDIA A100-SXM4-80GB", 312.1, 400}},
		},
		{
			name: "values the GPU cannot give",
			out:  "0, NVIDIA GeForce GTX 1050, [N/A], [Not Supported]\n",
			want: []smiGPU{{0, "NVIDIA GeForce GTX 1050", nan, nan}},
		},
		{
			name: "a comma in the name",
			out:  "3, Quadro RTX 6000, Rev. B, 25.00, 260.00",
			want: []smiGPU{{3, "Quadro RTX 6000, Rev. B", 25, 260}},
		},
		{
			name: "a broken line among good ones",
			out:  "Unable to determine the device handle for GPU0000:41:00.0: Unknown Error\n1, NVIDIA L4, 16.20, 72.00\n",
			want: []smiGPU{{1, "NVIDIA L4", 16.2, 72}},
		},
		{name: "no GPU", out: ""},
		{name: "only rubbish", out: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", wantErr: true},
		{name: "negative", out: "0, X, -5, 100", want: []smiGPU{{0, "X", nan, 100}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSMI([]byte(tc.out))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i, w := range tc.want {
				g := got[i]
				if g.index != w.index || g.name != w.name || !sameWatts(g.drawW, w.drawW) || !sameWatts(g.limitW, w.limitW) {
					t.Errorf("gpu %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func sameWatts(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

func FuzzParseSMI(f *testing.F) {
	f.Add([]byte("0, NVIDIA A100-SXM4-80GB, 63.45, 400.00\n1, NVIDIA A100, [N/A], 400.00\n"))
	f.Add([]byte("3, a, b, c, 1e308, Inf\n"))
	f.Add([]byte(",,,\n-1, x, 1, 1\n\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		gpus, err := parseSMI(out)
		if err != nil && gpus != nil {
			t.Fatalf("GPUs %+v with error %v", gpus, err)
		}
		for _, g := range gpus {
			if g.index < 0 {
				t.Errorf("negative index %d", g.index)
			}
			for _, w := range []float64{g.drawW, g.limitW} {
				if !math.IsNaN(w) && (w < 0 || math.IsInf(w, 0)) {
					t.Errorf("watts %v", w)
				}
			}
		}
	})
}

// fakeProgram writes an executable shell script named name into a new
// directory and returns its path.
func fakeProgram(t *testing.T, name, script string) string {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh for a fake program")
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNvidiaSMIFallback runs a fake nvidia-smi found on PATH, as a worker
// whose NVML cannot be loaded does.
func TestNvidiaSMIFallback(t *testing.T) {
	prog := fakeProgram(t, "nvidia-smi", `
[ "$1" = "--query-gpu=index,name,power.draw,power.limit" ] && [ "$2" = "--format=csv,noheader,nounits" ] || exit 2
cat "$(dirname "$0")/out.csv"
`)
	csv := filepath.Join(filepath.Dir(prog), "out.csv")
	write := func(s string) { must(t, os.WriteFile(csv, []byte(s), 0o644)) }
	write("0, NVIDIA L4, 20.00, 72.00\n1, NVIDIA GeForce GTX 1050, [N/A], [N/A]\n")
	t.Setenv("PATH", filepath.Dir(prog)+string(os.PathListSeparator)+os.Getenv("PATH"))

	c := newClock(t0)
	d := testDeps(nil)
	d.lookPath = exec.LookPath
	s, err := newSampler(Config{Now: c.Now, IPMITool: "-", Logger: testLogger(t)}, d)
	if err != nil {
		t.Fatal(err)
	}
	sampleAt(s, c, at(58))
	write("0, NVIDIA L4, 60.00, 72.00\n")
	sampleAt(s, c, at(59))
	write("0, NVIDIA L4, 40.00, 72.00\n")
	sampleAt(s, c, at(60))

	assertChannels(t, s.Channels(), []api.PowerChannel{
		{Key: "gpu0", Scope: api.ScopeGPU, Index: new(0), Name: "NVIDIA L4", Source: "nvidia-smi", Method: api.MethodMeasured, PowerLimitW: new(72.0)},
		{Key: "system", Scope: api.ScopeSystem, Source: "estimate", Method: api.MethodEstimated},
	})
	w := onlyWindow(t, s)
	assertNear(t, "gpu0 joules", w.Joules["gpu0"], 40+50) // trapezoids
	assertNear(t, "gpu0 peak", w.PeakW["gpu0"], 60)
}

func TestNvidiaSMIFailures(t *testing.T) {
	for name, script := range map[string]string{
		"exits 9": "echo 'NVIDIA-SMI has failed' >&2; exit 9\n",
		"hangs":   "exec sleep 30\n",
	} {
		t.Run(name, func(t *testing.T) {
			n := &nvidiaSMI{prog: program{path: fakeProgram(t, "nvidia-smi", script), timeout: 200 * time.Millisecond}, log: testLogger(t)}
			start := time.Now()
			if found := n.discover(t.Context()); len(found) != 0 {
				t.Errorf("found %+v", found)
			}
			if got := n.read(t.Context(), t0); len(got) != 0 {
				t.Errorf("read %+v", got)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v: the timeout did not hold", d)
			}
		})
	}
}

func TestParseSMIDetails(t *testing.T) {
	out := []byte("0, 81559, 1024, 550.54.15, NVIDIA H100 80GB HBM3\n" +
		"1, [N/A], [N/A], 550.54.15, NVIDIA GH200, with a comma\n" +
		"garbage\n")
	gpus, driver := parseSMIDetails(out)
	want := []api.GPU{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemoryTotalMiB: 81559, MemoryUsedMiB: 1024},
		{Index: 1, Name: "NVIDIA GH200, with a comma"},
	}
	if !slices.Equal(gpus, want) || driver != "550.54.15" {
		t.Errorf("parseSMIDetails = %+v, %q; want %+v", gpus, driver, want)
	}
	if gpus, driver := parseSMIDetails(nil); len(gpus) != 0 || driver != "" {
		t.Errorf("no output: %+v, %q", gpus, driver)
	}
}
