package audio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/svc-dev/svc/internal/api"
)

// WAVE format tags.
const (
	wavPCM        = 0x0001
	wavFloat      = 0x0003
	wavExtensible = 0xFFFE
)

// streamedSize is what a writer that cannot seek back leaves in a chunk
// size: the data then runs to the end of the file.
const streamedSize = 0xFFFFFFFF

// wavFormat is what a fmt chunk says.
type wavFormat struct {
	tag        uint16 // WAVE_FORMAT_EXTENSIBLE resolved to its sub-format
	channels   int
	rate       int
	byteRate   int
	blockAlign int
	bits       int
}

// ksdataformatTail is the part of a WAVE_FORMAT_EXTENSIBLE sub-format GUID
// after its leading format tag, the same for every tag.
const ksdataformatTail = "\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"

func parseFmt(b []byte) (wavFormat, error) {
	if len(b) < 16 {
		return wavFormat{}, damaged(api.AudioWAV, "short fmt chunk")
	}
	le := binary.LittleEndian
	f := wavFormat{
		tag:        le.Uint16(b[0:]),
		channels:   int(le.Uint16(b[2:])),
		rate:       int(le.Uint32(b[4:])),
		byteRate:   int(le.Uint32(b[8:])),
		blockAlign: int(le.Uint16(b[12:])),
		bits:       int(le.Uint16(b[14:])),
	}
	if f.tag == wavExtensible && len(b) >= 40 && string(b[26:40]) == ksdataformatTail {
		f.tag = le.Uint16(b[24:])
	}
	switch {
	case f.channels == 0:
		return wavFormat{}, damaged(api.AudioWAV, "no channels")
	case f.rate == 0:
		return wavFormat{}, damaged(api.AudioWAV, "zero sample rate")
	}
	// PCM and float samples are laid out by the block size: one that does
	// not divide into the channels' samples of a size the encoding has is
	// a damaged header, judged here so that the gateway's probe refuses
	// what a worker's decoder (sampleReader) would. Compressed encodings
	// (A-law, ADPCM) are the engine's to read.
	if f.tag == wavPCM || f.tag == wavFloat {
		size := 0
		if f.blockAlign%f.channels == 0 {
			size = f.blockAlign / f.channels
		}
		if f.tag == wavPCM && (size < 1 || size > 4) || f.tag == wavFloat && size != 4 && size != 8 {
			return wavFormat{}, damaged(api.AudioWAV, fmt.Sprintf("block size %d for %d channels", f.blockAlign, f.channels))
		}
	}
	return f, nil
}

// bytesPerSecond is the data rate. For PCM and float the block size gives
// it and byte_rate, which some writers get wrong, is ignored; compressed
// encodings have only byte_rate.
func (f wavFormat) bytesPerSecond() int64 {
	if (f.tag == wavPCM || f.tag == wavFloat) && f.blockAlign > 0 {
		return int64(f.blockAlign) * int64(f.rate)
	}
	return int64(f.byteRate)
}

// readRIFF consumes the RIFF header: only its magic matters, since
// streamed files leave its size unset.
func readRIFF(s *stream) error {
	b, err := s.peek(12)
	if err != nil {
		return err
	}
	if len(b) < 12 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return damaged(api.AudioWAV, "no RIFF/WAVE header")
	}
	_, err = s.skip(12)
	return err
}

// nextChunk consumes a chunk header; ok is false at the end of the file.
func nextChunk(s *stream) (id string, size int64, ok bool, err error) {
	b, err := s.peek(8)
	if err != nil || len(b) < 8 {
		return "", 0, false, err
	}
	id, size = string(b[:4]), int64(binary.LittleEndian.Uint32(b[4:]))
	_, err = s.skip(8)
	return id, size, err == nil, err
}

// skipChunk consumes a chunk's body and its pad byte: chunks start at even
// offsets.
func skipChunk(s *stream, size int64) error {
	_, err := s.skip(size + size&1)
	return err
}

// readFmtChunk consumes a fmt chunk of the given size.
func readFmtChunk(s *stream, size int64) (wavFormat, error) {
	b, err := s.peek(int(min(size, 40))) // 40: WAVE_FORMAT_EXTENSIBLE's
	if err != nil {
		return wavFormat{}, err
	}
	f, err := parseFmt(b)
	if err != nil {
		return wavFormat{}, err
	}
	return f, skipChunk(s, size)
}

