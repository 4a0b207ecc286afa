package power

import (
	"os"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestHwmonSystem(t *testing.T) {
	tests := []struct {
		tree  string
		name  string // the system channel's name; "" for none
		watts float64
	}{
		{tree: "hwmon", name: "corsairpsu", watts: 245},
		{tree: "meter", name: "power_meter", watts: 310},
		{tree: "soc"},
		{tree: "rapl"},
	}
	for _, tc := range tests {
		t.Run(tc.tree, func(t *testing.T) {
			h := &hwmonPSU{fsys: os.DirFS("testdata/" + tc.tree), log: testLogger(t)}
			found := h.discover(t.Context())
			if tc.name == "" {
				if len(found) != 0 {
					t.Fatalf("found %+v, want nothing", found)
				}
				return
			}
			var got []api.PowerChannel
			for _, f := range found {
				got = append(got, f.ch)
			}
			assertChannels(t, got, []api.PowerChannel{{Scope: api.ScopeSystem, Name: tc.name, Source: "hwmon", Method: api.MethodMeasured}})
			r := h.read(t.Context(), time.Time{})[found[0].id]
			if !r.instant || r.watts != tc.watts {
				t.Errorf("reading %+v, want %v W", r, tc.watts)
			}
		})
	}
}

func TestHwmonSuppliesAreSummed(t *testing.T) {
	root := copyTree(t, "hwmon")
	writeFile(t, root, "sys/class/hwmon/hwmon4/name", "dps920ab")
	writeFile(t, root, "sys/class/hwmon/hwmon4/power1_label", "pin")
	writeFile(t, root, "sys/class/hwmon/hwmon4/power1_input", "5000000")
	writeFile(t, root, "sys/class/hwmon/hwmon4/power2_label", "pout1 PSU2")
	writeFile(t, root, "sys/class/hwmon/hwmon4/power2_input", "4000000")
	h := &hwmonPSU{fsys: os.DirFS(root), log: testLogger(t)}
	found := h.discover(t.Context())
	if len(found) != 1 || found[0].ch.Name != "corsairpsu + dps920ab" {
		t.Fatalf("found %+v", found)
	}
	if r := h.read(t.Context(), time.Time{})[found[0].id]; r.watts != 250 {
		t.Errorf("reading %v W, want 245 + 5 (the second supply's input, not its output)", r.watts)
	}
}

func TestHwmonSoC(t *testing.T) {
	h := &hwmonSoC{fsys: os.DirFS("testdata/soc"), log: testLogger(t)}
	found := h.discover(t.Context())
	if len(found) != 1 || found[0].ch.Scope != api.ScopeSoC || found[0].ch.Name != "SoC Energy" {
		t.Fatalf("found %+v, want the SoC energy counter", found)
	}
	if r := h.read(t.Context(), time.Time{})[found[0].id]; !r.counter || r.joules != 3000 {
		t.Errorf("reading %+v, want a 3000 J counter", r)
	}
	for _, tree := range []string{"hwmon", "rapl"} {
		h := &hwmonSoC{fsys: os.DirFS("testdata/" + tree), log: testLogger(t)}
		if found := h.discover(t.Context()); len(found) != 0 {
			t.Errorf("%s: found %+v, want no SoC sensor", tree, found)
		}
	}
}

func TestSocLabel(t *testing.T) {
	for label, want := range map[string]bool{
		"SoC": true, "SoC Power": true, "soc energy": true, " SOC ": true,
		"SVI2_P_SoC": false, "VDD_SOC": false, "SoCket": false, "PPT": false, "": false,
	} {
		if got := socLabel(label); got != want {
			t.Errorf("socLabel(%q) = %v, want %v", label, got, want)
		}
	}
}

func TestSoCReplacesCPU(t *testing.T) {
	root := copyTree(t, "soc")
	s, c := newTestSampler(t, Config{}, os.DirFS(root))
	sampleAt(s, c, at(59))
	writeFile(t, root, "sys/class/hwmon/hwmon1/energy1_input", "3012000000")
	sampleAt(s, c, at(60))
	assertChannels(t, s.Channels(), []api.PowerChannel{
		{Key: "soc", Scope: api.ScopeSoC, Name: "SoC Energy", Source: "hwmon", Method: api.MethodMeasured},
		{Key: "system", Scope: api.ScopeSystem, Source: "estimate", Method: api.MethodEstimated},
	})
	w := onlyWindow(t, s)
	assertNear(t, "soc joules", w.Joules["soc"], 12)
	assertNear(t, "system joules", w.Joules["system"], 62)
}
