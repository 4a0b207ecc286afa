package audio

import (
	"math"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestSubtitles(t *testing.T) {
	tests := []struct {
		name     string
		t        *api.Transcript
		srt, vtt string
	}{
		{
			name: "segments",
			t: &api.Transcript{Duration: 5, Text: "Hello there. General Kenobi!", Segments: []api.Segment{
				{ID: 0, Start: 0, End: 2.5, Text: " Hello there."},
				{ID: 1, Start: 2.5, End: 4.9996, Text: " General Kenobi! "},
			}},
			srt: "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n" +
				"2\n00:00:02,500 --> 00:00:05,000\nGeneral Kenobi!\n\n",
			vtt: "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n\n" +
				"00:00:02.500 --> 00:00:05.000\nGeneral Kenobi!\n\n",
		},
		{
			name: "rounding to the millisecond",
			t: &api.Transcript{Segments: []api.Segment{
				{Start: 1.0004, End: 1.0005, Text: "a"},
				{Start: 59.9996, End: 61.2344999, Text: "b"},
			}},
			srt: "1\n00:00:01,000 --> 00:00:01,001\na\n\n2\n00:01:00,000 --> 00:01:01,234\nb\n\n",
			vtt: "WEBVTT\n\n00:00:01.000 --> 00:00:01.001\na\n\n00:01:00.000 --> 00:01:01.234\nb\n\n",
		},
		{
			name: "hour rollover and long files",
			t: &api.Transcript{Segments: []api.Segment{
				{Start: 3599.9995, End: 3600.5, Text: "one"},
				{Start: 360000, End: 360001.25, Text: "hundred"},
			}},
			srt: "1\n01:00:00,000 --> 01:00:00,500\none\n\n2\n100:00:00,000 --> 100:00:01,250\nhundred\n\n",
			vtt: "WEBVTT\n\n01:00:00.000 --> 01:00:00.500\none\n\n100:00:00.000 --> 100:00:01.250\nhundred\n\n",
		},
		{
			name: "negative, reversed and NaN times",
			t: &api.Transcript{Segments: []api.Segment{
				{Start: -1, End: -0.5, Text: "x"},
				{Start: 2, End: 1, Text: "y"},
				{Start: math.NaN(), End: math.Inf(1), Text: "z"},
			}},
			srt: "1\n00:00:00,000 --> 00:00:00,000\nx\n\n2\n00:00:02,000 --> 00:00:02,000\ny\n\n" +
				"3\n00:00:00,000 --> 00:00:00,000\nz\n\n",
			vtt: "WEBVTT\n\n00:00:00.000 --> 00:00:00.000\nx\n\n00:00:02.000 --> 00:00:02.000\ny\n\n" +
				"00:00:00.000 --> 00:00:00.000\nz\n\n",
		},
		{
			name: "text without segments",
			t:    &api.Transcript{Duration: 3.25, Text: "  Just text.\n"},
			srt:  "1\n00:00:00,000 --> 00:00:03,250\nJust text.\n\n",
			vtt:  "WEBVTT\n\n00:00:00.000 --> 00:00:03.250\nJust text.\n\n",
		},
		{
			name: "blank lines, empty segments and markup",
			t: &api.Transcript{Segments: []api.Segment{
				{Start: 0, End: 1, Text: "  "},
				{Start: 1, End: 2, Text: "line one\n\n  line two <i> & -->"},
			}},
			srt: "1\n00:00:01,000 --> 00:00:02,000\nline one\nline two <i> & -->\n\n",
			vtt: "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nline one\nline two &lt;i&gt; &amp; --&gt;\n\n",
		},
		{name: "empty", t: &api.Transcript{Duration: 3}, srt: "", vtt: "WEBVTT\n\n"},
		{name: "nil", t: nil, srt: "", vtt: "WEBVTT\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(SRT(tt.t)); got != tt.srt {
				t.Errorf("SRT =\n%q\nwant\n%q", got, tt.srt)
			}
			if got := string(VTT(tt.t)); got != tt.vtt {
				t.Errorf("VTT =\n%q\nwant\n%q", got, tt.vtt)
			}
		})
	}
}
