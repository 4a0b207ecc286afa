package moderation

import (
	"strings"

	"github.com/svc-dev/svc/internal/api"
)

// guard-b is Qwen3Guard-Gen (0.6b, 4b, 8b). It is sent plain chat messages:
// the model's chat template builds the guard prompt, so there is nothing
// of ours in between.
//
// Mapping decisions (protocols.md 1.4, adapted to the spec's guard-b list):
//   - Unethical Acts (bias, hate, harassment, insults, threats,
//     defamation, extremism) sets harassment and hate.
//   - Sexual Content or Sexual Acts sets sexual: Qwen3Guard has no minors
//     label, so guard-b does not report sexual/minors at all.
//   - Jailbreak is not a harm category: it sets svc/unspecified.
//   - svc/cyber, svc/fraud and svc/nudity are in the spec's guard-b list
//     but no Qwen3Guard label singles them out: hacking and fraud arrive as
//     Non-violent Illegal Acts (illicit), nudity as Sexual Content. They are
//     reported and never set.
//   - Controversial is a flag scored 0.5 (Verdict.Borderline).

// guardBTable is guard-b's label table, labels as Qwen3Guard writes them.
func guardBTable() []Mapping {
	return []Mapping{
		{Label: "Violent", Name: "Violent", Categories: []string{catIllicitViolent, catViolence}},
		{Label: "Non-violent Illegal Acts", Name: "Non-violent Illegal Acts", Categories: []string{catIllicit}},
		{Label: "Sexual Content or Sexual Acts", Name: "Sexual Content or Sexual Acts", Categories: []string{catSexual}},
		{Label: "PII", Name: "PII", Categories: []string{catPrivacy}},
		{Label: "Suicide & Self-Harm", Name: "Suicide & Self-Harm", Categories: []string{catSelfHarm}},
		{Label: "Unethical Acts", Name: "Unethical Acts", Categories: []string{catHarassment, catHate}},
		{Label: "Politically Sensitive Topics", Name: "Politically Sensitive Topics", Categories: []string{catDisinformation}},
		{Label: "Copyright Violation", Name: "Copyright Violation", Categories: []string{catIP}},
		{Label: "Jailbreak", Name: "Jailbreak", Categories: []string{catUnspecified}},
	}
}

// guardBMaxTokens fits "Safety: …", every category and "Refusal: …".
const guardBMaxTokens = 64

type chatMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"` // a string, or []contentPart
}

type chatBody struct {
	Model       string        `json:"model"`
	Messages    []chatMessage `json:"messages"`
	MaxTokens   int           `json:"max_tokens"`
	Temperature float64       `json:"temperature"`
	Stream      bool          `json:"stream"`
}

func guardBCall(localModel string, c Check) (GuardCall, error) {
	var msgs []chatMessage
	if c.Role == RoleAssistant {
		msgs = []chatMessage{
			{Role: "user", Content: defuse(strings.TrimSpace(c.Prompt))},
			{Role: "assistant", Content: joinTexts(c.Texts)},
		}
	} else {
		msgs = []chatMessage{{Role: "user", Content: joinTexts(c.Texts)}}
	}
	body, err := encodeJSON(chatBody{Model: localModel, Messages: msgs, MaxTokens: guardBMaxTokens})
	if err != nil {
		return GuardCall{}, err
	}
	return GuardCall{Kind: api.KindChat, Body: body}, nil
}

// parseGuardB reads "Safety: Safe|Unsafe|Controversial", then
// "Categories: A, B" or "Categories: None"; a "Refusal: Yes|No" line (on
// response checks) says whether the reply refused and is not a verdict, so
// it is ignored. Only the first Safety and Categories lines count.
func parseGuardB(answer string) (Verdict, error) {
	var safety, cats string
	var haveSafety, haveCats bool
	for l := range strings.Lines(answer) {
		l = strings.TrimSpace(l)
		if rest, ok := cutPrefixFold(l, "Safety:"); ok && !haveSafety {
			safety, haveSafety = strings.TrimSpace(rest), true
		} else if rest, ok := cutPrefixFold(l, "Categories:"); ok && !haveCats {
			cats, haveCats = rest, true
		}
	}
	var v Verdict
	switch {
	case strings.EqualFold(safety, "Safe"):
		return v, nil
	case strings.EqualFold(safety, "Unsafe"):
		v.Unsafe = true
	case strings.EqualFold(safety, "Controversial"):
		v.Unsafe, v.Borderline = true, true
	case !haveSafety:
		return Verdict{}, invalid("no Safety line", answer)
	default:
		return Verdict{}, invalid("Safety is neither Safe, Unsafe nor Controversial", answer)
	}
	v.Labels = guardBLabels(cats)
	return v, nil
}

// guardBLabels splits a Categories value. An item that is a known name
// (in any case) is kept as written; otherwise the known names inside it
// are found as Qwen's reference parser finds them (a case-sensitive
// findall), and an item with none is kept whole, to map to
// svc/unspecified. "None" is no label.
func guardBLabels(cats string) []string {
	var labels []string
	for item := range strings.SplitSeq(cats, ",") {
		item = strings.TrimSpace(item)
		if item == "" || strings.EqualFold(item, "None") {
			continue
		}
		if _, ok := findLabel(guardBTable(), item, ""); ok {
			labels = append(labels, item)
			continue
		}
		found := findNames(item, guardBTable())
		if len(found) == 0 {
			found = []string{item}
		}
		labels = append(labels, found...)
	}
	return labels
}

// findNames returns the table labels that occur in s, leftmost first,
// without overlaps.
func findNames(s string, table []Mapping) []string {
	var found []string
	for i := 0; i < len(s); {
		n := 0
		for _, m := range table {
			if len(m.Label) > n && strings.HasPrefix(s[i:], m.Label) {
				n = len(m.Label)
			}
		}
		if n == 0 {
			i++
			continue
		}
		found = append(found, s[i:i+n])
		i += n
	}
	return found
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}
