package moderation

import (
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// fuzzVerdict checks what any answer must give: a verdict whose result
// keeps the spec's rules, or ErrInvalidVerdict; never a panic.
func fuzzVerdict(t *testing.T, f Family, answer string) {
	v, err := f.Parse(answer)
	if err != nil {
		if !errors.Is(err, ErrInvalidVerdict) {
			t.Fatalf("%s: Parse(%q) = %v, not ErrInvalidVerdict", f.ID(), answer, err)
		}
		return
	}
	if v.Borderline && !v.Unsafe {
		t.Fatalf("%s: Parse(%q) borderline but not unsafe", f.ID(), answer)
	}
	if !v.Unsafe && len(v.Labels) > 0 {
		t.Fatalf("%s: Parse(%q) safe with labels %v", f.ID(), answer, v.Labels)
	}
	r := f.Result(v, Check{Texts: []string{"x"}})
	if r.Flagged != v.Unsafe || (r.Flagged && len(FlaggedCategories(r)) == 0) {
		t.Fatalf("%s: %q: flagged %v with %v", f.ID(), answer, r.Flagged, FlaggedCategories(r))
	}
	checks := f.Checks()
	if len(r.Categories) != len(checks) {
		t.Fatalf("%s: %q: %d categories", f.ID(), answer, len(r.Categories))
	}
	for cat, on := range r.Categories {
		score := r.CategoryScores[cat]
		if !slices.Contains(checks, cat) || (!on && score != 0) || (on && score != 1 && !(v.Borderline && score == 0.5)) {
			t.Fatalf("%s: %q: %s = %v, %v", f.ID(), answer, cat, on, score)
		}
	}
	if f.Size == "1b" && r.Categories[catCyber] {
		t.Fatalf("guard-a:1b set svc/cyber for %q", answer)
	}
}

func FuzzParseGuardA(f *testing.F) {
	for _, s := range []string{"safe", "unsafe\nS1", "unsafe\nS1,S10", " \nunsafe\nS14\n", "unsafe", "maybe", "", "\n\nsafe", "unsafe\r\nS2, S99,,x"} {
		f.Add(s, false)
	}
	a1, a8 := family(f, "guard-a:1b"), family(f, "guard-a:8b")
	f.Fuzz(func(t *testing.T, answer string, big bool) {
		if big {
			fuzzVerdict(t, a8, answer)
		} else {
			fuzzVerdict(t, a1, answer)
		}
	})
}

func FuzzParseGuardB(f *testing.F) {
	for _, s := range []string{
		"Safety: Unsafe\nCategories: Violent", "Safety: Controversial\nCategories: Politically Sensitive Topics",
		"Safety: Safe\nCategories: None\nRefusal: Yes", "Safety: Unsafe\nCategories: Jailbreak",
		"Safety: Unsafe\nCategories: Non-violent Illegal Acts, PII, Suicide & Self-Harm", "Safety:", "safe", "",
	} {
		f.Add(s)
	}
	b := family(f, "guard-b:4b")
	f.Fuzz(func(t *testing.T, answer string) { fuzzVerdict(t, b, answer) })
}

func FuzzParseGuardC(f *testing.F) {
	for _, s := range []string{
		`{"rating": "Unsafe", "category": "O2: Violence, Harm, or Cruelty", "rationale": "x"}`,
		`{"rating": "Safe", "category": "NA: None applying", "rationale": "x"}`,
		"```json\n{\"rating\":\"Unsafe\",\"category\":\"O4: Nudity Content\"}\n```",
		`{"rating": "Unsafe", "category": "O2: Viol`, `{"rating":1}`, `{}`, "", "{",
	} {
		f.Add(s)
	}
	c := family(f, "guard-c:0.8b")
	f.Fuzz(func(t *testing.T, answer string) { fuzzVerdict(t, c, answer) })
}

// FuzzParse: Parse never panics; it accepts only complete requests and
// fails only with a 400 or a 422 listing fields.
func FuzzParse(f *testing.F) {
	png := dataURLOf("image/png", pngBytes(f, 1, 1))
	for _, s := range []string{
		``, `{}`, `[]`, `null`, `{"model":`, modBody(`"x"`), modBody(`["a","b"]`), modBody(`[]`), modBody(`""`),
		modBody(parts(textPart("a"), imgPart(png))), modBody(parts(imgPart("https://example.com/a.png"))),
		modBody(`["a",{"type":"text","text":"b"}]`), modBody(`[{"type":"image_url","image_url":"data:image/gif;base64,R0lGODlhAQABAAAAACw="}]`),
		`{"model":"m","input":"x","model":1e999}`, modBody(parts(imgPart(dataURLOf("image/webp", webpLossless)))),
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, remote bool) {
		r, err := Parse(body, Options{AllowRemoteImages: remote, DefaultModel: api.DefaultModerationModel})
		if err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Message == "" {
				t.Fatalf("Parse(%q) = %v", body, err)
			}
			switch {
			case ae.HTTPStatus() == http.StatusBadRequest:
			case ae.HTTPStatus() == http.StatusUnprocessableEntity && len(ae.Fields) > 0:
			default:
				t.Fatalf("Parse(%q): status %d, %d fields", body, ae.HTTPStatus(), len(ae.Fields))
			}
			return
		}
		if r.Model == "" || len(r.Checks) == 0 || len(r.Checks) > api.ModerationMaxInputs {
			t.Fatalf("Parse(%q) accepted %+v", body, r)
		}
		images := false
		for _, c := range r.Checks {
			if len(c.Texts)+len(c.Images) == 0 {
				t.Fatalf("Parse(%q): empty check", body)
			}
			for _, img := range c.Images {
				images = true
				switch {
				case img.URL != "" && (!remote || len(img.Data) > 0):
					t.Fatalf("Parse(%q): remote image %+v with remote=%v", body, img, remote)
				case img.URL == "" && (len(img.Data) == 0 || img.Data == nil || !slices.Contains([]string{"image/png", "image/jpeg", "image/gif", "image/webp"}, img.MediaType)):
					t.Fatalf("Parse(%q): inline image without data or type: %q", body, img.MediaType)
				}
			}
		}
		if images != r.Images {
			t.Fatalf("Parse(%q): Images = %v", body, r.Images)
		}
	})
}
