package audio

import (
	"bytes"

	"github.com/svc-dev/svc/internal/api"
)

// sniffWindow is how much of the audio data, after any ID3v2 tag, Probe
// and Decode look at to name the format: enough for three MPEG frames, so
// that an MP3 stream preceded by junk can be told from a random 0xFFE
// pattern.
const sniffWindow = 16 << 10

const id3v2HeaderLen = 10

// minHead is the least of a file that Sniff is to be passed when the file
// is that long: a shorter head is the whole file.
const minHead = 4 << 10

// Sniff names the format of a file from its first bytes: api.AudioWAV,
// api.AudioMP3 or api.AudioFLAC, or "" when it is none of them. Pass at
// least the first 4 KiB when the file has them. An ID3v2 tag may precede
// MP3, FLAC or WAV data; when it is longer than head, Sniff cannot see what
// it tags and returns "".
func Sniff(head []byte) string {
	whole := len(head) < minHead
	tagged := false
	for {
		n := id3v2Len(head)
		if n == 0 {
			break
		}
		if n >= int64(len(head)) {
			return ""
		}
		head, tagged = head[n:], true
	}
	return classify(head, tagged, whole)
}

// classify names the format of audio data that starts at b, the first
// sniffWindow bytes after any ID3v2 tags or fewer; whole says that b runs
// to the end of the file.
//
// Data after an ID3v2 tag is MP3 when it holds an MPEG frame header
// anywhere, even one that no other frame follows: a damaged stream, which
// MP3 decoders resynchronise over, is still MP3, and is refused as
// unreadable rather than unsupported. Data that holds none, across the
// whole window or the whole file, is not audio whatever the tag says. When
// nothing can tell (fewer bytes than a frame header, or a view of the file
// that stops short of the window) the tag's home format, MP3, stands.
func classify(b []byte, tagged, whole bool) string {
	switch {
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WAVE":
		return api.AudioWAV
	case len(b) >= 4 && string(b[:4]) == "fLaC":
		return api.AudioFLAC
	case !tagged:
		if looksLikeMP3(b) {
			return api.AudioMP3
		}
		return ""
	case hasFrameHeader(b), len(b) < frameHeaderLen, !whole && len(b) < sniffWindow:
		return api.AudioMP3
	}
	return ""
}

// hasFrameHeader reports whether an MPEG audio frame header starts anywhere
// in b.
func hasFrameHeader(b []byte) bool {
	for i := 0; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], 0xFF)
		if j < 0 {
			return false
		}
		i += j
		if _, ok := parseFrameHeader(b[i:]); ok {
			return true
		}
	}
	return false
}

// looksLikeMP3 reports whether b starts with an MPEG audio frame followed
// by a frame of the same stream (when b reaches that far), or holds three
// such frames in a row further on. One sync word alone is too weak a sign:
// 0xFFE occurs in any binary file.
func looksLikeMP3(b []byte) bool {
	if chained(b, 0, 2, true) {
		return true
	}
	for i := 1; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], 0xFF)
		if j < 0 {
			return false
		}
		i += j
		if chained(b, i, 3, false) {
			return true
		}
	}
	return false
}

// chained reports whether want frames of one stream follow each other from
// b[off:]. With open, a chain that runs off the end of b counts, since b
// may be only the start of the file.
func chained(b []byte, off, want int, open bool) bool {
	first, ok := parseFrameHeader(b[off:])
	if !ok {
		return false
	}
	h := first
	for range want - 1 {
		off += h.size()
		if len(b)-off < frameHeaderLen {
			return open
		}
		h, ok = parseFrameHeader(b[off:])
		if !ok || !h.sameStream(first) {
			return false
		}
	}
	return true
}

// id3v2Len returns the length of the ID3v2 tag that starts b, header and
// footer included, or 0 when b does not start with one.
func id3v2Len(b []byte) int64 {
	if len(b) < id3v2HeaderLen || string(b[:3]) != "ID3" || b[3] == 0xFF || b[4] == 0xFF {
		return 0
	}
	var size int64
	for _, c := range b[6:10] {
		if c&0x80 != 0 { // the size is synchsafe: 7 bits a byte
			return 0
		}
		size = size<<7 | int64(c)
	}
	n := id3v2HeaderLen + size
	if b[5]&0x10 != 0 { // a footer repeats the header at the end
		n += id3v2HeaderLen
	}
	return n
}
