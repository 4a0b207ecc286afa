package audio

import (
	"bytes"
	"encoding/binary"

	"github.com/svc-dev/svc/internal/api"
)

const (
	frameHeaderLen = 4
	// maxFrameLen is the longest MPEG audio frame: Layer II at 160 kbit/s
	// and 8 kHz, padded.
	maxFrameLen = 2881
)

type mpegVersion uint8

const (
	mpeg1 mpegVersion = iota
	mpeg2
	mpeg25
)

// frameHeader is what an MPEG audio frame header says.
type frameHeader struct {
	version    mpegVersion
	layer      int // 1, 2 or 3
	bitrate    int // bit/s
	sampleRate int
	padding    bool
	mono       bool
	crc        bool
}

// bitrates in kbit/s by [MPEG-2 or 2.5][layer-1][index-1].
var bitrates = [2][3][14]int{
	{
		{32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448},
		{32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384},
		{32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320},
	},
	{
		{32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256},
		{8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160},
		{8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160},
	},
}

var sampleRates = [3][3]int{
	mpeg1:  {44100, 48000, 32000},
	mpeg2:  {22050, 24000, 16000},
	mpeg25: {11025, 12000, 8000},
}

// parseFrameHeader reads the frame header at the start of b. Free-format
// frames (bitrate index 0) are refused: their length is not in the header.
func parseFrameHeader(b []byte) (frameHeader, bool) {
	if len(b) < frameHeaderLen || b[0] != 0xFF || b[1]&0xE0 != 0xE0 {
		return frameHeader{}, false
	}
	var h frameHeader
	switch b[1] >> 3 & 3 {
	case 3:
		h.version = mpeg1
	case 2:
		h.version = mpeg2
	case 0:
		h.version = mpeg25
	default:
		return frameHeader{}, false
	}
	// Layer bits 00 are reserved in MPEG audio; with this sync they mark
	// ADTS AAC, which is not ours either.
	h.layer = 4 - int(b[1]>>1&3)
	bitrateIndex, rateIndex := int(b[2]>>4), int(b[2]>>2&3)
	// Emphasis 10 is reserved: no encoder writes it, so it betrays a false
	// sync in junk.
	if h.layer == 4 || bitrateIndex == 0 || bitrateIndex == 15 || rateIndex == 3 || b[3]&3 == 2 {
		return frameHeader{}, false
	}
	lsf := 0
	if h.version != mpeg1 {
		lsf = 1
	}
	h.bitrate = bitrates[lsf][h.layer-1][bitrateIndex-1] * 1000
	h.sampleRate = sampleRates[h.version][rateIndex]
	h.padding = b[2]&0x02 != 0
	h.mono = b[3]>>6 == 3
	h.crc = b[1]&0x01 == 0
	return h, true
}

// samples is how many samples (per channel) the frame holds.
func (h frameHeader) samples() int {
	switch {
	case h.layer == 1:
		return 384
	case h.layer == 3 && h.version != mpeg1:
		return 576
	}
	return 1152
}

// size is the frame's length in bytes, header included; never less than 32.
func (h frameHeader) size() int {
	pad := 0
	if h.padding {
		pad = 1
	}
	if h.layer == 1 {
		return (12*h.bitrate/h.sampleRate + pad) * 4
	}
	return h.samples()/8*h.bitrate/h.sampleRate + pad
}

func (h frameHeader) channels() int {
	if h.mono {
		return 1
	}
	return 2
}

// sameStream reports whether o can be the next frame of h's stream. The
// bitrate may change (VBR) and so may the channel mode, in some joint
// stereo streams.
func (h frameHeader) sameStream(o frameHeader) bool {
	return h.version == o.version && h.layer == o.layer && h.sampleRate == o.sampleRate
}

// vbrTag reads the Xing/Info or VBRI tag that encoders put in a first
// frame of silence, and returns the number of audio frames it declares (0
// when it declares none) and whether the frame is such a tag rather than
// audio.
func vbrTag(frame []byte, h frameHeader) (frames int64, isTag bool) {
	if h.layer != 3 {
		return 0, false
	}
	sideInfo := 32
	switch {
	case h.version == mpeg1 && h.mono, h.version != mpeg1 && !h.mono:
		sideInfo = 17
	case h.version != mpeg1 && h.mono:
		sideInfo = 9
	}
	offsets := []int{frameHeaderLen + sideInfo}
	if h.crc { // some writers count the CRC, some do not
		offsets = append(offsets, frameHeaderLen+2+sideInfo)
	}
	for _, o := range offsets {
		if o+12 > len(frame) {
			continue
		}
		if tag := string(frame[o : o+4]); tag != "Xing" && tag != "Info" {
			continue
		}
		if flags := binary.BigEndian.Uint32(frame[o+4:]); flags&1 == 0 {
			return 0, true
		}
		return int64(binary.BigEndian.Uint32(frame[o+8:])), true
	}
	// VBRI always sits 32 bytes after the header, whatever the mode.
	if o := frameHeaderLen + 32; o+18 <= len(frame) && string(frame[o:o+4]) == "VBRI" {
		return int64(binary.BigEndian.Uint32(frame[o+14:])), true
	}
	return 0, false
}

