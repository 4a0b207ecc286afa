package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestEncodeWAVHeader(t *testing.T) {
	var b bytes.Buffer
	samples := []float32{0, 0.5, -0.5, 1.5, -2, float32(math.NaN()), 1.0 / 65536, -1}
	if err := EncodeWAV(&b, PCM{Rate: SpeechRate, Samples: samples}); err != nil {
		t.Fatal(err)
	}
	want := []byte("RIFF\x34\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00" +
		"\xc0\x5d\x00\x00" + // 24000 Hz
		"\x80\xbb\x00\x00" + // 48000 bytes/s
		"\x02\x00\x10\x00data\x10\x00\x00\x00")
	for _, v := range []int16{0, 16384, -16384, 32767, -32768, 0, 1, -32768} {
		want = binary.LittleEndian.AppendUint16(want, uint16(v))
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("EncodeWAV =\n%q\nwant\n%q", b.Bytes(), want)
	}
}

func TestEncodeWAVRoundTrip(t *testing.T) {
	in := sine(440, 0.9, 22050, 22050*3/2)
	var b bytes.Buffer
	if err := EncodeWAV(&b, PCM{Rate: 22050, Samples: in}); err != nil {
		t.Fatal(err)
	}
	info, err := Probe(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	want := Info{Format: api.AudioWAV, Seconds: 1.5, SampleRate: 22050, Channels: 1, Bytes: int64(44 + 2*len(in))}
	if info != want {
		t.Errorf("Probe = %+v, want %+v", info, want)
	}
	pcm, err := Decode(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range pcm.Samples {
		if math.Abs(float64(v-in[i])) > 0.5/32768+1e-7 {
			t.Fatalf("sample %d = %f, want %f", i, v, in[i])
		}
	}
	// What Decode returns from 16 bits, EncodeWAV writes back unchanged.
	var again bytes.Buffer
	if err := EncodeWAV(&again, pcm); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), b.Bytes()) {
		t.Error("Decode then EncodeWAV changed the file")
	}
}

func TestEncodeWAVErrors(t *testing.T) {
	if err := EncodeWAV(&bytes.Buffer{}, PCM{Rate: 0, Samples: []float32{0}}); err == nil {
		t.Error("EncodeWAV at 0 Hz: no error")
	}
	boom := errors.New("boom")
	if err := EncodeWAV(errWriter{boom}, PCM{Rate: 8000, Samples: make([]float32, 10000)}); !errors.Is(err, boom) {
		t.Errorf("EncodeWAV error = %v, want %v", err, boom)
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

func TestToSpeechWAVAsIs(t *testing.T) {
	in := wavOf(SpeechRate, 1, make([]int16, 12000))
	out, seconds, err := ToSpeechWAV(in)
	if err != nil {
		t.Fatal(err)
	}
	if &out[0] != &in[0] || len(out) != len(in) || seconds != 0.5 {
		t.Errorf("ToSpeechWAV copied or misjudged the file: %.3f s", seconds)
	}
}

func TestToSpeechWAVConverts(t *testing.T) {
	le := binary.LittleEndian
	var data []byte
	for _, v := range sine(1000, 0.5, 44100, 44100) {
		data = le.AppendUint32(data, math.Float32bits(v))   // left
		data = le.AppendUint32(data, math.Float32bits(v/2)) // right: the mix is at 0.75
	}
	streamed := riff(fmtChunk(wavPCM, 1, SpeechRate, 16, 0), chunk{id: "data", body: make([]byte, 4800), size: u32(streamedSize)})
	tests := []struct {
		name    string
		in      []byte
		seconds float64
		level   float64 // of 1 kHz
	}{
		{"stereo float 44.1 kHz", riff(fmtChunk(wavFloat, 2, 44100, 32, 0), chunk{id: "data", body: data}), 1, 0.375},
		{"streamed 24 kHz", streamed, 0.1, 0},
		{"16 kHz mono", wavOf(16000, 1, make([]int16, 16000)), 1, 0},
		{"mp3", fixture(t, "sine-stereo.mp3"), 0, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, seconds, err := ToSpeechWAV(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			n := (len(out) - wavHeaderLen) / 2
			header := wavOf(SpeechRate, 1, make([]int16, n))[:wavHeaderLen]
			if !bytes.Equal(out[:wavHeaderLen], header) {
				t.Errorf("header %q, want %q", out[:wavHeaderLen], header)
			}
			if seconds != float64(n)/SpeechRate || (tt.seconds != 0 && math.Abs(seconds-tt.seconds) > 1e-9) {
				t.Errorf("%.6f s for %d samples, want %.6f", seconds, n, tt.seconds)
			}
			if tt.level == 0 {
				return
			}
			pcm, err := Decode(bytes.NewReader(out))
			if err != nil {
				t.Fatal(err)
			}
			x := pcm.Samples[len(pcm.Samples)/8 : len(pcm.Samples)*7/8]
			if d := db(toneLevel(x, 1000, SpeechRate) / tt.level); math.Abs(d) > 0.5 {
				t.Errorf("1 kHz at %.2f dB from %.3f", d, tt.level)
			}
		})
	}
}

func TestToSpeechWAVErrors(t *testing.T) {
	if _, _, err := ToSpeechWAV([]byte("not audio")); !errors.Is(err, ErrUnsupported) {
		t.Errorf("error = %v, want ErrUnsupported", err)
	}
	var fe *FormatError
	if _, _, err := ToSpeechWAV(wavOf(100, 1, make([]int16, 100))); !errors.As(err, &fe) {
		t.Errorf("error = %v, want a FormatError for 100 Hz", err)
	}
	if _, _, err := ToSpeechWAV(riff(fmtChunk(wavPCM, 1, 8000, 16, 0))); !errors.As(err, &fe) {
		t.Errorf("error = %v, want a FormatError for no data", err)
	}
}
