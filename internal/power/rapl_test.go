package power

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

const pkg0 = "sys/class/powercap/intel-rapl:0/energy_uj"

func TestRAPL(t *testing.T) {
	type step struct {
		writes map[string]string // file -> value, before the read
		joules float64           // counter advance since the last read; <0: no reading
	}
	tests := []struct {
		name  string
		tree  string // testdata tree copied for the test
		setup func(t *testing.T, root string)
		want  string // the cpu channel's name; "" for none
		steps []step
	}{
		{
			name: "packages summed, subzones psys and mmio left out",
			tree: "rapl",
			want: "package-0 + package-1",
			steps: []step{{joules: 0}, {
				writes: map[string]string{
					pkg0: "101000000",
					"sys/class/powercap/intel-rapl:1/energy_uj":      "202000000",
					"sys/class/powercap/intel-rapl:0:0/energy_uj":    "55000000",
					"sys/class/powercap/intel-rapl:0:1/energy_uj":    "23000000",
					"sys/class/powercap/intel-rapl:2/energy_uj":      "999000000",
					"sys/class/powercap/intel-rapl-mmio:0/energy_uj": "101000000",
				},
				joules: 3,
			}},
		},
		{
			name: "counter wraps at max_energy_range_uj",
			tree: "rapl",
			want: "package-0 + package-1",
			steps: []step{
				{writes: map[string]string{pkg0: "262143000000"}, joules: 0},
				{writes: map[string]string{pkg0: "671150"}, joules: 1},
				{writes: map[string]string{pkg0: "2671150"}, joules: 2},
			},
		},
		{
			name: "AMD: package and core only",
			tree: "rapl",
			setup: func(t *testing.T, root string) {
				for _, z := range []string{"intel-rapl:0:1", "intel-rapl:1", "intel-rapl:1:0", "intel-rapl:2", "intel-rapl-mmio:0"} {
					if err := os.RemoveAll(filepath.Join(root, "sys/class/powercap", z)); err != nil {
						t.Fatal(err)
					}
				}
			},
			want:  "package-0",
			steps: []step{{joules: 0}, {writes: map[string]string{pkg0: "150000000"}, joules: 50}},
		},
		{
			name: "a package without its range gives no channel",
			tree: "rapl",
			setup: func(t *testing.T, root string) {
				if err := os.Remove(filepath.Join(root, "sys/class/powercap/intel-rapl:1/max_energy_range_uj")); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "a package whose counter cannot be read gives no channel",
			tree: "rapl",
			setup: func(t *testing.T, root string) {
				if err := os.Remove(filepath.Join(root, "sys/class/powercap/intel-rapl:1/energy_uj")); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "a counter that vanishes leaves a gap, then counts both intervals",
			tree: "rapl",
			want: "package-0 + package-1",
			steps: []step{
				{joules: 0},
				{writes: map[string]string{pkg0: "garbage"}, joules: -1},
				{writes: map[string]string{pkg0: "104000000"}, joules: 4},
			},
		},
		{name: "no powercap", tree: "amdgpu"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := copyTree(t, tc.tree)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			r := &rapl{fsys: os.DirFS(root), log: testLogger(t)}
			found := r.discover(t.Context())
			if tc.want == "" {
				if len(found) != 0 {
					t.Fatalf("found %+v, want nothing", found)
				}
				return
			}
			if len(found) != 1 || found[0].ch.Name != tc.want || found[0].ch.Scope != api.ScopeCPU ||
				found[0].ch.Source != "rapl" || found[0].ch.Method != api.MethodMeasured {
				t.Fatalf("found %+v, want one cpu channel named %q", found, tc.want)
			}
			last := -1.0
			for i, st := range tc.steps {
				for name, v := range st.writes {
					writeFile(t, root, name, v)
				}
				got, ok := r.read(t.Context(), time.Time{})["rapl"]
				if st.joules < 0 {
					if ok {
						t.Errorf("step %d: reading %+v, want none", i, got)
					}
					continue
				}
				if !ok || !got.counter {
					t.Fatalf("step %d: no counter reading", i)
				}
				if last >= 0 {
					assertNear(t, "joules", got.joules-last, st.joules)
				}
				last = got.joules
			}
		})
	}
}

func TestRAPLPermissionDenied(t *testing.T) {
	h := &countHandler{}
	r := &rapl{
		fsys: denyFS{FS: os.DirFS("testdata/rapl"), deny: func(name string) bool { return strings.HasSuffix(name, "/energy_uj") }},
		log:  slog.New(h),
	}
	for range 3 {
		if found := r.discover(t.Context()); len(found) != 0 {
			t.Fatalf("found %+v when energy_uj is root's only", found)
		}
		if got := r.read(t.Context(), time.Time{}); got != nil {
			t.Fatalf("read %+v without zones", got)
		}
	}
	if len(h.warns) != 1 || !strings.Contains(h.warns[0], "root") {
		t.Errorf("warnings %q, want one about root", h.warns)
	}
}

// TestRAPLUnreadableFile makes energy_uj unreadable the way the kernel
// does for users who are not root; root reads it all the same, so the
// test says so and skips there.
func TestRAPLUnreadableFile(t *testing.T) {
	root := copyTree(t, "rapl")
	p := filepath.Join(root, filepath.FromSlash(pkg0))
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	if f, err := os.Open(p); err == nil {
		f.Close()
		t.Skip("this user reads mode 0000 files (root); TestRAPLPermissionDenied covers the case")
	}
	r := &rapl{fsys: os.DirFS(root), log: testLogger(t)}
	if found := r.discover(t.Context()); len(found) != 0 {
		t.Fatalf("found %+v with an unreadable counter", found)
	}
}

func TestRAPLTopZone(t *testing.T) {
	for name, want := range map[string]bool{
		"intel-rapl:0": true, "intel-rapl:12": true, "amd-rapl:0": true,
		"intel-rapl": false, "intel-rapl:0:0": false, "intel-rapl-mmio:0": false, "intel-rapl:x": false, "dtpm": false,
	} {
		if got := raplTopZone(name); got != want {
			t.Errorf("raplTopZone(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestRAPLDelta(t *testing.T) {
	for _, tc := range []struct{ last, now, max, want uint64 }{
		{10, 25, 100, 15},
		{90, 5, 100, 15},
		{100, 0, 100, 0},
		{150, 5, 100, 5}, // a range smaller than the last value: a reset
	} {
		if got := raplDelta(tc.last, tc.now, tc.max); got != tc.want {
			t.Errorf("raplDelta(%d, %d, %d) = %d, want %d", tc.last, tc.now, tc.max, got, tc.want)
		}
	}
}

func TestRAPLInTheSampler(t *testing.T) {
	root := copyTree(t, "rapl")
	s, c := newTestSampler(t, Config{}, os.DirFS(root))
	sampleAt(s, c, at(58))
	writeFile(t, root, pkg0, "130000000") // +30 J
	sampleAt(s, c, at(59))
	writeFile(t, root, "sys/class/powercap/intel-rapl:1/energy_uj", "240000000") // +40 J
	sampleAt(s, c, at(60))
	w := onlyWindow(t, s)
	assertNear(t, "cpu joules", w.Joules["cpu"], 70)
	assertNear(t, "cpu peak", w.PeakW["cpu"], 40)
	assertNear(t, "system joules", w.Joules["system"], 70+2*50)
}
