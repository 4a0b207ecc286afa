package power

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

const dcmiOutput = `
    Instantaneous power reading:                   245 Watts
    Minimum during sampling period:                 80 Watts
    Maximum during sampling period:                450 Watts
    Average power reading over sample period:      240 Watts
    IPMI timestamp:                           Thu Mar  6 10:15:42 2025
    Sampling period:                          00000001 Seconds.
    Power reading state is:                   activated
`

func TestParseDCMI(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    float64
		wantErr bool
	}{
		{name: "activated", out: dcmiOutput, want: 245},
		{name: "no state line", out: "Instantaneous power reading: 118 Watts\n", want: 118},
		{name: "deactivated", out: "Instantaneous power reading: 245 Watts\nPower reading state is: deactivated\n", wantErr: true},
		{name: "zero", out: "Instantaneous power reading: 0 Watts\nPower reading state is: activated\n", wantErr: true},
		{name: "no reading", out: "Error: DCMI power reading not supported\n", wantErr: true},
		{name: "not a number", out: "Instantaneous power reading: lots Watts\n", wantErr: true},
		{name: "another unit", out: "Instantaneous power reading: 245 kW\n", wantErr: true},
		{name: "empty", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDCMI([]byte(tc.out))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseDCMI = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func FuzzParseDCMI(f *testing.F) {
	f.Add([]byte(dcmiOutput))
	f.Add([]byte("Instantaneous power reading: NaN Watts\n"))
	f.Add([]byte("Instantaneous power reading: 1e400 Watts\nPower reading state is: deactivated"))
	f.Fuzz(func(t *testing.T, out []byte) {
		w, err := parseDCMI(out)
		if err != nil {
			return
		}
		if !(w > 0) || math.IsInf(w, 0) {
			t.Errorf("parseDCMI = %v without error", w)
		}
	})
}

func TestIPMITool(t *testing.T) {
	prog := fakeProgram(t, "ipmitool", `
[ "$*" = "dcmi power reading" ] || exit 2
cat "$(dirname "$0")/reading"
`)
	reading := filepath.Join(filepath.Dir(prog), "reading")
	write := func(w string) {
		must(t, os.WriteFile(reading, []byte("Instantaneous power reading: "+w+" Watts\nPower reading state is: activated\n"), 0o644))
	}
	write("300")
	nv := &fakeNVML{gpus: []fakeGPU{{name: "A", noEnergy: true, mw: 100_000}}}
	s, c := newTestSampler(t, Config{NVML: nv, IPMITool: prog}, nil)
	sampleAt(s, c, at(58))
	write("320")
	sampleAt(s, c, at(59))
	write("340")
	sampleAt(s, c, at(60))

	if m := s.Machine(); m != api.MethodMeasured {
		t.Errorf("Machine() = %q, want measured", m)
	}
	chs := s.Channels()
	if sys := chs[len(chs)-1]; sys.Key != "system" || sys.Source != "ipmi" || sys.Method != api.MethodMeasured {
		t.Errorf("system channel %+v", sys)
	}
	w := onlyWindow(t, s)
	assertNear(t, "system joules", w.Joules["system"], 310+330)
	assertNear(t, "system peak", w.PeakW["system"], 340)
}

func TestIPMIToolWithoutBMC(t *testing.T) {
	prog := fakeProgram(t, "ipmitool", "echo 'Could not open device at /dev/ipmi0' >&2; exit 1\n")
	nv := &fakeNVML{gpus: []fakeGPU{{name: "A", noEnergy: true, mw: 100_000}}}
	s, c := newTestSampler(t, Config{NVML: nv, IPMITool: prog}, nil)
	sampleAt(s, c, at(0))
	if m := s.Machine(); m != api.MethodEstimated {
		t.Errorf("Machine() = %q without a BMC, want estimated", m)
	}
}
