package audio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/hajimehoshi/go-mp3"
	"github.com/mewkiz/flac"
	"github.com/mewkiz/flac/frame"

	"github.com/svc-dev/svc/internal/api"
)

// PCM is mono audio, samples in [-1, 1].
type PCM struct {
	Rate    int
	Samples []float32
}

// MaxDecodeSamples is how many samples Decode returns at most: 30 minutes
// at 48 kHz, 330 MiB of float32. Compressed formats are the reason for a
// limit: a 25 MB MP3 at 8 kbit/s holds 7 hours, and a FLAC of silence
// holds almost any length in a few bytes.
const MaxDecodeSamples = 30 * 60 * 48000

// Decode decodes a whole WAV, MP3 or FLAC file, sniffed from its content,
// to mono PCM at its own rate, averaging its channels. It is
// DecodeLimit(r, MaxDecodeSamples).
func Decode(r io.Reader) (PCM, error) {
	return DecodeLimit(r, MaxDecodeSamples)
}

// DecodeLimit is Decode returning ErrTooLong past limit samples.
//
// WAV may hold 8-bit unsigned, 16-, 24- or 32-bit signed integer or 32- or
// 64-bit float samples, plain or WAVE_FORMAT_EXTENSIBLE. MP3 must be MPEG 1
// or 2 Layer III and FLAC at most 24-bit, which is what the decoder
// libraries handle. A stream damaged part-way ends where the decoder gives
// up: what came before is returned, as players do. Otherwise the errors
// are those of Probe.
func DecodeLimit(r io.Reader, limit int) (PCM, error) {
	s := newStream(r)
	format, err := s.sniff()
	if err != nil {
		return PCM{}, err
	}
	switch format {
	case api.AudioWAV:
		return decodeWAV(s, limit)
	case api.AudioMP3:
		return guard(format, func() (PCM, error) { return decodeMP3(s, limit) })
	case api.AudioFLAC:
		return guard(format, func() (PCM, error) { return decodeFLAC(s, limit) })
	}
	return PCM{}, ErrUnsupported
}

// guard runs a decoder library, turning its panics into a *FormatError:
// both index tables with values read from the bitstream, and some damaged
// files make them panic. The gateway must not go down for a bad upload.
func guard(format string, decode func() (PCM, error)) (pcm PCM, err error) {
	defer func() {
		if p := recover(); p != nil {
			pcm, err = PCM{}, damaged(format, fmt.Sprint("decoder failed: ", p))
		}
	}()
	return decode()
}

// decodeMP3 decodes MPEG Layer III frames with go-mp3, after finding the
// first frame itself: go-mp3 allocates whatever an ID3v2 tag's size says,
// and does not handle MPEG 2.5 or Layers I and II.
func decodeMP3(s *stream, limit int) (PCM, error) {
	first, found, err := syncFrame(s, nil)
	if err != nil {
		return PCM{}, err
	}
	switch {
	case !found:
		return PCM{}, damaged(api.AudioMP3, "no valid frame")
	case first.layer != 3:
		return PCM{}, unsupported(api.AudioMP3, fmt.Sprintf("Layer %d; send Layer III, WAV or FLAC", first.layer))
	case first.version == mpeg25:
		return PCM{}, unsupported(api.AudioMP3, "MPEG 2.5; send MPEG 1 or 2, WAV or FLAC")
	}
	// go-mp3 would decode a Xing or VBRI tag's frame as silence.
	frame, err := s.peek(first.size())
	if err != nil {
		return PCM{}, err
	}
	if _, isTag := vbrTag(frame, first); isTag {
		if _, err := s.skip(int64(len(frame))); err != nil {
			return PCM{}, err
		}
	}
	g := &lsfGuard{s: s}
	d, err := mp3.NewDecoder(g)
	if g.refused != nil {
		return PCM{}, g.refused
	}
	if err != nil {
		return PCM{}, decoderError(api.AudioMP3, err)
	}
	// go-mp3 always yields 16-bit little-endian stereo, mono duplicated.
	const frameLen = 4
	out := PCM{Rate: d.SampleRate()}
	buf := make([]byte, 1152*frameLen*4)
	kept := 0 // bytes of a sample frame split across reads
	for {
		n, err := d.Read(buf[kept:])
		n += kept
		if len(out.Samples)+n/frameLen > limit {
			return PCM{}, ErrTooLong
		}
		for i := 0; i+frameLen <= n; i += frameLen {
			l := int16(binary.LittleEndian.Uint16(buf[i:]))
			r := int16(binary.LittleEndian.Uint16(buf[i+2:]))
			out.Samples = append(out.Samples, (float32(l)+float32(r))/2/(1<<15))
		}
		kept = copy(buf, buf[n-n%frameLen:n])
		if g.refused != nil {
			return PCM{}, g.refused
		}
		if err != nil {
			return endOfStream(api.AudioMP3, out, err)
		}
	}
}

// lsfGuard passes an MP3 file to go-mp3 a frame at a time, and refuses the
// first frame go-mp3 would misread: it takes a padded MPEG 2 frame to be a
// byte shorter than it is wherever 144 × bitrate / sample rate is even
// (22.05 kHz at 8, 16, 24, 32, 80, 96, 144 and 160 kbit/s), and reads the
// rest of the file a byte out, which made loud noise of the speech in such
// files rather than an error. Bytes between frames (a tag where two files
// were joined, a damaged stretch) are passed on as they are, up to the
// next frame, as go-mp3 skips them.
type lsfGuard struct {
	s       *stream
	left    int // bytes still to pass on before the next frame's header
	refused error
}

