package audio

import (
	"bytes"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

var cbr128 = mpegFrame{version: 3, layer: 3, bitrate: 9, rate: 0, noCRC: true} // MPEG 1 Layer III, 128 kbit/s, 44.1 kHz

// taggedText is an ID3v2.3 tag of 10 bytes before text: no audio at all.
var taggedText = append([]byte("ID3\x03\x00\x00\x00\x00\x00\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
	bytes.Repeat([]byte("hello world not audio"), 10)...)

func TestSniff(t *testing.T) {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	flacFile := flacStream{rate: 44100, channels: 2, bits: 16, block: 4096, samples: 44100, declared: 44100}.bytes()
	tests := []struct {
		name string
		head []byte
		want string
	}{
		{"wav", riff(fmtChunk(1, 1, 16000, 16, 0), dataChunk(100)), api.AudioWAV},
		{"flac", flacFile, api.AudioFLAC},
		{"flac after ID3v2", append(id3v2(300, true), flacFile...), api.AudioFLAC},
		{"ID3v2 longer than the head", append(id3v2(5000, false), flacFile...)[:4096], ""},
		{"mp3", frames(cbr128, 10), api.AudioMP3},
		{"mp3 after ID3v2", append(id3v2(100, false), frames(cbr128, 10)...), api.AudioMP3},
		{"wav after ID3v2", append(id3v2(100, false), riff(fmtChunk(1, 1, 16000, 16, 0), dataChunk(100))...), api.AudioWAV},
		{"mp3 after ID3v2 and padding", cat(id3v2(100, false), make([]byte, 1000), frames(cbr128, 10)), api.AudioMP3},
		{"damaged mp3 after ID3v2", cat(id3v2(100, false), cbr128.bytes()[:4], []byte("junk")), api.AudioMP3},
		{"junk after ID3v2", append(id3v2(100, false), "junk"...), ""},
		{"text after ID3v2", taggedText, ""},
		{"text after ID3v2 with footer", append(id3v2(100, true), bytes.Repeat([]byte("hello world not audio"), 10)...), ""},
		{"text after ID3v2 filling the window", cat(id3v2(100, false), bytes.Repeat([]byte("text "), sniffWindow)), ""},
		{"text after ID3v2 in a cut head", cat(id3v2(3000, false), bytes.Repeat([]byte("text "), 1000))[:4096], api.AudioMP3},
		{"ID3v2 and a byte", append(id3v2(100, false), 0), api.AudioMP3},
		{"ID3v2 and a frame header cut", append(id3v2(100, false), 0xFF, 0xFB), api.AudioMP3},
		{"mp3 after junk", append(make([]byte, 700), frames(cbr128, 10)...), api.AudioMP3},
		{"mp3 cut in its first frame", frames(cbr128, 1)[:100], api.AudioMP3},
		{"lone sync word", append([]byte{0xFF, 0xFB, 0x90, 0x00}, bytes.Repeat([]byte("x"), 1000)...), ""},
		{"two frames of different streams", append(cbr128.bytes(), mpegFrame{version: 2, layer: 3, bitrate: 9, rate: 0}.bytes()...), ""},
		{"ADTS AAC", []byte{0xFF, 0xF1, 0x50, 0x80, 0x02, 0x1F, 0xFC, 0, 0, 0, 0, 0}, ""},
		{"ogg", []byte("OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00"), ""},
		{"avi", []byte("RIFF\x00\x00\x00\x00AVI LIST"), ""},
		{"text", []byte("hello, world"), ""},
		{"empty", nil, ""},
		{"bad ID3v2 size", []byte("ID3\x04\x00\x00\x80\x00\x00\x00fLaC"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Sniff(tt.head); got != tt.want {
				t.Errorf("Sniff = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSniffFixtures(t *testing.T) {
	for name, want := range map[string]string{
		"speech.wav":       api.AudioWAV,
		"speech-cbr.mp3":   api.AudioMP3,
		"speech-vbr.mp3":   api.AudioMP3,
		"sine-stereo.mp3":  api.AudioMP3,
		"speech.flac":      api.AudioFLAC,
		"sine-stereo.flac": api.AudioFLAC,
	} {
		b := fixture(t, name)
		if got := Sniff(b[:min(len(b), 4096)]); got != want {
			t.Errorf("Sniff(%s) = %q, want %q", name, got, want)
		}
	}
}

func TestID3v2Len(t *testing.T) {
	tests := []struct {
		tag  []byte
		want int64
	}{
		{id3v2(0, false), 10},
		{id3v2(300, false), 310},
		{id3v2(300, true), 320},
		{[]byte("ID3\x03\x00\x00\x00\x00\x02\x01"), 10 + 257},
		{[]byte("ID3\xff\x00\x00\x00\x00\x00\x00"), 0},
		{[]byte("ID3\x04\x00\x00\x00\x00\x00"), 0},
		{[]byte("ID4\x04\x00\x00\x00\x00\x00\x00"), 0},
	}
	for _, tt := range tests {
		if got := id3v2Len(tt.tag); got != tt.want {
			t.Errorf("id3v2Len(%q) = %d, want %d", tt.tag[:min(len(tt.tag), 10)], got, tt.want)
		}
	}
}
