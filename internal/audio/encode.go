package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// SpeechRate is the rate of every speech reply.
const SpeechRate = 24000

const wavHeaderLen = 44

// Sample rates ToSpeechWAV converts from: beyond them a header is damaged,
// or resampling would take more memory than the audio deserves.
const (
	minSpeechInputRate = 1000
	maxSpeechInputRate = 768000
)

// EncodeWAV writes pcm as a RIFF/WAVE file with the canonical 44-byte
// header: 16-bit PCM, mono, at pcm.Rate. Samples are clipped to [-1, 1]
// and rounded to the nearest step, without dither: the output is speech at
// ordinary levels, far above 16-bit quantisation noise, and it stays the
// same from one run to the next.
func EncodeWAV(w io.Writer, pcm PCM) error {
	if pcm.Rate <= 0 || pcm.Rate > math.MaxUint32/2 {
		return fmt.Errorf("encode wav: sample rate %d", pcm.Rate)
	}
	dataLen := 2 * int64(len(pcm.Samples))
	if dataLen > math.MaxUint32-(wavHeaderLen-8) {
		return errors.New("encode wav: too many samples for a RIFF file")
	}
	le := binary.LittleEndian
	buf := make([]byte, 0, 8<<10)
	buf = append(buf, "RIFF"...)
	buf = le.AppendUint32(buf, uint32(wavHeaderLen-8+dataLen))
	buf = append(buf, "WAVEfmt "...)
	buf = le.AppendUint32(buf, 16)
	buf = le.AppendUint16(buf, wavPCM)
	buf = le.AppendUint16(buf, 1) // channels
	buf = le.AppendUint32(buf, uint32(pcm.Rate))
	buf = le.AppendUint32(buf, uint32(2*pcm.Rate)) // byte rate
	buf = le.AppendUint16(buf, 2)                  // block align
	buf = le.AppendUint16(buf, 16)                 // bits per sample
	buf = append(buf, "data"...)
	buf = le.AppendUint32(buf, uint32(dataLen))
	for _, v := range pcm.Samples {
		if len(buf)+2 > cap(buf) {
			if _, err := w.Write(buf); err != nil {
				return fmt.Errorf("encode wav: %w", err)
			}
			buf = buf[:0]
		}
		buf = le.AppendUint16(buf, uint16(quantize(v)))
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("encode wav: %w", err)
	}
	return nil
}

// quantize maps [-1, 1] to 16 bits by the same scale as the decoders, so
// that 16-bit audio goes through Decode and EncodeWAV unchanged.
func quantize(v float32) int16 {
	x := math.Round(float64(v) * (1 << 15))
	switch {
	case math.IsNaN(x):
		return 0
	case x > math.MaxInt16:
		return math.MaxInt16
	case x < math.MinInt16:
		return math.MinInt16
	}
	return int16(x)
}

// ToSpeechWAV turns a WAV file of any PCM or float layout, rate and
// channel count into a SpeechRate, 16-bit, mono WAV, and returns it with
// its duration in seconds. A file already in that layout, with its data
// chunk whole, is returned as is. As it decodes with Decode, MP3 and FLAC
// work too.
func ToSpeechWAV(wav []byte) ([]byte, float64, error) {
	if samples, ok := speechLayout(wav); ok {
		return wav, float64(samples) / SpeechRate, nil
	}
	pcm, err := Decode(bytes.NewReader(wav))
	if err != nil {
		return nil, 0, err
	}
	if pcm.Rate < minSpeechInputRate || pcm.Rate > maxSpeechInputRate {
		format := Sniff(wav)
		return nil, 0, damaged(format, fmt.Sprintf("sample rate %d Hz", pcm.Rate))
	}
	out := PCM{Rate: SpeechRate, Samples: Resample(pcm.Samples, pcm.Rate, SpeechRate)}
	var b bytes.Buffer
	b.Grow(wavHeaderLen + 2*len(out.Samples))
	if err := EncodeWAV(&b, out); err != nil {
		return nil, 0, err
	}
	return b.Bytes(), float64(len(out.Samples)) / SpeechRate, nil
}

// speechLayout reports whether wav is a 16-bit mono WAV at SpeechRate
// whose data chunk lies whole within it, and how many samples it holds.
func speechLayout(wav []byte) (samples int64, ok bool) {
	s := newStream(bytes.NewReader(wav))
	f, size, err := readWAVHeader(s)
	if err != nil || f.tag != wavPCM || f.channels != 1 || f.rate != SpeechRate ||
		f.blockAlign != 2 || f.bits != 16 || size < 0 || size%2 != 0 || s.off+size > int64(len(wav)) {
		return 0, false
	}
	return size / 2, true
}
