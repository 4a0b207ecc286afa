package moonshine

import (
	"reflect"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestSpreadWords(t *testing.T) {
	tests := []struct {
		name string
		seg  api.Segment
		want []api.Word
	}{{
		name: "in proportion to length",
		seg:  api.Segment{Start: 1, End: 2, Text: "a bcd"},
		want: []api.Word{{Word: "a", Start: 1, End: 1.25}, {Word: "bcd", Start: 1.25, End: 2}},
	}, {
		name: "letters, not bytes",
		seg:  api.Segment{Start: 0, End: 1, Text: "héé  abc"},
		want: []api.Word{{Word: "héé", Start: 0, End: 0.5}, {Word: "abc", Start: 0.5, End: 1}},
	}, {
		name: "one word",
		seg:  api.Segment{Start: 3, End: 4.5, Text: "Yes."},
		want: []api.Word{{Word: "Yes.", Start: 3, End: 4.5}},
	}, {
		name: "no words",
		seg:  api.Segment{Start: 0, End: 1, Text: " "},
		want: []api.Word{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := spreadWords(tt.seg); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("spreadWords(%+v) = %+v, want %+v", tt.seg, got, tt.want)
			}
		})
	}
}

func TestTranscriptEmpty(t *testing.T) {
	got := transcript(&reply{}, 1.5, true)
	want := api.Transcript{Language: "en", Duration: 1.5, Segments: []api.Segment{}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("transcript = %+v, want %+v", got, want)
	}
}
