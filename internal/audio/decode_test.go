package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/svc-dev/svc/internal/api"
)

func rms(x []float32) float64 {
	var sum float64
	for _, v := range x {
		sum += float64(v) * float64(v)
	}
	return math.Sqrt(sum / float64(max(len(x), 1)))
}

// toneLevel is the amplitude of the freq component of x, by the Goertzel
// algorithm over a Hann window (so that leakage from other tones stays
// out).
func toneLevel(x []float32, freq float64, rate int) float64 {
	w := 2 * math.Pi * freq / float64(rate)
	coeff := 2 * math.Cos(w)
	var s1, s2, gain float64
	n := float64(len(x))
	for i, v := range x {
		hann := 0.5 - 0.5*math.Cos(2*math.Pi*float64(i)/n)
		gain += hann
		s0 := float64(v)*hann + coeff*s1 - s2
		s2, s1 = s1, s0
	}
	power := s1*s1 + s2*s2 - coeff*s1*s2
	return 2 * math.Sqrt(max(power, 0)) / gain
}

func db(ratio float64) float64 { return 20 * math.Log10(ratio) }

func TestDecodeFixtures(t *testing.T) {
	tests := []struct {
		name     string
		rate     int
		min, max int // samples
	}{
		{"speech.wav", 16000, 16454, 16454},
		{"speech.flac", 16000, 16454, 16454},
		// MP3 decoders yield whole frames: the encoder's delay and padding
		// come on top of the source's 22676 samples.
		{"speech-vbr.mp3", 22050, 22676, 22676 + 3*576},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pcm, err := Decode(bytes.NewReader(fixture(t, tt.name)))
			if err != nil {
				t.Fatal(err)
			}
			if pcm.Rate != tt.rate || len(pcm.Samples) < tt.min || len(pcm.Samples) > tt.max {
				t.Errorf("Decode: %d samples at %d Hz, want %d..%d at %d Hz", len(pcm.Samples), pcm.Rate, tt.min, tt.max, tt.rate)
			}
			if r := rms(pcm.Samples); r < 0.01 || r > 0.7 {
				t.Errorf("RMS = %.4f: silence or noise", r)
			}
		})
	}
}

// TestDecodeTone decodes 1 kHz sines at half scale, stereo: the tone must
// come out at its level, and stand 40 dB above its neighbours.
func TestDecodeTone(t *testing.T) {
	tests := []struct {
		name    string
		rate    int
		samples int
	}{
		{"sine-stereo.mp3", 44100, 22050},
		{"sine-stereo.flac", 48000, 9600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pcm, err := Decode(bytes.NewReader(fixture(t, tt.name)))
			if err != nil {
				t.Fatal(err)
			}
			if pcm.Rate != tt.rate || len(pcm.Samples) < tt.samples {
				t.Fatalf("Decode: %d samples at %d Hz", len(pcm.Samples), pcm.Rate)
			}
			x := pcm.Samples[len(pcm.Samples)/8 : len(pcm.Samples)*7/8]
			if level := toneLevel(x, 1000, pcm.Rate); math.Abs(db(level/0.5)) > 0.5 {
				t.Errorf("1 kHz at %.1f dB, want 0 dB (amplitude 0.5)", db(level/0.5))
			}
			for _, f := range []float64{500, 1500, 3000} {
				if d := db(toneLevel(x, f, pcm.Rate) / 0.5); d > -40 {
					t.Errorf("%g Hz at %.1f dB", f, d)
				}
			}
		})
	}
}