// tagLen returns the length of the ID3v1, APEv2 or ID3v2 tag that starts
// b, or 0. An APEv2 footer counts alone: the items before it were skipped
// as junk.
func tagLen(b []byte) int64 {
	switch {
	case len(b) >= 3 && string(b[:3]) == "TAG":
		return 128
	case len(b) >= 32 && string(b[:8]) == "APETAGEX":
		const isHeader = 1 << 29
		if binary.LittleEndian.Uint32(b[20:])&isHeader != 0 {
			return 32 + int64(binary.LittleEndian.Uint32(b[12:]))
		}
		return 32
	}
	return id3v2Len(b)
}

// probeMP3 measures an MP3 stream. Its duration is the frame count that a
// Xing/Info or VBRI tag declares, when the frames actually present agree
// with it; otherwise (truncated, concatenated or mislabelled files, or no
// tag) the count of the frames present. Counting them costs little, since
// Probe reads the whole file anyway.
func probeMP3(s *stream) (Info, error) {
	first, found, err := syncFrame(s, nil)
	if err != nil {
		return Info{}, err
	}
	if !found {
		return Info{}, damaged(api.AudioMP3, "no valid frame")
	}
	frame, err := s.peek(first.size())
	if err != nil {
		return Info{}, err
	}
	declared, isTag := vbrTag(frame, first)
	if isTag {
		if _, err := s.skip(int64(len(frame))); err != nil {
			return Info{}, err
		}
	}
	frames, err := countFrames(s, first)
	if err != nil {
		return Info{}, err
	}
	if declared > 0 && agree(declared, frames) {
		frames = declared
	}
	return Info{
		Seconds:    float64(frames) * float64(first.samples()) / float64(first.sampleRate),
		SampleRate: first.sampleRate,
		Channels:   first.channels(),
	}, nil
}

// agree reports whether a declared frame count matches the counted one
// but for the odd frame an encoder may or may not count (its tag frame, a
// damaged one), or 1% on long files.
func agree(declared, counted int64) bool {
	d := declared - counted
	return max(d, -d) <= max(2, declared/100)
}

// countFrames consumes the stream from a frame of ref's stream to the end
// and counts its complete frames. It skips tags, and junk up to the next
// frame that syncFrame confirms.
func countFrames(s *stream, ref frameHeader) (int64, error) {
	var n int64
	for {
		b, err := s.peek(32) // a frame header, or an APEv2 tag's
		if err != nil || len(b) < frameHeaderLen {
			return n, err
		}
		if h, ok := parseFrameHeader(b); ok && h.sameStream(ref) {
			size := int64(h.size())
			got, err := s.skip(size)
			if err != nil {
				return n, err
			}
			if got == size {
				n++
			}
			continue
		}
		if tag := tagLen(b); tag > 0 {
			if _, err := s.skip(tag); err != nil {
				return n, err
			}
			continue
		}
		if _, err := s.skip(1); err != nil {
			return n, err
		}
		if _, found, err := syncFrame(s, &ref); err != nil || !found {
			return n, err
		}
	}
}

// syncFrame consumes the bytes before the next frame header that belongs
// to ref's stream (any stream when ref is nil) and that what follows the
// frame confirms: the next frame's header, the end of the file or a tag.
func syncFrame(s *stream, ref *frameHeader) (frameHeader, bool, error) {
	for {
		b, n, err := s.window(frameSearch)
		if err != nil {
			return frameHeader{}, false, err
		}
		if i, h := frameAt(b, n, ref); i >= 0 {
			_, err := s.skip(int64(i))
			return h, true, err
		}
		if _, err := s.skip(int64(n)); err != nil || n == len(b) {
			return frameHeader{}, false, err
		}
	}
}

// frameSearch is what a window must hold past a place where a frame may
// start: the frame and the next header.
const frameSearch = maxFrameLen + frameHeaderLen

// frameAt is the offset, within the first n bytes of b, of the first
// frame header that belongs to ref's stream (any stream when ref is nil)
// and that what follows the frame confirms; -1 when there is none.
func frameAt(b []byte, n int, ref *frameHeader) (int, frameHeader) {
	for i := 0; i < n; i++ {
		j := bytes.IndexByte(b[i:n], 0xFF)
		if j < 0 {
			break
		}
		i += j
		h, ok := parseFrameHeader(b[i:])
		if ok && (ref == nil || h.sameStream(*ref)) && confirmed(b[i:min(len(b), i+frameSearch)], h) {
			return i, h
		}
	}
	return -1, frameHeader{}
}

// confirmed reports whether the frame h that starts b is followed by what
// can follow a frame. b holds the frame and the next header, or ends with
// the file.
func confirmed(b []byte, h frameHeader) bool {
	if h.size() > len(b) {
		return false
	}
	rest := b[h.size():]
	if len(rest) == 0 {
		return true
	}
	if next, ok := parseFrameHeader(rest); ok {
		return next.sameStream(h)
	}
	return tagLen(rest) > 0
}
