package audio

import (
	"math"
	"slices"
)

// The resampling filter. Its window spans 2×filterHalfWidth samples at the
// lower of the two rates; with kaiserBeta and filterCutoff (its -6 dB
// point, relative to that rate's Nyquist frequency) the response is flat
// within 0.01 dB to 0.9 of Nyquist, 63 dB down at Nyquist and at least
// 85 dB down from 1.01 of it: nothing folds back into the band when
// downsampling, nor images above it when upsampling.
const (
	filterHalfWidth = 48
	kaiserBeta      = 8.0
	filterCutoff    = 0.95
	// exactPhases is the most filter phases tabulated one per output
	// position: the ratios between common rates (160 for 22050 to 24000 or
	// 44100 to 16000) stay within it. Other ratios interpolate between
	// interpolatedPhases tabulated ones.
	exactPhases        = 512
	interpolatedPhases = 256
	// maxHalfTaps caps the filter's length in input samples, which grows
	// with the decimation ratio: beyond 42:1 the filter is shortened, and
	// its transition band widens.
	maxHalfTaps = 2048
)

// Resample converts mono samples from one rate to another with a
// band-limited windowed-sinc filter applied polyphase: each output sample
// is a dot product of the input around its position with the filter
// evaluated at that position's fraction. When downsampling, the filter
// cuts below the new Nyquist frequency, so nothing aliases. The output has
// round(len(in)×to/from) samples; the input is taken as zero beyond its
// ends. The same rate returns a copy; a rate that is not positive, nil.
// The caller keeps the ratio sane: the output is allocated at once.
func Resample(in []float32, from, to int) []float32 {
	switch {
	case from <= 0 || to <= 0:
		return nil
	case from == to:
		return slices.Clone(in)
	}
	g := gcd(from, to)
	up, down := to/g, from/g // output n sits at input position n×down/up
	k := newKernel(from, to, up)
	out := make([]float32, (int64(len(in))*int64(to)+int64(from)/2)/int64(from))
	pos, frac := 0, 0 // input position of the output sample: pos + frac/up
	for n := range out {
		base := pos - k.half + 1
		if k.phases == up {
			out[n] = dot(in, base, k.row(frac))
		} else {
			p := float64(frac) * float64(k.phases) / float64(up)
			r := int(p)
			t := float32(p - float64(r))
			a, b := dot(in, base, k.row(r)), dot(in, base, k.row(r+1))
			out[n] = a + t*(b-a)
		}
		frac += down
		pos += frac / up
		frac %= up
	}
	return out
}

// kernel is the filter tabulated at phases fractions of an input sample:
// row p holds its taps for an output at fraction p/phases past an input
// sample, from the sample half-1 before it to the one half after.
type kernel struct {
	phases int
	half   int
	taps   []float32 // (phases+1) rows of 2×half
}

func newKernel(from, to, up int) kernel {
	scale := min(1, float64(to)/float64(from)) // the lower rate, in input samples
	k := kernel{
		phases: up,
		half:   min(int(math.Ceil(filterHalfWidth/scale)), maxHalfTaps),
	}
	if up > exactPhases {
		k.phases = interpolatedPhases
	}
	width := 2 * k.half
	fc := scale * filterCutoff / 2 // cycles per input sample
	norm := besselI0(kaiserBeta)
	k.taps = make([]float32, (k.phases+1)*width)
	// The extra last row, at fraction 1, is for interpolating past the
	// last phase.
	taps := make([]float64, width)
	for p := range k.phases + 1 {
		row := k.taps[p*width : (p+1)*width]
		frac := float64(p) / float64(k.phases)
		var sum float64
		for i := range taps {
			t := frac + float64(k.half-1-i) // distance from the output position
			x := t / float64(k.half)
			w := 0.0
			if x > -1 && x < 1 {
				w = besselI0(kaiserBeta*math.Sqrt(1-x*x)) / norm
			}
			taps[i] = 2 * fc * sinc(2*fc*t) * w
			sum += taps[i]
		}
		// Each row sums to 1, so that DC passes unchanged at every phase.
		for i, v := range taps {
			row[i] = float32(v / sum)
		}
	}
	return k
}

func (k kernel) row(p int) []float32 {
	width := 2 * k.half
	return k.taps[p*width : (p+1)*width]
}

// dot is the filter's output at in[base:base+len(row)], with zeros beyond
// the ends of in.
func dot(in []float32, base int, row []float32) float32 {
	if base < 0 || base+len(row) > len(in) {
		var s float32
		for i, c := range row {
			if j := base + i; j >= 0 && j < len(in) {
				s += in[j] * c
			}
		}
		return s
	}
	x := in[base : base+len(row)]
	// Four sums break the dependency between additions, which doubles
	// the throughput; rows have an even length.
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(row); i += 4 {
		s0 += x[i] * row[i]
		s1 += x[i+1] * row[i+1]
		s2 += x[i+2] * row[i+2]
		s3 += x[i+3] * row[i+3]
	}
	for ; i < len(row); i++ {
		s0 += x[i] * row[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	return math.Sin(math.Pi*x) / (math.Pi * x)
}

// besselI0 is the modified Bessel function of the first kind, order 0, by
// its power series, which converges fast for the arguments of a Kaiser
// window.
func besselI0(x float64) float64 {
	sum, term := 1.0, 1.0
	for k := 1.0; k < 100 && term > sum*1e-12; k++ {
		term *= (x / (2 * k)) * (x / (2 * k))
		sum += term
	}
	return sum
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
