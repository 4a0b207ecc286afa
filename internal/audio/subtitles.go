package audio

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
)

// SRT renders a transcript's segments as a SubRip file: entries numbered
// from 1, each a time line "hh:mm:ss,mmm --> hh:mm:ss,mmm" and the text,
// and each followed by a blank line. A transcript with text but no
// segments becomes one entry over its whole duration; segments without
// text are left out.
func SRT(t *api.Transcript) []byte {
	var b bytes.Buffer
	for i, c := range cues(t) {
		fmt.Fprintf(&b, "%d\n%s --> %s\n%s\n\n", i+1, timestamp(c.start, ','), timestamp(c.end, ','), c.text)
	}
	return b.Bytes()
}

// VTT renders a transcript's segments as a WebVTT file: the "WEBVTT"
// line and a blank line, then cues "hh:mm:ss.mmm --> hh:mm:ss.mmm" with
// their text, each followed by a blank line. The text is escaped, as
// WebVTT cue text is markup.
func VTT(t *api.Transcript) []byte {
	var b bytes.Buffer
	b.WriteString("WEBVTT\n\n")
	for _, c := range cues(t) {
		fmt.Fprintf(&b, "%s --> %s\n%s\n\n", timestamp(c.start, '.'), timestamp(c.end, '.'), vttEscaper.Replace(c.text))
	}
	return b.Bytes()
}

// vttEscaper escapes what WebVTT cue text gives meaning to; escaping ">"
// also breaks an arrow "-->", which would end the cue.
var vttEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

type cue struct {
	start, end int64 // milliseconds
	text       string
}

// cues returns the transcript's segments as subtitle cues: times rounded
// to the millisecond and never negative nor ending before they start,
// text trimmed of blank lines, which end a cue in both formats.
func cues(t *api.Transcript) []cue {
	if t == nil {
		return nil
	}
	segments := t.Segments
	if len(segments) == 0 {
		segments = []api.Segment{{Start: 0, End: t.Duration, Text: t.Text}}
	}
	out := make([]cue, 0, len(segments))
	for _, s := range segments {
		text := cueText(s.Text)
		if text == "" {
			continue
		}
		start := millis(s.Start)
		out = append(out, cue{start: start, end: max(millis(s.End), start), text: text})
	}
	return out
}

func cueText(s string) string {
	var lines []string
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// millis rounds seconds to milliseconds, taking what is not a time
// (negative, NaN, infinite or past int64 milliseconds) as 0.
func millis(seconds float64) int64 {
	ms := math.Round(seconds * 1000)
	if !(ms > 0) || ms >= math.MaxInt64 {
		return 0
	}
	return int64(ms)
}

// timestamp formats ms as hh:mm:ss followed by sep and milliseconds; hours
// take as many digits as they need.
func timestamp(ms int64, sep byte) string {
	b := make([]byte, 0, 16)
	b = appendPadded(b, ms/3_600_000, 2)
	b = append(b, ':')
	b = appendPadded(b, ms/60_000%60, 2)
	b = append(b, ':')
	b = appendPadded(b, ms/1000%60, 2)
	b = append(b, sep)
	b = appendPadded(b, ms%1000, 3)
	return string(b)
}

func appendPadded(b []byte, v int64, width int) []byte {
	s := strconv.FormatInt(v, 10)
	for range width - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}
