package audio

import (
	"bytes"
	"testing"
)

const uploadSize = 25 << 20

// benchmarkProbe runs Probe on file; the allocations reported show that
// memory stays at the stream's buffer whatever the file's size.
func benchmarkProbe(b *testing.B, file []byte) {
	b.SetBytes(int64(len(file)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Probe(bytes.NewReader(file)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProbeMP3 scans the frames of a 25 MB CBR file at 128 kbit/s
// (some 63 000 frames): with no Xing tag, every header is read.
func BenchmarkProbeMP3(b *testing.B) {
	benchmarkProbe(b, frames(cbr128, uploadSize/cbr128Len()))
}

func cbr128Len() int { return len(cbr128.bytes()) }

// BenchmarkProbeJunk is a worst case: a tag and a frame header that make
// the file an MP3, then 25 MB of 0xFF, each byte a sync candidate to check
// and reject.
func BenchmarkProbeJunk(b *testing.B) {
	file := bytes.Join([][]byte{id3v2(10, false), cbr128.bytes()[:frameHeaderLen], bytes.Repeat([]byte{0xFF}, uploadSize)}, nil)
	b.SetBytes(int64(len(file)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Probe(bytes.NewReader(file)); err == nil {
			b.Fatal("Probe found frames in junk")
		}
	}
}

func BenchmarkProbeWAV(b *testing.B) {
	benchmarkProbe(b, riff(fmtChunk(wavPCM, 2, 44100, 16, 0), dataChunk(uploadSize)))
}

func BenchmarkResample(b *testing.B) {
	in := sine(1000, 0.5, 22050, 10*22050)
	b.ReportAllocs()
	for b.Loop() {
		Resample(in, 22050, 24000)
	}
}

func BenchmarkDecodeMP3(b *testing.B) {
	file := fixture(b, "speech-vbr.mp3")
	b.SetBytes(int64(len(file)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(bytes.NewReader(file)); err != nil {
			b.Fatal(err)
		}
	}
}
