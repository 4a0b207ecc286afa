package audio

import (
	"math"
	"testing"
)

var ratePairs = [][2]int{
	{22050, 24000}, {44100, 16000}, {8000, 24000}, {48000, 16000},
	{16000, 24000}, {24000, 16000}, {11025, 24000}, {44100, 48001}, // the last with interpolated phases
}

func TestResampleLength(t *testing.T) {
	for _, p := range ratePairs {
		for _, n := range []int{0, 1, 2, 3, 99, 1000, 22051} {
			out := Resample(make([]float32, n), p[0], p[1])
			want := math.Round(float64(n) * float64(p[1]) / float64(p[0]))
			if math.Abs(float64(len(out))-want) > 1 {
				t.Errorf("%d→%d of %d samples: %d, want %v±1", p[0], p[1], n, len(out), want)
			}
		}
	}
}

// TestResampleTone checks that a 1 kHz tone keeps its frequency and level,
// and that tones near the top of the lower band pass.
func TestResampleTone(t *testing.T) {
	for _, p := range ratePairs {
		from, to := p[0], p[1]
		for _, f := range []float64{1000, 0.875 * float64(min(from, to)) / 2} {
			out := Resample(sine(f, 0.5, from, from), from, to)
			x := out[len(out)/8 : len(out)*7/8]
			if d := db(toneLevel(x, f, to) / 0.5); math.Abs(d) > 0.1 {
				t.Errorf("%d→%d: %.0f Hz at %.2f dB, want 0", from, to, f, d)
			}
			if d := db(toneLevel(x, f*1.1, to) / 0.5); d > -60 {
				t.Errorf("%d→%d: %.0f Hz tone leaks %.1f dB at %.0f Hz", from, to, f, d, f*1.1)
			}
		}
	}
}

// TestResampleNoAliasing feeds tones above the new Nyquist frequency: they
// must not come out, at their alias or anywhere.
func TestResampleNoAliasing(t *testing.T) {
	tests := []struct {
		from, to int
		freqs    []float64
	}{
		// 7 kHz is inside the 8 kHz band of 16 kHz audio, and passes (see
		// TestResampleTone); the tones that would fold onto it do not.
		{44100, 16000, []float64{8100, 9000, 10000, 12000, 15000, 20000}},
		{48000, 16000, []float64{8100, 9000, 16000, 23000}},
		{48000, 24000, []float64{12200, 13000, 20000}},
	}
	for _, tt := range tests {
		for _, f := range tt.freqs {
			out := Resample(sine(f, 1, tt.from, tt.from), tt.from, tt.to)
			x := out[len(out)/8 : len(out)*7/8]
			if d := db(rms(x) * math.Sqrt2); d > -75 {
				t.Errorf("%d→%d: %.0f Hz comes out at %.1f dB", tt.from, tt.to, f, d)
			}
		}
	}
}

func TestResampleDC(t *testing.T) {
	for _, p := range ratePairs {
		in := make([]float32, 5000)
		for i := range in {
			in[i] = 0.5
		}
		out := Resample(in, p[0], p[1])
		for i, v := range out[len(out)/8 : len(out)*7/8] {
			if math.Abs(float64(v)-0.5) > 1e-5 {
				t.Fatalf("%d→%d: sample %d = %f, want 0.5", p[0], p[1], i, v)
			}
		}
	}
}

func TestResampleSameRate(t *testing.T) {
	in := []float32{0.1, -0.2, 0.3}
	out := Resample(in, 16000, 16000)
	out[0] = 1
	if in[0] != 0.1 || len(out) != 3 || out[2] != 0.3 {
		t.Errorf("Resample at the same rate must copy: in %v, out %v", in, out)
	}
}

func TestResampleBadRates(t *testing.T) {
	for _, p := range [][2]int{{0, 16000}, {16000, 0}, {-1, 16000}} {
		if out := Resample([]float32{1, 2}, p[0], p[1]); out != nil {
			t.Errorf("Resample(%d→%d) = %v, want nil", p[0], p[1], out)
		}
	}
}

// TestResampleExtremeRatio checks that a huge decimation ratio, whose
// filter is capped, still works and keeps DC.
func TestResampleExtremeRatio(t *testing.T) {
	in := make([]float32, 200000)
	for i := range in {
		in[i] = 0.25
	}
	out := Resample(in, 192000, 1000)
	if len(out) != 1042 {
		t.Fatalf("%d samples, want 1042", len(out))
	}
	if v := out[len(out)/2]; math.Abs(float64(v)-0.25) > 1e-4 {
		t.Errorf("DC = %f, want 0.25", v)
	}
}