func (g *lsfGuard) Read(p []byte) (int, error) {
	if g.refused != nil {
		return 0, g.refused
	}
	if g.left == 0 {
		if err := g.next(); err != nil {
			return 0, err
		}
		if g.left == 0 {
			return g.s.Read(p) // the end of the file
		}
	}
	n, err := g.s.Read(p[:min(len(p), g.left)])
	g.left -= n
	return n, err
}

// next reads what comes at a frame's boundary: a frame, whose length it
// passes on unless go-mp3 would misread it, or bytes up to the next frame
// (frameAt), all of the window when none is in it.
func (g *lsfGuard) next() error {
	b, n, err := g.s.window(frameSearch)
	if err != nil || len(b) < frameHeaderLen {
		return err
	}
	if h, ok := parseFrameHeader(b); ok {
		if h.version == mpeg2 && h.padding && (144*h.bitrate/h.sampleRate)%2 == 0 {
			g.refused = unsupported(api.AudioMP3, fmt.Sprintf(
				"MPEG 2 frames at %d Hz and %d kbit/s, which the decoder here misreads; send it at another bitrate, or as WAV or FLAC",
				h.sampleRate, h.bitrate/1000))
			return g.refused
		}
		g.left = h.size()
		return nil
	}
	if i, _ := frameAt(b, n, nil); i > 0 {
		g.left = i
		return nil
	}
	g.left = max(n, 1)
	return nil
}

// decodeFLAC decodes FLAC frames with mewkiz/flac.
func decodeFLAC(s *stream, limit int) (PCM, error) {
	// mewkiz/flac parses the first metadata block whatever its type, and
	// takes STREAMINFO's length for granted: check both first.
	b, err := s.peek(8)
	if err != nil {
		return PCM{}, err
	}
	if len(b) < 8 || b[4]&0x7F != 0 || blockLen(b[4:]) != streamInfoLen {
		return PCM{}, damaged(api.AudioFLAC, "no STREAMINFO")
	}
	st, err := flac.New(s)
	if err != nil {
		return PCM{}, decoderError(api.AudioFLAC, err)
	}
	info := st.Info
	if info.SampleRate == 0 {
		return PCM{}, damaged(api.AudioFLAC, "zero sample rate")
	}
	out := PCM{Rate: int(info.SampleRate)}
	if info.NSamples > 0 {
		out.Samples = make([]float32, 0, min(info.NSamples, uint64(limit), 1<<22))
	}
	for {
		f, err := st.Next()
		if err == nil {
			// A header may leave the sample size to STREAMINFO, which the
			// library does not fill in.
			if f.BitsPerSample == 0 {
				f.BitsPerSample = info.BitsPerSample
			}
			err = f.Parse()
		}
		if err != nil {
			return endOfStream(api.AudioFLAC, out, err)
		}
		n := int(f.BlockSize)
		if len(out.Samples)+n > limit {
			return PCM{}, ErrTooLong
		}
		if err := checkFrame(f, n); err != nil {
			return endOfStream(api.AudioFLAC, out, err)
		}
		scale := 1 / (float32(len(f.Subframes)) * float32(uint64(1)<<(f.BitsPerSample-1)))
		for i := range n {
			var sum float32
			for _, sub := range f.Subframes {
				sum += float32(sub.Samples[i])
			}
			// Damaged residuals can decode past full scale.
			out.Samples = append(out.Samples, clean(sum*scale))
		}
	}
}

// checkFrame checks what decodeFLAC relies on in a decoded frame.
func checkFrame(f *frame.Frame, n int) error {
	if f.BitsPerSample == 0 || f.BitsPerSample > 32 || len(f.Subframes) == 0 {
		return fmt.Errorf("frame of %d-bit samples in %d channels", f.BitsPerSample, len(f.Subframes))
	}
	for _, sub := range f.Subframes {
		if len(sub.Samples) < n {
			return errors.New("short subframe")
		}
	}
	return nil
}

// endOfStream ends decoding on err: at the end of the file, or at damage
// part-way, after which the audio decoded so far is returned. Read errors,
// and damage before any audio, are errors.
func endOfStream(format string, out PCM, err error) (PCM, error) {
	if isReadError(err) || len(out.Samples) == 0 {
		return PCM{}, decoderError(format, err)
	}
	return out, nil
}

// decoderError reports a decoder library's error as a *FormatError, but
// read errors as they are.
func decoderError(format string, err error) error {
	switch {
	case isReadError(err):
		return err
	case errors.Is(err, io.EOF):
		return damaged(format, "no audio frames")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return damaged(format, "truncated")
	}
	return damaged(format, err.Error())
}

// clean maps what float samples may hold that the rest of the pipeline
// cannot use, NaN and infinities, into [-1, 1].
func clean(v float32) float32 {
	switch {
	case math.IsNaN(float64(v)):
		return 0
	case v > 1:
		return 1
	case v < -1:
		return -1
	}
	return v
}
