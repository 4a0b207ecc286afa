package audio

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"github.com/svc-dev/svc/internal/api"
)

const (
	streamInfoLen = 34
	// maxFrameHeaderLen bounds a FLAC frame header: sync and codes (4),
	// coded number (7), block size (2), sample rate (2) and CRC-8 (1).
	maxFrameHeaderLen = 16
	// maxFrameGap is how many samples the frame scan lets pass between two
	// frame headers it accepts, so that one damaged header does not end the
	// count while a false sync far ahead cannot be taken.
	maxFrameGap = 1 << 20
)

// streamInfo is what a FLAC STREAMINFO block says.
type streamInfo struct {
	maxBlock int
	rate     int
	channels int
	bits     int
	total    uint64 // samples per channel; 0 when the encoder did not know
}

func parseStreamInfo(b []byte) streamInfo {
	x := binary.BigEndian.Uint64(b[10:18]) // rate 20 bits, channels-1 3, bits-1 5, total 36
	return streamInfo{
		maxBlock: int(binary.BigEndian.Uint16(b[2:4])),
		rate:     int(x >> 44),
		channels: int(x>>41&0x7) + 1,
		bits:     int(x>>36&0x1F) + 1,
		total:    x & (1<<36 - 1),
	}
}

// probeFLAC measures a FLAC stream: STREAMINFO's sample count over its
// rate. Probe scans the frame headers all the same, as it reads the whole
// file: a stream written to a pipe declares no count (0), and a truncated
// or mislabelled one a count its frames contradict; the position where the
// last frame ends then gives the count.
func probeFLAC(s *stream) (Info, error) {
	si, err := readFLACHeader(s)
	if err != nil {
		return Info{}, err
	}
	end, err := lastFrameEnd(s, si)
	if err != nil {
		return Info{}, err
	}
	if end == 0 {
		return Info{}, damaged(api.AudioFLAC, "no audio frames")
	}
	samples := si.total
	if diff := max(end, samples) - min(end, samples); samples == 0 || diff > uint64(max(si.maxBlock, 1)) {
		samples = end
	}
	return Info{
		Seconds:    float64(samples) / float64(si.rate),
		SampleRate: si.rate,
		Channels:   si.channels,
	}, nil
}

// readFLACHeader consumes the signature and the metadata blocks, the
// first of which must be STREAMINFO.
func readFLACHeader(s *stream) (streamInfo, error) {
	b, err := s.peek(4 + 4 + streamInfoLen)
	if err != nil {
		return streamInfo{}, err
	}
	if len(b) < 8 || b[4]&0x7F != 0 || blockLen(b[4:]) < streamInfoLen {
		return streamInfo{}, damaged(api.AudioFLAC, "no STREAMINFO")
	}
	if len(b) < 8+streamInfoLen {
		return streamInfo{}, damaged(api.AudioFLAC, "truncated STREAMINFO")
	}
	si := parseStreamInfo(b[8:])
	if si.rate == 0 {
		return streamInfo{}, damaged(api.AudioFLAC, "zero sample rate")
	}
	if _, err := s.skip(4); err != nil { // the signature
		return streamInfo{}, err
	}
	// Block headers: a last-block flag, a 7-bit type and a 24-bit length.
	for last := false; !last; {
		h, err := s.peek(4)
		if err != nil {
			return streamInfo{}, err
		}
		if len(h) < 4 {
			return streamInfo{}, damaged(api.AudioFLAC, "truncated metadata")
		}
		last = h[0]&0x80 != 0
		if _, err := s.skip(4 + blockLen(h)); err != nil {
			return streamInfo{}, err
		}
	}
	return si, nil
}

func blockLen(h []byte) int64 {
	return int64(h[1])<<16 | int64(h[2])<<8 | int64(h[3])
}

// flacFrame is what a FLAC frame header says.
type flacFrame struct {
	number    uint64 // the frame's number, or its first sample's in variable block size streams
	variable  bool
	size      int // samples per channel
	headerLen int
}

