package power

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestAMDGPU(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, root string)
		want  []api.PowerChannel // Key and Index left to the sampler
		read  map[string]reading
	}{
		{
			name: "energy counter, average power, other drivers skipped",
			want: []api.PowerChannel{
				{Scope: api.ScopeGPU, Name: "AMD Instinct MI210", Source: "amdgpu", Method: api.MethodMeasured, PowerLimitW: new(300.0)},
				{Scope: api.ScopeGPU, Name: "AMD GPU 0x744c", Source: "amdgpu", Method: api.MethodMeasured, PowerLimitW: new(355.0)},
			},
			read: map[string]reading{"amdgpu:card1": counterReading(5000), "amdgpu:card2": powerReading(45)},
		},
		{
			name: "current power where there is no average, no cap",
			setup: func(t *testing.T, root string) {
				hw := filepath.Join(root, "sys/class/drm/card2/device/hwmon/hwmon3")
				must(t, os.Rename(filepath.Join(hw, "power1_average"), filepath.Join(hw, "power1_input")))
				must(t, os.Remove(filepath.Join(hw, "power1_cap")))
			},
			want: []api.PowerChannel{
				{Scope: api.ScopeGPU, Name: "AMD Instinct MI210", Source: "amdgpu", Method: api.MethodMeasured, PowerLimitW: new(300.0)},
				{Scope: api.ScopeGPU, Name: "AMD GPU 0x744c", Source: "amdgpu", Method: api.MethodMeasured},
			},
			read: map[string]reading{"amdgpu:card1": counterReading(5000), "amdgpu:card2": powerReading(45)},
		},
		{
			name: "a card without readings is left out",
			setup: func(t *testing.T, root string) {
				must(t, os.Remove(filepath.Join(root, "sys/class/drm/card2/device/hwmon/hwmon3/power1_average")))
			},
			want: []api.PowerChannel{
				{Scope: api.ScopeGPU, Name: "AMD Instinct MI210", Source: "amdgpu", Method: api.MethodMeasured, PowerLimitW: new(300.0)},
			},
			read: map[string]reading{"amdgpu:card1": counterReading(5000)},
		},
		{
			name: "no DRM",
			setup: func(t *testing.T, root string) {
				must(t, os.RemoveAll(filepath.Join(root, "sys/class/drm")))
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := copyTree(t, "amdgpu")
			if tc.setup != nil {
				tc.setup(t, root)
			}
			a := &amdgpu{fsys: os.DirFS(root), log: testLogger(t)}
			found := a.discover(t.Context())
			var got []api.PowerChannel
			for _, f := range found {
				got = append(got, f.ch)
			}
			assertChannels(t, got, tc.want)
			read := a.read(t.Context(), time.Time{})
			if len(read) != len(tc.read) {
				t.Fatalf("read %+v, want %+v", read, tc.read)
			}
			for id, want := range tc.read {
				if read[id] != want {
					t.Errorf("read[%s] = %+v, want %+v", id, read[id], want)
				}
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestHotPluggedCards(t *testing.T) {
	root := copyTree(t, "amdgpu")
	card1Energy := "sys/class/drm/card1/device/hwmon/hwmon2/energy1_input"
	s, c := newTestSampler(t, Config{}, os.DirFS(root))
	step := func(sec int) {
		writeFile(t, root, card1Energy, strconv.Itoa(5_000_000_000+sec*100_000_000)) // 100 W
		sampleAt(s, c, at(float64(sec)))
	}
	for sec := 0; sec <= 30; sec++ {
		step(sec)
	}
	if got := channelKeys(s.Channels()); !equalStrings(got, "gpu0", "gpu1", "system") {
		t.Fatalf("channels %v before the card arrives", got)
	}
	// A card arrives; it is found at the next look, a minute after the
	// first.
	must(t, os.CopyFS(filepath.Join(root, "sys/class/drm/card3"), os.DirFS("testdata/hotplug/card3")))
	for sec := 31; sec <= 59; sec++ {
		step(sec)
	}
	if got := channelKeys(s.Channels()); !equalStrings(got, "gpu0", "gpu1", "system") {
		t.Fatalf("channels %v before the next look", got)
	}
	step(60)
	if got := channelKeys(s.Channels()); !equalStrings(got, "gpu0", "gpu1", "gpu2", "system") {
		t.Fatalf("channels %v after the card arrived", got)
	}
	if ch := s.Channels()[2]; ch.Name != "AMD Radeon PRO W7900" || *ch.Index != 2 {
		t.Errorf("new card %+v", ch)
	}
	// card2 goes; card3 keeps its key.
	must(t, os.RemoveAll(filepath.Join(root, "sys/class/drm/card2")))
	for sec := 61; sec <= 120; sec++ {
		step(sec)
	}
	if got := channelKeys(s.Channels()); !equalStrings(got, "gpu0", "gpu2", "system") {
		t.Fatalf("channels %v after a card went", got)
	}
	step(121)

	ws := s.Pending(time.Time{})
	if len(ws) != 2 {
		t.Fatalf("%d windows, want 2", len(ws))
	}
	// gpu0 never missed a second, through both looks.
	assertNear(t, "gpu0 first minute", ws[0].Covered["gpu0"], 60)
	assertNear(t, "gpu0 second minute", ws[1].Covered["gpu0"], 60)
	assertNear(t, "gpu0 joules", ws[1].Joules["gpu0"], 6000)
	if _, ok := ws[0].Joules["gpu2"]; ok {
		t.Error("gpu2 in the minute before it was found")
	}
	// Found at 1:00, first stretch 1:00 to 1:01, until the card list
	// changed at 2:00.
	assertNear(t, "gpu2 covered", ws[1].Covered["gpu2"], 60)
	// card2's last stretch ended at 1:00; it was dropped at 2:00.
	assertNear(t, "gpu1 covered", ws[0].Covered["gpu1"], 60)
	if _, ok := ws[1].Covered["gpu1"]; ok {
		t.Errorf("gpu1 covered in the minute after it went: %v", ws[1].Covered)
	}
}

func equalStrings(got []string, want ...string) bool { return slices.Equal(got, want) }
