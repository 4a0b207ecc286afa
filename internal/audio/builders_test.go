package audio

import (
	"bytes"
	"encoding/binary"
	"math"
)

// Builders of synthetic files for the tests: headers exactly as the
// formats lay them out, payloads of zeros.

// chunk is a RIFF chunk; size overrides the length written (for streamed
// files), and odd bodies get their pad byte.
type chunk struct {
	id   string
	body []byte
	size *uint32
}

func riff(chunks ...chunk) []byte {
	var b bytes.Buffer
	b.WriteString("RIFF")
	b.Write(make([]byte, 4))
	b.WriteString("WAVE")
	for _, c := range chunks {
		b.WriteString(c.id)
		size := uint32(len(c.body))
		if c.size != nil {
			size = *c.size
		}
		b.Write(binary.LittleEndian.AppendUint32(nil, size))
		b.Write(c.body)
		if len(c.body)%2 == 1 {
			b.WriteByte(0)
		}
	}
	out := b.Bytes()
	binary.LittleEndian.PutUint32(out[4:], uint32(len(out)-8))
	return out
}

func u32(v uint32) *uint32 { return &v }

// fmtChunk is a fmt chunk for tag (1, 3 or 0xFFFE), with the extensible
// part when sub is not 0.
func fmtChunk(tag uint16, channels, rate, bits int, sub uint16) chunk {
	le := binary.LittleEndian
	align := channels * ((bits + 7) / 8)
	b := le.AppendUint16(nil, tag)
	b = le.AppendUint16(b, uint16(channels))
	b = le.AppendUint32(b, uint32(rate))
	b = le.AppendUint32(b, uint32(rate*align))
	b = le.AppendUint16(b, uint16(align))
	b = le.AppendUint16(b, uint16(bits))
	if sub != 0 {
		b = le.AppendUint16(b, 22)
		b = le.AppendUint16(b, uint16(bits))
		b = le.AppendUint32(b, 0) // channel mask
		b = le.AppendUint16(b, sub)
		b = append(b, ksdataformatTail...)
	}
	return chunk{id: "fmt ", body: b}
}

func dataChunk(n int) chunk { return chunk{id: "data", body: make([]byte, n)} }

// wavOf is a plain 16-bit PCM file of interleaved samples.
func wavOf(rate, channels int, samples []int16) []byte {
	data := make([]byte, 0, 2*len(samples))
	for _, s := range samples {
		data = binary.LittleEndian.AppendUint16(data, uint16(s))
	}
	return riff(fmtChunk(1, channels, rate, 16, 0), chunk{id: "data", body: data})
}

// mpegFrame describes an MPEG audio frame header.
type mpegFrame struct {
	version  byte // 3 = MPEG 1, 2 = MPEG 2, 0 = MPEG 2.5
	layer    byte // 1, 2 or 3
	bitrate  byte // index
	rate     byte // index
	padding  bool
	mono     bool
	noCRC    bool
	override []byte // bytes written after the header
}

func (f mpegFrame) header() []byte {
	b1 := 0xE0 | f.version<<3 | (4-f.layer)<<1
	if f.noCRC {
		b1 |= 1
	}
	b2 := f.bitrate<<4 | f.rate<<2
	if f.padding {
		b2 |= 2
	}
	var b3 byte
	if f.mono {
		b3 = 3 << 6
	}
	return []byte{0xFF, b1, b2, b3}
}

func (f mpegFrame) bytes() []byte {
	h, ok := parseFrameHeader(f.header())
	if !ok {
		panic("test frame header is invalid")
	}
	b := make([]byte, h.size())
	copy(b, f.header())
	copy(b[4:], f.override)
	return b
}

func frames(f mpegFrame, n int) []byte {
	return bytes.Repeat(f.bytes(), n)
}

// xingFrame is f carrying a Xing (or Info) tag declaring n frames.
func xingFrame(f mpegFrame, tag string, n uint32) []byte {
	h, _ := parseFrameHeader(f.header())
	side := 32
	switch {
	case h.version == mpeg1 && h.mono, h.version != mpeg1 && !h.mono:
		side = 17
	case h.version != mpeg1 && h.mono:
		side = 9
	}
	body := make([]byte, side)
	body = append(body, tag...)
	body = binary.BigEndian.AppendUint32(body, 1|2) // frames and bytes
	body = binary.BigEndian.AppendUint32(body, n)
	body = binary.BigEndian.AppendUint32(body, 12345)
	f.override = body
	return f.bytes()
}

