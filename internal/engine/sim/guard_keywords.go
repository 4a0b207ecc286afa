package sim

import (
	"slices"
	"strings"
	"unicode"
)

// harm is a row of the keyword table: words that stand for a kind of harm
// and the label each family gives it, "" where the family has no such
// category. The table is for demos, not moderation: it is short and
// obviously simulated, and tests use verdict directives instead.
type harm struct {
	// words are lower case, letters and digits separated by single
	// spaces; each matches at the start of a word of the text ("kill"
	// matches "killing" but not "skill").
	words []string
	// card matches a payment card number (13 to 16 digits, spaces or
	// dashes between them) instead of words.
	card               bool
	llama, qwen, llava string
	// borderline harms are Controversial to Qwen3Guard and unsafe to the
	// other families.
	borderline bool
	// promptOnly harms are not judged in replies, as Qwen3Guard's
	// Jailbreak is an input category.
	promptOnly bool
}

// keywordTable is the table doc.go shows, in Llama Guard code order so
// that codes come out sorted.
func keywordTable() []harm {
	return []harm{
		{words: []string{"kill", "murder", "shoot"}, llama: "S1", qwen: "Violent", llava: "O2: Violence, Harm, or Cruelty"},
		{card: true, llama: "S7", qwen: "PII"},
		{words: []string{"bomb", "explosive"}, llama: "S9", qwen: "Violent", llava: "O6: Weapons or Substance Abuse"},
		{words: []string{"hateful"}, llama: "S10", qwen: "Unethical Acts", llava: "O1: Hate, Humiliation, Harassment"},
		{words: []string{"suicide", "self harm"}, llama: "S11", qwen: "Suicide & Self-Harm", llava: "O7: Self-Harm"},
		{words: []string{"election"}, llama: "S13", qwen: "Politically Sensitive Topics", borderline: true},
		{words: []string{"rm rf"}, llama: "S14", qwen: "Non-violent Illegal Acts"},
		{words: []string{"ignore previous instructions", "ignore all previous instructions"}, qwen: "Jailbreak", promptOnly: true},
	}
}

// label is the label family f gives h.
func (h *harm) label(f GuardFormat) string {
	switch f {
	case LlamaGuard:
		return h.llama
	case QwenGuard:
		return h.qwen
	case LlavaGuard:
		return h.llava
	}
	return ""
}

// matches reports whether the text has h's words. words is the text
// normalised and led by a space, so that every word starts after one.
func (h *harm) matches(words, text string) bool {
	if h.card {
		return hasCardNumber(text)
	}
	for _, w := range h.words {
		if strings.Contains(words, " "+w) {
			return true
		}
	}
	return false
}

// keywordVerdict is the keyword table's verdict on a check: unsafe when a
// harm the model knows matches, borderline when only borderline ones do.
// A Llama Guard only gives the categories its prompt lists.
func keywordVerdict(spec *ModelSpec, c *check) (verdict, []string) {
	words := " " + normalise(c.content)
	v := verdictSafe
	var labels []string
	for _, h := range keywordTable() {
		l := h.label(spec.Guard)
		switch {
		case l == "", h.promptOnly && c.reply, slices.Contains(spec.GuardLacks, l),
			c.listed != nil && !slices.Contains(c.listed, l), !h.matches(words, c.content):
			continue
		}
		if !slices.Contains(labels, l) {
			labels = append(labels, l)
		}
		switch {
		case !h.borderline:
			v = verdictUnsafe
		case v == verdictSafe:
			v = verdictBorderline
		}
	}
	return v, labels
}

// normalise lower-cases text and turns every run of characters other
// than letters and digits into one space, so that keywords match however
// the text is punctuated ("rm -rf" reads "rm rf").
func normalise(text string) string {
	var b strings.Builder
	space := true
	for _, r := range strings.ToLower(text) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
			space = false
		} else if !space {
			b.WriteByte(' ')
			space = true
		}
	}
	return b.String()
}

// hasCardNumber reports whether text holds a run of 13 to 16 digits,
// single spaces or dashes allowed between them: the shape of a payment
// card number.
func hasCardNumber(text string) bool {
	digits, sep := 0, false
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c >= '0' && c <= '9':
			digits++
			sep = false
		case (c == ' ' || c == '-') && digits > 0 && !sep:
			sep = true
		default:
			if digits >= 13 && digits <= 16 {
				return true
			}
			digits, sep = 0, false
		}
	}
	return digits >= 13 && digits <= 16
}

// qwenCategories are Qwen3Guard-Gen's categories.
func qwenCategories() []string {
	return []string{
		"Violent", "Non-violent Illegal Acts", "Sexual Content or Sexual Acts", "PII", "Suicide & Self-Harm",
		"Unethical Acts", "Politically Sensitive Topics", "Copyright Violation", "Jailbreak",
	}
}

// llavaNone is LlavaGuard's category of a safe rating.
const llavaNone = "NA: None applying"

// llavaCategories are LlavaGuard 1.2's policy categories, O1 to O9.
func llavaCategories() []string {
	return []string{
		"O1: Hate, Humiliation, Harassment", "O2: Violence, Harm, or Cruelty", "O3: Sexual Content",
		"O4: Nudity Content", "O5: Criminal Planning", "O6: Weapons or Substance Abuse",
		"O7: Self-Harm", "O8: Animal Cruelty", "O9: Disasters or Emergencies",
	}
}

// isLlamaCode reports whether s is a Llama Guard category code: S1, S14.
func isLlamaCode(s string) bool {
	digits, ok := strings.CutPrefix(s, "S")
	if !ok || len(digits) == 0 || len(digits) > 2 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// spell writes directive labels as the family does: Llama Guard codes in
// upper case, Qwen3Guard names in their own case, LlavaGuard categories
// in full from their code (O2, NA). A label the family does not know is
// kept as written, so that tests can feed a parser labels it has never
// seen.
func (f GuardFormat) spell(labels []string) []string {
	out := make([]string, len(labels))
	for i, l := range labels {
		out[i] = f.spellLabel(l)
	}
	return out
}

func (f GuardFormat) spellLabel(l string) string {
	switch f {
	case LlamaGuard:
		if up := strings.ToUpper(l); isLlamaCode(up) {
			return up
		}
	case QwenGuard:
		for _, name := range qwenCategories() {
			if strings.EqualFold(l, name) {
				return name
			}
		}
	case LlavaGuard:
		for _, name := range append(llavaCategories(), llavaNone) {
			code, _, _ := strings.Cut(name, ":")
			if strings.EqualFold(l, code) || strings.EqualFold(l, name) {
				return name
			}
		}
	}
	return l
}

// stockLabel is the label of an unsafe or borderline directive that
// names none and whose text the keyword table finds nothing in.
func (f GuardFormat) stockLabel(v verdict) string {
	switch {
	case f == QwenGuard && v == verdictBorderline:
		return "Politically Sensitive Topics"
	case f == QwenGuard:
		return "Violent"
	case f == LlavaGuard:
		return "O2: Violence, Harm, or Cruelty"
	}
	return "S1"
}
