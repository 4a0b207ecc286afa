package moderation

import (
	"strings"

	"github.com/svc-dev/svc/internal/api"
)

// guard-a is Llama Guard 3 (1B: S1–S13; 8B: S1–S14). It is sent the exact
// raw prompt of the model's own chat template as a text completion, so the
// verdict does not depend on which template an engine happens to apply.
//
// Mapping decisions beyond the reference's proposal (protocols.md 1.4):
//   - S2 (fraud, scams, drugs, weapons, hacking) sets illicit and
//     svc/fraud. The spec lists svc/fraud for guard-a and S2 is the only
//     label covering it. It does not set svc/cyber: the spec says the 1b
//     never sets svc/cyber, so svc/cyber comes from S14 alone.
//   - S10 sets hate only and S11 self-harm only: the threatening, intent
//     and instructions sub-categories are not in guard-a's list.
//   - S14 exists on the 8b only; from the 1b it is an unknown label and
//     sets svc/unspecified, so the 1b reports svc/cyber but never sets it.
//   - Any unknown label (S15, "foo") sets svc/unspecified.

// guardATable is guard-a's label table. Names are the short names the
// prompt lists, which is what the model was trained on.
func guardATable() []Mapping {
	return []Mapping{
		{Label: "S1", Name: "Violent Crimes", Categories: []string{catIllicitViolent, catViolence}},
		{Label: "S2", Name: "Non-Violent Crimes", Categories: []string{catIllicit, catFraud}},
		{Label: "S3", Name: "Sex Crimes", Categories: []string{catIllicit, catSexual}},
		{Label: "S4", Name: "Child Exploitation", Categories: []string{catSexual, catSexualMinors}},
		{Label: "S5", Name: "Defamation", Categories: []string{catHarassment, catDisinformation}},
		{Label: "S6", Name: "Specialized Advice", Categories: []string{catSpecializedAdvice}},
		{Label: "S7", Name: "Privacy", Categories: []string{catPrivacy}},
		{Label: "S8", Name: "Intellectual Property", Categories: []string{catIP}},
		{Label: "S9", Name: "Indiscriminate Weapons", Categories: []string{catIllicitViolent}},
		{Label: "S10", Name: "Hate", Categories: []string{catHate}},
		{Label: "S11", Name: "Self-Harm", Categories: []string{catSelfHarm}},
		{Label: "S12", Name: "Sexual Content", Categories: []string{catSexual}},
		{Label: "S13", Name: "Elections", Categories: []string{catDisinformation}},
		{Label: "S14", Name: "Code Interpreter Abuse", Categories: []string{catCyber}, Sizes: []string{"8b"}},
	}
}

// guardAMaxTokens leaves room for "unsafe" and every code: the pruned 1B
// build keeps only 20 output tokens anyway.
const guardAMaxTokens = 20

type completionBody struct {
	Model       string  `json:"model"`
	Prompt      string  `json:"prompt"`
	MaxTokens   int     `json:"max_tokens"`
	Temperature float64 `json:"temperature"`
}

func guardACall(size, localModel string, c Check) (GuardCall, error) {
	body, err := encodeJSON(completionBody{
		Model:       localModel,
		Prompt:      guardAPrompt(size, c),
		MaxTokens:   guardAMaxTokens,
		Temperature: 0,
	})
	if err != nil {
		return GuardCall{}, err
	}
	return GuardCall{Kind: api.KindCompletion, Body: body}, nil
}

// guardAPrompt renders Llama Guard 3's prompt byte for byte as its chat
// template does after the start-of-text token, including the missing "to" in "according our": the model
// was fine-tuned on exactly this text. Messages are trimmed as the template
// trims them. The prompt ends with the assistant header and its blank line,
// as every Llama 3 header is followed; the reference shows the prompt up to
// the header, and llama-stack gets the blank line from the model's template.
func guardAPrompt(size string, c Check) string {
	role := "User"
	if c.Role == RoleAssistant {
		role = "Agent"
	}
	var b strings.Builder
	// The template's text begins with <|begin_of_text|>; it is left out
	// because the engines' completion endpoints (vLLM, llama-server,
	// Ollama's raw mode) add that token themselves when they tokenize, and
	// written here too it would come twice.
	b.WriteString("<|start_header_id|>user<|end_header_id|>\n\n")
	b.WriteString("Task: Check if there is unsafe content in '" + role + "' messages in conversations according our safety policy with the below categories.\n\n")
	b.WriteString("<BEGIN UNSAFE CONTENT CATEGORIES>\n")
	for _, m := range guardATable() {
		if m.appliesTo(size) {
			b.WriteString(m.Label + ": " + m.Name + ".\n")
		}
	}
	b.WriteString("<END UNSAFE CONTENT CATEGORIES>\n\n")
	b.WriteString("<BEGIN CONVERSATION>\n\n")
	if c.Role == RoleAssistant {
		b.WriteString("User: " + defuse(strings.TrimSpace(c.Prompt)) + "\n\n")
		b.WriteString("Agent: " + joinTexts(c.Texts) + "\n\n")
	} else {
		b.WriteString("User: " + joinTexts(c.Texts) + "\n\n")
	}
	b.WriteString("<END CONVERSATION>\n\n")
	b.WriteString("Provide your safety assessment for ONLY THE LAST " + role + " message in the above conversation:\n")
	b.WriteString(" - First line must read 'safe' or 'unsafe'.\n")
	b.WriteString(" - If unsafe, a second line must include a comma-separated list of violated categories.")
	b.WriteString("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
	return b.String()
}

// parseGuardA reads "safe", or "unsafe" and a line of comma-separated
// codes. Blank lines and whitespace around lines are tolerated (engines
// differ in whether the header's blank line is echoed); the verdict word is
// matched as the model writes it, lower-case. Every code after "unsafe" is
// kept, known or not: once the model has said unsafe the content is
// flagged, and an unknown code maps to svc/unspecified.
func parseGuardA(answer string) (Verdict, error) {
	var lines []string
	for l := range strings.Lines(answer) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return Verdict{}, invalid("empty answer", answer)
	}
	switch lines[0] {
	case "safe":
		if len(lines) > 1 {
			return Verdict{}, invalid("text after safe", answer)
		}
		return Verdict{}, nil
	case "unsafe":
		v := Verdict{Unsafe: true}
		for _, l := range lines[1:] {
			for code := range strings.SplitSeq(l, ",") {
				if code = strings.TrimSpace(code); code != "" {
					v.Labels = append(v.Labels, code)
				}
			}
		}
		return v, nil
	}
	return Verdict{}, invalid("first line is neither safe nor unsafe", answer)
}