// vbriFrame is f carrying a VBRI tag declaring n frames.
func vbriFrame(f mpegFrame, n uint32) []byte {
	body := make([]byte, 32)
	body = append(body, "VBRI"...)
	body = binary.BigEndian.AppendUint16(body, 1)   // version
	body = binary.BigEndian.AppendUint16(body, 576) // delay
	body = binary.BigEndian.AppendUint16(body, 75)  // quality
	body = binary.BigEndian.AppendUint32(body, 12345)
	body = binary.BigEndian.AppendUint32(body, n)
	f.override = body
	return f.bytes()
}

// id3v2 is an ID3v2.4 tag of size bytes of body, with a footer if asked.
func id3v2(size int, footer bool) []byte {
	flags := byte(0)
	if footer {
		flags = 0x10
	}
	b := []byte{'I', 'D', '3', 4, 0, flags,
		byte(size >> 21 & 0x7F), byte(size >> 14 & 0x7F), byte(size >> 7 & 0x7F), byte(size & 0x7F)}
	b = append(b, bytes.Repeat([]byte{0xFF}, size)...) // 0xFF bytes would look like syncs if not skipped
	if footer {
		b = append(b, '3', 'D', 'I', 4, 0, flags, b[6], b[7], b[8], b[9])
	}
	return b
}

func id3v1() []byte {
	b := make([]byte, 128)
	copy(b, "TAGtitle\xff\xfb\x90\x00")
	return b
}

// flacStream describes a FLAC file of fixed-size blocks.
type flacStream struct {
	rate     int
	channels int
	bits     int
	block    int    // samples per frame but the last
	samples  uint64 // in the frames
	declared uint64 // in STREAMINFO
	noFrames bool
	// frameRate is the frames' sample rate code (0: STREAMINFO's), and
	// frameRateField what codes 12 to 14 put after the block size.
	frameRate      byte
	frameRateField []byte
}

func (s flacStream) bytes() []byte {
	b := []byte("fLaC")
	b = append(b, 0x00, 0, 0, streamInfoLen) // STREAMINFO, not last
	si := binary.BigEndian.AppendUint16(nil, uint16(s.block))
	si = binary.BigEndian.AppendUint16(si, uint16(s.block))
	si = append(si, 0, 0, 0, 0, 0, 0)
	x := uint64(s.rate)<<44 | uint64(s.channels-1)<<41 | uint64(s.bits-1)<<36 | s.declared
	si = binary.BigEndian.AppendUint64(si, x)
	si = append(si, make([]byte, 16)...) // MD5
	b = append(b, si...)
	b = append(b, 0x84, 0, 0, 8) // VORBIS_COMMENT, last
	b = append(b, make([]byte, 8)...)
	if s.noFrames {
		return b
	}
	for n, at := uint64(0), uint64(0); at < s.samples; n++ {
		size := min(uint64(s.block), s.samples-at)
		b = append(b, s.frameHeader(n, int(size))...)
		b = append(b, make([]byte, 20)...) // stands for the subframes
		at += size
	}
	return b
}

func (s flacStream) frameHeader(n uint64, size int) []byte {
	bitsCode := map[int]byte{8: 1, 12: 2, 16: 4, 20: 5, 24: 6, 32: 7}[s.bits]
	const blockSizeAtEnd = 7 // the block size follows the frame number, less one, in 16 bits
	h := []byte{0xFF, 0xF8, blockSizeAtEnd<<4 | s.frameRate, byte(s.channels-1)<<4 | bitsCode<<1}
	h = append(h, utf8Code(n)...)
	h = binary.BigEndian.AppendUint16(h, uint16(size-1))
	h = append(h, s.frameRateField...)
	return append(h, crc8(h))
}

// utf8Code codes n the way FLAC frame headers do: like UTF-8.
func utf8Code(n uint64) []byte {
	if n < 0x80 {
		return []byte{byte(n)}
	}
	for size := 2; ; size++ {
		if n >= 1<<(7-size+6*(size-1)) {
			continue
		}
		b := make([]byte, size)
		for i := size - 1; i > 0; i-- {
			b[i] = 0x80 | byte(n&0x3F)
			n >>= 6
		}
		b[0] = byte(0xFF<<(8-size)) | byte(n)
		return b
	}
}

// sine returns n samples of a sine of freq Hz at rate.
func sine(freq, amp float64, rate, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(amp * math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))
	}
	return out
}