// probeWAV measures a WAV file: the data chunk's size over the data rate.
// The size actually present counts, not the one declared, so a truncated
// file is measured as what it holds, and a streamed one (size 0 or
// 0xFFFFFFFF) as what runs to the end of the file.
func probeWAV(s *stream) (Info, error) {
	if err := readRIFF(s); err != nil {
		return Info{}, err
	}
	var format *wavFormat
	data := int64(-1)
	for format == nil || data < 0 {
		id, size, ok, err := nextChunk(s)
		if err != nil {
			return Info{}, err
		}
		if !ok {
			break
		}
		switch {
		case id == "fmt " && format == nil:
			f, err := readFmtChunk(s, size)
			if err != nil {
				return Info{}, err
			}
			format = &f
		case id == "data" && data < 0:
			if size == 0 || size == streamedSize {
				size = math.MaxInt64
			}
			if data, err = s.skip(size); err != nil {
				return Info{}, err
			}
			if data == size {
				if _, err := s.skip(size & 1); err != nil {
					return Info{}, err
				}
			}
		default:
			if err := skipChunk(s, size); err != nil {
				return Info{}, err
			}
		}
	}
	switch {
	case format == nil:
		return Info{}, damaged(api.AudioWAV, "no fmt chunk")
	case data < 0:
		return Info{}, damaged(api.AudioWAV, "no data chunk")
	case format.bytesPerSecond() == 0:
		return Info{}, damaged(api.AudioWAV, "zero byte rate")
	}
	return Info{
		Seconds:    float64(data) / float64(format.bytesPerSecond()),
		SampleRate: format.rate,
		Channels:   format.channels,
	}, nil
}

// readWAVHeader consumes a WAV file's chunks up to its audio data and
// returns the format and the data's declared size (-1 when it runs to the
// end of the file). A fmt chunk after the data cannot be used, since the
// data is read as it streams.
func readWAVHeader(s *stream) (wavFormat, int64, error) {
	if err := readRIFF(s); err != nil {
		return wavFormat{}, 0, err
	}
	var format *wavFormat
	for {
		id, size, ok, err := nextChunk(s)
		if err != nil {
			return wavFormat{}, 0, err
		}
		if !ok {
			return wavFormat{}, 0, damaged(api.AudioWAV, "no data chunk")
		}
		switch {
		case id == "fmt " && format == nil:
			f, err := readFmtChunk(s, size)
			if err != nil {
				return wavFormat{}, 0, err
			}
			format = &f
		case id == "data":
			if format == nil {
				return wavFormat{}, 0, damaged(api.AudioWAV, "no fmt chunk before the data")
			}
			if size == 0 || size == streamedSize {
				size = -1
			}
			return *format, size, nil
		default:
			if err := skipChunk(s, size); err != nil {
				return wavFormat{}, 0, err
			}
		}
	}
}

// sampleReader returns the function that converts one sample of f's
// layout to [-1, 1], and the sample's size in bytes.
func sampleReader(f wavFormat) (func([]byte) float32, int, error) {
	if f.blockAlign == 0 || f.blockAlign%f.channels != 0 {
		return nil, 0, damaged(api.AudioWAV, fmt.Sprintf("block size %d for %d channels", f.blockAlign, f.channels))
	}
	// The container size, not bits per sample, lays samples out: 20-bit
	// audio sits in 3 bytes, 12-bit in 2, and the low bits are zero.
	size := f.blockAlign / f.channels
	le := binary.LittleEndian
	switch {
	case f.tag == wavPCM && size == 1:
		return func(b []byte) float32 { return (float32(b[0]) - 128) / 128 }, size, nil
	case f.tag == wavPCM && size == 2:
		return func(b []byte) float32 { return float32(int16(le.Uint16(b))) / (1 << 15) }, size, nil
	case f.tag == wavPCM && size == 3:
		return func(b []byte) float32 {
			return float32(int32(uint32(b[0])<<8|uint32(b[1])<<16|uint32(b[2])<<24)>>8) / (1 << 23)
		}, size, nil
	case f.tag == wavPCM && size == 4:
		return func(b []byte) float32 { return float32(float64(int32(le.Uint32(b))) / (1 << 31)) }, size, nil
	case f.tag == wavFloat && size == 4:
		return func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) }, size, nil
	case f.tag == wavFloat && size == 8:
		return func(b []byte) float32 { return float32(math.Float64frombits(le.Uint64(b))) }, size, nil
	}
	return nil, 0, unsupported(api.AudioWAV, fmt.Sprintf("its encoding, format 0x%04x with %d-byte samples, is not PCM or float; send PCM", f.tag, size))
}

// decodeWAV reads the samples of a WAV file's data chunk and mixes them to
// mono. A last sample frame cut short is dropped.
func decodeWAV(s *stream, limit int) (PCM, error) {
	f, size, err := readWAVHeader(s)
	if err != nil {
		return PCM{}, err
	}
	sample, width, err := sampleReader(f)
	if err != nil {
		return PCM{}, err
	}
	data := io.Reader(s)
	if size >= 0 {
		data = io.LimitReader(s, size)
	}
	frames := max(bufSize/f.blockAlign, 1)
	buf := make([]byte, frames*f.blockAlign)
	out := PCM{Rate: f.rate}
	gain := 1 / float32(f.channels)
	for {
		n, err := io.ReadFull(data, buf)
		n -= n % f.blockAlign
		if len(out.Samples)+n/f.blockAlign > limit {
			return PCM{}, ErrTooLong
		}
		for frame := buf[:n]; len(frame) > 0; frame = frame[f.blockAlign:] {
			var sum float32
			for ch := range f.channels {
				sum += sample(frame[ch*width:])
			}
			out.Samples = append(out.Samples, clean(sum*gain))
		}
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return out, nil
		case err != nil:
			return PCM{}, err
		}
	}
}