// lastFrameEnd consumes the frames and returns the sample where the last
// one ends. Frames have no length field: it looks for headers at every
// sync code and accepts those whose CRC-8 matches, that fit si, and whose
// position follows the previous one's.
func lastFrameEnd(s *stream, si streamInfo) (uint64, error) {
	var (
		end      uint64 // where the last frame accepted ends
		nominal  = uint64(si.maxBlock)
		variable bool
		seen     bool
	)
	for {
		b, n, err := s.window(maxFrameHeaderLen)
		if err != nil {
			return end, err
		}
		done := n
		for i := 0; i < n; i++ {
			j := bytes.IndexByte(b[i:n], 0xFF)
			if j < 0 {
				break
			}
			i += j
			f, ok := parseFrameHeaderFLAC(b[i:], si)
			if !ok || (seen && f.variable != variable) {
				continue
			}
			if !seen && !f.variable && nominal < 16 { // STREAMINFO's is invalid: the first frame is a full block
				nominal = uint64(f.size)
			}
			start := f.number
			if !f.variable {
				start *= nominal
			}
			if start >= end && start-end <= maxFrameGap {
				end, variable, seen = start+uint64(f.size), f.variable, true
				i += f.headerLen - 1
				done = max(done, i+1)
			}
		}
		if _, err := s.skip(int64(done)); err != nil || n == len(b) {
			return end, err
		}
	}
}

// parseFrameHeaderFLAC reads the frame header at the start of b, and
// checks it against si and its CRC-8.
func parseFrameHeaderFLAC(b []byte, si streamInfo) (flacFrame, bool) {
	if len(b) < 6 || b[0] != 0xFF || b[1]&0xFE != 0xF8 {
		return flacFrame{}, false
	}
	sizeCode, rateCode := b[2]>>4, b[2]&0x0F
	channelCode, bitsCode := int(b[3]>>4), b[3]>>1&0x07
	if sizeCode == 0 || rateCode == 15 || channelCode > 10 || b[3]&1 != 0 {
		return flacFrame{}, false
	}
	channels := channelCode + 1
	if channelCode >= 8 { // left/side, right/side, mid/side
		channels = 2
	}
	sampleBits := [8]int{0: si.bits, 1: 8, 2: 12, 4: 16, 5: 20, 6: 24, 7: 32}[bitsCode]
	if channels != si.channels || sampleBits != si.bits {
		return flacFrame{}, false
	}
	f := flacFrame{variable: b[1]&1 != 0}
	number, n, ok := utf8Number(b[4:])
	if !ok {
		return flacFrame{}, false
	}
	f.number = number
	i := 4 + n
	switch {
	case sizeCode == 1:
		f.size = 192
	case sizeCode <= 5:
		f.size = 576 << (sizeCode - 2)
	case sizeCode == 6 && i < len(b):
		f.size = int(b[i]) + 1
		i++
	case sizeCode == 7 && i+1 < len(b):
		f.size = int(binary.BigEndian.Uint16(b[i:])) + 1
		i += 2
	case sizeCode >= 8:
		f.size = 256 << (sizeCode - 8)
	}
	rate := si.rate // code 0: STREAMINFO's
	switch rateCode {
	case 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11:
		rate = flacRates[rateCode]
	case 12:
		if i < len(b) {
			rate = int(b[i]) * 1000
		}
		i++
	case 13, 14:
		if i+1 < len(b) {
			rate = int(binary.BigEndian.Uint16(b[i:]))
			if rateCode == 14 {
				rate *= 10
			}
		}
		i += 2
	}
	// A frame at another rate than STREAMINFO's is not this stream's: the
	// length is counted in STREAMINFO's samples, which a forged rate
	// would stretch.
	if f.size == 0 || i >= len(b) || crc8(b[:i]) != b[i] || rate != si.rate {
		return flacFrame{}, false
	}
	f.headerLen = i + 1
	return f, true
}

// flacRates are the sample rates a frame header's codes 1 to 11 name.
var flacRates = [12]int{1: 88200, 2: 176400, 3: 192000, 4: 8000, 5: 16000, 6: 22050, 7: 24000, 8: 32000, 9: 44100, 10: 48000, 11: 96000}

// utf8Number decodes the frame or sample number that FLAC codes like
// UTF-8, extended to 7 bytes (36 bits).
func utf8Number(b []byte) (v uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	n = bits.LeadingZeros8(^b[0]) // the leading ones give the length
	switch {
	case n == 0:
		return uint64(b[0]), 1, true
	case n == 1 || n == 8 || len(b) < n:
		return 0, 0, false
	}
	v = uint64(b[0] & (0x7F >> n))
	for _, c := range b[1:n] {
		if c&0xC0 != 0x80 {
			return 0, 0, false
		}
		v = v<<6 | uint64(c&0x3F)
	}
	return v, n, true
}

// crc8 is FLAC's header CRC: polynomial x^8 + x^2 + x + 1, initial 0.
func crc8(b []byte) byte {
	var c byte
	for _, x := range b {
		c ^= x
		for range 8 {
			if c&0x80 != 0 {
				c = c<<1 ^ 0x07
			} else {
				c <<= 1
			}
		}
	}
	return c
}
