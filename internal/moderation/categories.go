package moderation

import (
	"slices"

	"github.com/svc-dev/svc/internal/api"
)

// The spec's categories. The names are the wire keys of a result; the
// first thirteen are the common moderation API's, the svc/ ones ours.
const (
	catHarassment           = "harassment"
	catHarassmentThreat     = "harassment/threatening"
	catHate                 = "hate"
	catHateThreat           = "hate/threatening"
	catIllicit              = "illicit"
	catIllicitViolent       = "illicit/violent"
	catSelfHarm             = "self-harm"
	catSelfHarmIntent       = "self-harm/intent"
	catSelfHarmInstructions = "self-harm/instructions"
	catSexual               = "sexual"
	catSexualMinors         = "sexual/minors"
	catViolence             = "violence"
	catViolenceGraphic      = "violence/graphic"
	catCyber                = "svc/cyber"
	catDisinformation       = "svc/disinformation"
	catFraud                = "svc/fraud"
	catIP                   = "svc/intellectual_property"
	catNudity               = "svc/nudity"
	catPrivacy              = "svc/privacy"
	catSpecializedAdvice    = "svc/specialized_advice"
	catUnspecified          = "svc/unspecified"
)

// Categories is the spec's 21 categories in the spec's order. The slice is
// the caller's to keep or change.
func Categories() []string {
	return []string{
		catHarassment, catHarassmentThreat, catHate, catHateThreat,
		catIllicit, catIllicitViolent,
		catSelfHarm, catSelfHarmIntent, catSelfHarmInstructions,
		catSexual, catSexualMinors, catViolence, catViolenceGraphic,
		catCyber, catDisinformation, catFraud, catIP, catNudity,
		catPrivacy, catSpecializedAdvice, catUnspecified,
	}
}

// FlaggedCategories lists the true categories of a result in spec order,
// for usage rows. A true key outside the spec (none comes from Result) is
// listed after them, sorted, rather than dropped: a usage row must never
// hide a verdict.
func FlaggedCategories(r api.ModerationResult) []string {
	var out []string
	known := Categories()
	for _, c := range known {
		if r.Categories[c] {
			out = append(out, c)
		}
	}
	var extra []string
	for c, on := range r.Categories {
		if on && !slices.Contains(known, c) {
			extra = append(extra, c)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}

// specOrder sorts categories into the spec's order; names outside the spec
// go last.
func specOrder(cats []string) {
	order := Categories()
	rank := func(c string) int {
		if i := slices.Index(order, c); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortStableFunc(cats, func(a, b string) int { return rank(a) - rank(b) })
}