// TestDecodeWAVLayouts decodes the same stereo signal written in every
// layout Decode reads: the mono mix must come out within a step of the
// layout's resolution.
func TestDecodeWAVLayouts(t *testing.T) {
	left := sine(440, 0.8, 8000, 800)
	right := sine(1000, -0.3, 8000, 800)
	want := make([]float64, len(left))
	for i := range want {
		want[i] = (float64(left[i]) + float64(right[i])) / 2
	}
	le := binary.LittleEndian
	f32 := func(b []byte, v float32) []byte { return le.AppendUint32(b, math.Float32bits(v)) }
	f64 := func(b []byte, v float32) []byte { return le.AppendUint64(b, math.Float64bits(float64(v))) }
	tests := []struct {
		name     string
		tag, sub uint16
		bits     int
		put      func([]byte, float32) []byte
		step     float64
	}{
		{"u8", wavPCM, 0, 8, intSample(1), 1.0 / 127},
		{"s16", wavPCM, 0, 16, intSample(2), 1.0 / 32767},
		{"s24", wavPCM, 0, 24, intSample(3), 1e-6},
		{"s32", wavPCM, 0, 32, intSample(4), 1e-6},
		{"f32", wavFloat, 0, 32, f32, 1e-7},
		{"f64", wavFloat, 0, 64, f64, 1e-7},
		{"extensible s16", wavExtensible, wavPCM, 16, intSample(2), 1.0 / 32767},
		{"extensible f32", wavExtensible, wavFloat, 32, f32, 1e-7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var data []byte
			for i := range left {
				data = tt.put(data, left[i])
				data = tt.put(data, right[i])
			}
			file := riff(fmtChunk(tt.tag, 2, 8000, tt.bits, tt.sub), chunk{id: "LIST", body: []byte("abc")}, chunk{id: "data", body: data})
			pcm, err := Decode(bytes.NewReader(file))
			if err != nil {
				t.Fatal(err)
			}
			if pcm.Rate != 8000 || len(pcm.Samples) != len(want) {
				t.Fatalf("Decode: %d samples at %d Hz", len(pcm.Samples), pcm.Rate)
			}
			for i, v := range pcm.Samples {
				if math.Abs(float64(v)-want[i]) > tt.step+1e-6 {
					t.Fatalf("sample %d = %f, want %f", i, v, want[i])
				}
			}
		})
	}
}

// intSample returns a function that appends v as a little-endian integer
// of size bytes at full scale; 8-bit WAV samples are unsigned.
func intSample(size int) func([]byte, float32) []byte {
	scale := float64(int64(1)<<(8*size-1) - 1)
	return func(b []byte, v float32) []byte {
		x := int64(math.Round(float64(v) * scale))
		if size == 1 {
			x += 128
		}
		for i := range size {
			b = append(b, byte(x>>(8*i)))
		}
		return b
	}
}

func TestDecodeStreamedWAV(t *testing.T) {
	file := riff(fmtChunk(wavPCM, 1, 8000, 16, 0), chunk{id: "data", body: make([]byte, 1001), size: u32(streamedSize)})
	pcm, err := Decode(bytes.NewReader(file[:len(file)-1])) // without the pad byte
	if err != nil {
		t.Fatal(err)
	}
	if len(pcm.Samples) != 500 { // the odd byte is half a sample
		t.Errorf("%d samples, want 500", len(pcm.Samples))
	}
}

