package moderation

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"slices"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func family(t testing.TB, id string) Family {
	t.Helper()
	f, ok := Lookup(id)
	if !ok {
		t.Fatalf("Lookup(%q) not found", id)
	}
	return f
}

// decodeBody decodes a guard call body into generic JSON.
func decodeBody(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, body)
	}
	return m
}

// checkResult asserts the invariants every result holds, and that the
// flagged categories are want (spec order) with score.
func checkResult(t *testing.T, f Family, r api.ModerationResult, want []string, score float64, types []string) {
	t.Helper()
	checks := f.Checks()
	if len(r.Categories) != len(checks) || len(r.CategoryScores) != len(checks) || len(r.CategoryAppliedInputTypes) != len(checks) {
		t.Fatalf("%s: result has %d/%d/%d keys, want %d", f.ID(), len(r.Categories), len(r.CategoryScores), len(r.CategoryAppliedInputTypes), len(checks))
	}
	for _, c := range checks {
		on := slices.Contains(want, c)
		if r.Categories[c] != on {
			t.Errorf("%s: categories[%s] = %v, want %v", f.ID(), c, r.Categories[c], on)
		}
		wantScore := 0.0
		if on {
			wantScore = score
		}
		if got, ok := r.CategoryScores[c]; !ok || got != wantScore {
			t.Errorf("%s: category_scores[%s] = %v (present %v), want exactly %v", f.ID(), c, got, ok, wantScore)
		}
		if got := r.CategoryAppliedInputTypes[c]; !slices.Equal(got, types) {
			t.Errorf("%s: category_applied_input_types[%s] = %v, want %v", f.ID(), c, got, types)
		}
	}
	if r.Flagged != (len(want) > 0) {
		t.Errorf("%s: flagged = %v with categories %v", f.ID(), r.Flagged, want)
	}
	if got := FlaggedCategories(r); !slices.Equal(got, want) {
		t.Errorf("%s: FlaggedCategories = %v, want %v", f.ID(), got, want)
	}
}

func isInvalidVerdict(err error) bool { return errors.Is(err, ErrInvalidVerdict) }

// Tiny real images, encoded by the standard library so their headers are
// genuine.
func pngBytes(t testing.TB, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func jpegBytes(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, image.NewRGBA(image.Rect(0, 0, 3, 2)), nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gifBytes(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	img := image.NewPaletted(image.Rect(0, 0, 2, 2), color.Palette{color.Black, color.White})
	if err := gif.Encode(&b, img, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// webpLossless is a 1×1 lossless WebP: a RIFF/WEBP file with one VP8L chunk.
var webpLossless = []byte("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00")

func dataURLOf(mediaType string, data []byte) string {
	return "data:" + mediaType + ";base64," + base64.StdEncoding.EncodeToString(data)
}
