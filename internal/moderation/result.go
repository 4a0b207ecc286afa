package moderation

import (
	"slices"

	"github.com/svc-dev/svc/internal/api"
)

// Scores of a result: a guard answers a verdict, not a probability.
const (
	scoreFlagged    = 1.0
	scoreBorderline = 0.5
	scoreClear      = 0.0
)

// Result maps a verdict onto the family's categories. Every category the
// family checks is present: flagged ones true with score 1.0 (0.5 when
// borderline), the others false with 0.0. A flagged result always has a
// category set: svc/unspecified when no label maps.
//
// category_applied_input_types lists, for every category flagged or not,
// the input types the check held that the family judges: the guard reads
// the whole check against its whole policy in one call, so each category
// was applied to all of it, and a verdict cannot be traced to the text or
// an image. A text-only family reports ["text"].
func (f Family) Result(v Verdict, c Check) api.ModerationResult {
	checks := f.Checks()
	types := f.appliedTypes(c)
	r := api.ModerationResult{
		Flagged:                   v.Unsafe || v.Borderline,
		Categories:                make(map[string]bool, len(checks)),
		CategoryScores:            make(map[string]float64, len(checks)),
		CategoryAppliedInputTypes: make(map[string][]string, len(checks)),
	}
	for _, cat := range checks {
		r.Categories[cat] = false
		r.CategoryScores[cat] = scoreClear
		// Each key gets its own slice: a caller editing one must not
		// change the others.
		r.CategoryAppliedInputTypes[cat] = slices.Clone(types)
	}
	if !r.Flagged {
		return r
	}
	score := scoreFlagged
	if v.Borderline {
		score = scoreBorderline
	}
	for _, cat := range f.flagged(v.Labels) {
		r.Categories[cat] = true
		r.CategoryScores[cat] = score
	}
	return r
}

// flagged is the categories a flagged verdict's labels set, in spec
// order. Unknown labels, and a verdict with none, set svc/unspecified;
// a category outside the family's list is never returned.
func (f Family) flagged(labels []string) []string {
	checks := f.Checks()
	var cats []string
	add := func(c string) {
		if slices.Contains(checks, c) && !slices.Contains(cats, c) {
			cats = append(cats, c)
		}
	}
	for _, l := range labels {
		m, ok := f.match(l)
		if !ok || len(m.Categories) == 0 {
			add(catUnspecified)
			continue
		}
		for _, c := range m.Categories {
			add(c)
		}
	}
	if len(cats) == 0 {
		add(catUnspecified)
	}
	specOrder(cats)
	return cats
}

// appliedTypes is what the family judged of the check: "text" when it held
// text, "image" when it held images the family reads. A check with neither
// was still judged as (empty) text.
func (f Family) appliedTypes(c Check) []string {
	var types []string
	if len(c.Texts) > 0 || len(c.Images) == 0 || !f.Images() {
		types = append(types, "text")
	}
	if len(c.Images) > 0 && f.Images() {
		types = append(types, "image")
	}
	return types
}
