package audio

import (
	"fmt"
	"io"

	"github.com/svc-dev/svc/internal/api"
)

// Info is what an audio file's headers say about it.
type Info struct {
	Format     string  // api.AudioWAV, api.AudioMP3 or api.AudioFLAC
	Seconds    float64 // duration
	SampleRate int
	Channels   int
	Bytes      int64 // bytes read from the reader: the whole file
}

// Probe reads r to its end and reports the file's format and duration,
// from its headers, checked against what the file holds:
//
//   - WAV: the data chunk's size over the byte rate; a streamed file's
//     data (size 0 or 0xFFFFFFFF) runs to the end of the file, and a
//     truncated one is measured as what it holds.
//   - FLAC: STREAMINFO's sample count over its rate; when the count is
//     unknown (0) or the frames contradict it, the end of the last frame.
//   - MP3: the frame count of a Xing/Info or VBRI tag, or else the frames
//     found by scanning the stream (MPEG 1, 2 and 2.5, Layers I to III;
//     free-format streams are refused). Whole frames count, so the
//     duration includes the encoder's delay and padding (some 50 ms).
//
// Memory stays within a fixed buffer of 32 KiB whatever the file's size.
// Probe returns ErrUnsupported for other content, a *FormatError for
// damaged headers, and read errors from r wrapped.
func Probe(r io.Reader) (Info, error) {
	s := newStream(r)
	format, err := s.sniff()
	if err != nil {
		return Info{}, err
	}
	var info Info
	switch format {
	case api.AudioWAV:
		info, err = probeWAV(s)
	case api.AudioFLAC:
		info, err = probeFLAC(s)
	case api.AudioMP3:
		info, err = probeMP3(s)
	default:
		return Info{}, ErrUnsupported
	}
	if err != nil {
		return Info{}, err
	}
	if info.SampleRate < MinSampleRate {
		// Seconds are samples over the rate: a file declaring a few hertz
		// would be a tiny file of days of audio.
		return Info{}, unsupported(format, fmt.Sprintf("its sample rate, %d Hz, is below %d Hz", info.SampleRate, MinSampleRate))
	}
	if err := s.drain(); err != nil {
		return Info{}, err
	}
	info.Format, info.Bytes = format, s.off
	return info, nil
}

// MinSampleRate is the lowest sample rate Probe takes: under telephone
// speech's 8 kHz, above any rate whose samples would count as hours.
const MinSampleRate = 4000