func TestDecodeErrors(t *testing.T) {
	layer2 := mpegFrame{version: 3, layer: 2, bitrate: 10, rate: 1, noCRC: true}
	mpeg25 := mpegFrame{version: 0, layer: 3, bitrate: 1, rate: 2, mono: true, noCRC: true}
	adpcm := fmtChunk(0x11, 1, 8000, 4, 0)
	oddBlock := fmtChunk(wavPCM, 2, 8000, 16, 0)
	binary.LittleEndian.PutUint16(oddBlock.body[12:], 3)
	tests := []struct {
		name        string
		file        []byte
		reason      string // "" for ErrUnsupported
		unsupported bool   // an encoding the decoders cannot read, not damage
	}{
		{"unsupported", []byte("OggS\x00\x02"), "", false},
		{"wav without data", riff(fmtChunk(wavPCM, 1, 8000, 16, 0)), "no data chunk", false},
		{"wav data before fmt", riff(dataChunk(10), fmtChunk(wavPCM, 1, 8000, 16, 0)), "no fmt chunk before the data", false},
		{"wav ADPCM", riff(adpcm, dataChunk(10)), "its encoding, format 0x0011 with 1-byte samples, is not PCM or float; send PCM", true},
		{"wav bad block size", riff(oddBlock, dataChunk(10)), "block size 3 for 2 channels", false},
		{"mp3 Layer II", frames(layer2, 10), "Layer 2; send Layer III, WAV or FLAC", true},
		{"mp3 MPEG 2.5", frames(mpeg25, 10), "MPEG 2.5; send MPEG 1 or 2, WAV or FLAC", true},
		{"mp3 without frames", id3v2(10, false), "no valid frame", false},
		{"flac without frames", flacStream{rate: 8000, channels: 1, bits: 16, block: 4096, noFrames: true}.bytes(), "no audio frames", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(bytes.NewReader(tt.file))
			if tt.reason == "" {
				if !errors.Is(err, ErrUnsupported) {
					t.Errorf("error = %v, want ErrUnsupported", err)
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Reason != tt.reason || fe.Unsupported != tt.unsupported {
				t.Errorf("error = %v, want reason %q (unsupported %v)", err, tt.reason, tt.unsupported)
			}
		})
	}
}

func TestDecodeLimit(t *testing.T) {
	for _, name := range fixtureNames {
		if name == "speech-cbr.mp3" {
			continue // refused (TestDecodeRefusesFramesTheDecoderMisreads)
		}
		_, err := DecodeLimit(bytes.NewReader(fixture(t, name)), 1000)
		if !errors.Is(err, ErrTooLong) {
			t.Errorf("%s: error = %v, want ErrTooLong", name, err)
		}
	}
}

func TestDecodeReadError(t *testing.T) {
	boom := errors.New("boom")
	for _, name := range fixtureNames {
		b := fixture(t, name)
		r := io.MultiReader(bytes.NewReader(b[:len(b)/2]), iotest.ErrReader(boom))
		if _, err := Decode(r); !errors.Is(err, boom) {
			t.Errorf("%s: error = %v, want %v", name, err, boom)
		}
	}
}

// TestDecodeTruncated cuts every fixture at many points: Decode must fail
// with one of its errors or return what it decoded, never panic.
func TestDecodeTruncated(t *testing.T) {
	for _, name := range fixtureNames {
		b := fixture(t, name)
		for n := 0; n < len(b); n += 1 + n/8 {
			_, err := Decode(bytes.NewReader(b[:n]))
			var fe *FormatError
			if err != nil && !errors.Is(err, ErrUnsupported) && !errors.As(err, &fe) {
				t.Errorf("%s cut at %d: %v", name, n, err)
			}
		}
	}
}

// TestDecodeLibraryPanic replays a file on which go-mp3 indexed out of
// range: Decode must report it as a FormatError, not crash; and a decoder
// library's panic is reported as damage.
func TestDecodeLibraryPanic(t *testing.T) {
	corpus := string(fixture(t, "fuzz/FuzzDecode/go-mp3-index-out-of-range"))
	_, literal, _ := strings.Cut(strings.TrimSpace(corpus), "\n")
	file, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(literal, "[]byte("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Decode(strings.NewReader(file))
	if _, ok := errors.AsType[*FormatError](err); !ok {
		t.Errorf("Decode error = %v, want a FormatError", err)
	}
	_, err = guard(api.AudioMP3, func() (PCM, error) {
		var table []int
		return PCM{}, fmt.Errorf("%d", table[len(file)])
	})
	if fe, ok := errors.AsType[*FormatError](err); !ok || fe.Unsupported || !strings.HasPrefix(fe.Reason, "decoder failed: runtime error") {
		t.Errorf("guard error = %v, want the decoder's panic as damage", err)
	}
}

// A padded MPEG 2 frame whose length go-mp3 takes a byte short (22.05 kHz
// at 32 kbit/s here) is refused as an encoding this decoder cannot read,
// rather than decoded into noise; the same speech at a bitrate it reads
// (the VBR fixture) decodes.
func TestDecodeRefusesFramesTheDecoderMisreads(t *testing.T) {
	_, err := Decode(bytes.NewReader(fixture(t, "speech-cbr.mp3")))
	fe, ok := errors.AsType[*FormatError](err)
	if !ok || !fe.Unsupported || !strings.Contains(err.Error(), "cannot decode this mp3 file: MPEG 2 frames at 22050 Hz and 32 kbit/s") {
		t.Fatalf("Decode error = %v", err)
	}
	// Also past bytes between frames: a tag where two files were joined.
	joined := bytes.Join([][]byte{fixture(t, "speech-vbr.mp3"), id3v1(), fixture(t, "speech-cbr.mp3")}, nil)
	if _, err := Decode(bytes.NewReader(joined)); !strings.Contains(fmt.Sprint(err), "cannot decode this mp3 file: MPEG 2 frames") {
		t.Fatalf("joined files: Decode error = %v", err)
	}
	// The probe, which reads frame headers only, still reads it.
	if info, err := Probe(bytes.NewReader(fixture(t, "speech-cbr.mp3"))); err != nil || info.Format != api.AudioMP3 {
		t.Fatalf("Probe = %+v, %v", info, err)
	}
}
