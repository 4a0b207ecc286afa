package audio

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// seedLen bounds the seeds taken from fixtures: the fuzzer minimises every
// new input it finds interesting, which takes minutes on files of tens of
// kilobytes.
const seedLen = 2 << 10

func addFixtures(f *testing.F, names ...string) {
	for _, name := range names {
		b := fixture(f, name)
		f.Add(b[:min(len(b), seedLen)])
	}
}

func FuzzSniff(f *testing.F) {
	addFixtures(f, fixtureNames...)
	f.Add(append(id3v2(20, true), frames(cbr128, 3)...))
	f.Add(taggedText)
	f.Add(append(id3v2(20, false), cbr128.bytes()[:frameHeaderLen+10]...))
	f.Add(append(id3v2(20, false), riff(fmtChunk(wavPCM, 1, 8000, 8, 0), dataChunk(10))...))
	f.Fuzz(func(t *testing.T, head []byte) {
		got := Sniff(head)
		switch got {
		case "", api.AudioWAV, api.AudioMP3, api.AudioFLAC:
		default:
			t.Fatalf("Sniff = %q", got)
		}
		// Given a whole file, Sniff names what Probe and Decode name, but
		// for tags that run to the end: Sniff cannot see what they tag.
		if len(head) < minHead {
			s := newStream(bytes.NewReader(head))
			want, err := s.sniff()
			if err != nil {
				t.Fatal(err)
			}
			if got != want && (got != "" || s.off < int64(len(head))) {
				t.Fatalf("Sniff = %q, the stream's sniff = %q", got, want)
			}
		}
	})
}

// checkProbe runs Probe on b and checks that it fails with one of its
// errors or tells something sane.
func checkProbe(t *testing.T, b []byte) {
	info, err := Probe(bytes.NewReader(b))
	if err != nil {
		var fe *FormatError
		if !errors.Is(err, ErrUnsupported) && !errors.As(err, &fe) {
			t.Fatalf("Probe error %v is neither ErrUnsupported nor a FormatError", err)
		}
		return
	}
	if info.Bytes != int64(len(b)) || info.SampleRate <= 0 || info.Channels <= 0 ||
		info.Seconds < 0 || math.IsInf(info.Seconds, 0) || math.IsNaN(info.Seconds) {
		t.Fatalf("Probe = %+v for %d bytes", info, len(b))
	}
}

func FuzzProbeWAV(f *testing.F) {
	addFixtures(f, "speech.wav")
	f.Add(riff(fmtChunk(wavExtensible, 2, 48000, 24, wavPCM), chunk{id: "LIST", body: []byte("odd")}, dataChunk(60)))
	f.Add(riff(dataChunk(10), fmtChunk(wavFloat, 1, 8000, 32, 0)))
	f.Add(riff(fmtChunk(wavPCM, 1, 8000, 8, 0), chunk{id: "data", body: make([]byte, 9), size: u32(streamedSize)}))
	f.Fuzz(checkProbe)
}

func FuzzProbeMP3(f *testing.F) {
	addFixtures(f, "speech-cbr.mp3", "speech-vbr.mp3", "sine-stereo.mp3")
	f.Add(bytes.Join([][]byte{id3v2(10, true), xingFrame(cbr128, "Xing", 3), frames(cbr128, 3), id3v1()}, nil))
	f.Add(append(vbriFrame(cbr128, 2), frames(cbr128, 2)...))
	f.Add(frames(mpegFrame{version: 0, layer: 3, bitrate: 1, rate: 2, mono: true}, 3))
	f.Add(frames(mpegFrame{version: 3, layer: 1, bitrate: 12, rate: 0, noCRC: true}, 3))
	f.Add(taggedText)
	f.Fuzz(checkProbe)
}

func FuzzProbeFLAC(f *testing.F) {
	addFixtures(f, "speech.flac", "sine-stereo.flac")
	f.Add(flacStream{rate: 44100, channels: 2, bits: 16, block: 1152, samples: 5000}.bytes())
	f.Add(append(id3v2(5, false), flacStream{rate: 8000, channels: 1, bits: 8, block: 192, samples: 400, declared: 400}.bytes()...))
	f.Fuzz(checkProbe)
}

// FuzzDecode decodes with a limit of a million samples, which keeps each
// run short.
func FuzzDecode(f *testing.F) {
	addFixtures(f, fixtureNames...)
	f.Add(wavOf(8000, 2, []int16{1, -1, 300, -300}))
	f.Fuzz(func(t *testing.T, b []byte) {
		pcm, err := DecodeLimit(bytes.NewReader(b), 1<<20)
		if err != nil {
			var fe *FormatError
			if !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrTooLong) && !errors.As(err, &fe) {
				t.Fatalf("Decode error %v is none of ours", err)
			}
			return
		}
		if pcm.Rate <= 0 {
			t.Fatalf("Decode: rate %d", pcm.Rate)
		}
		for i, v := range pcm.Samples {
			if !(v >= -1 && v <= 1) {
				t.Fatalf("sample %d = %v", i, v)
			}
		}
	})
}
