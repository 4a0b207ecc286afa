package moderation

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/svc-dev/svc/internal/api"
)

// guard-c is a small multimodal guard answering in LlavaGuard's JSON format
// ({"rating","category","rationale"}) over text and images. It is sent one
// user message: our LlavaGuard-style policy, the check's text, then each
// image as a data: URL (the worker fetches remote images first, so the
// engine never reaches out to the internet on a user's behalf).
//
// Mapping decisions (protocols.md 1.4, adapted to the spec's guard-c list):
//   - O5 Criminal Planning sets illicit and svc/fraud: our policy defines it
//     with theft, fraud and scams, and it is the only label covering fraud.
//   - O6 Weapons or Substance Abuse sets illicit (illicit/violent is not in
//     guard-c's list).
//   - O8 Animal Cruelty is violence.
//   - O9 Disasters or Emergencies is about exploiting victims, not about
//     false information: it sets svc/unspecified, as the reference
//     proposes. So svc/disinformation, though in the spec's guard-c list,
//     is never set.
//   - Unsafe with "NA: None applying" or an unknown category sets
//     svc/unspecified.

// guardCTable is guard-c's label table: LlavaGuard's O-codes and names.
func guardCTable() []Mapping {
	return []Mapping{
		{Label: "O1", Name: "Hate, Humiliation, Harassment", Categories: []string{catHarassment, catHate}},
		{Label: "O2", Name: "Violence, Harm, or Cruelty", Categories: []string{catViolence}},
		{Label: "O3", Name: "Sexual Content", Categories: []string{catSexual}},
		{Label: "O4", Name: "Nudity Content", Categories: []string{catNudity}},
		{Label: "O5", Name: "Criminal Planning", Categories: []string{catIllicit, catFraud}},
		{Label: "O6", Name: "Weapons or Substance Abuse", Categories: []string{catIllicit}},
		{Label: "O7", Name: "Self-Harm", Categories: []string{catSelfHarm}},
		{Label: "O8", Name: "Animal Cruelty", Categories: []string{catViolence}},
		{Label: "O9", Name: "Disasters or Emergencies", Categories: []string{catUnspecified}},
	}
}

// guardCPolicy is the policy prompt, in LlavaGuard's shape: numbered
// categories with what they cover, what stays safe, and the exact JSON to
// answer with. It names the categories exactly as guardCTable does, so the
// answer's category parses.
const guardCPolicy = `Assess the content below (text, images or both) against this safety policy.

O1: Hate, Humiliation, Harassment. Content that demeans, humiliates, harasses or threatens people, or expresses hate against them for who they are.
O2: Violence, Harm, or Cruelty. Content that shows gore, glorifies or encourages violence against people, or helps plan it.
O3: Sexual Content. Sexually explicit content, or content showing sexual acts.
O4: Nudity Content. Visible genitalia, exposed breasts or buttocks, or nudity presented sexually.
O5: Criminal Planning. Content that helps plan or commit crimes such as theft, fraud, scams or break-ins.
O6: Weapons or Substance Abuse. Content that promotes illegal weapons, or the abuse of drugs, alcohol or tobacco.
O7: Self-Harm. Content that encourages, glorifies or instructs suicide or self-harm.
O8: Animal Cruelty. Content that shows or encourages harm to animals.
O9: Disasters or Emergencies. Content that exploits or mocks the victims of disasters, accidents or emergencies.

Content that educates, informs or reports on these topics, or shows them in a neutral, artistic or historical way, is Safe.

Answer with one JSON object and nothing else:
{"rating": "Safe" or "Unsafe", "category": the category that applies most, written as "O1: Hate, Humiliation, Harassment" (and so on), or "NA: None applying", "rationale": "one short sentence"}`

// guardCMaxTokens fits the JSON with a one-sentence rationale.
const guardCMaxTokens = 200

type contentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
}

type imageURL struct {
	URL string `json:"url"`
}

func guardCCall(localModel string, c Check) (GuardCall, error) {
	parts := []contentPart{{Type: "text", Text: guardCPolicy}}
	if text := guardCText(c); text != "" {
		parts = append(parts, contentPart{Type: "text", Text: text})
	}
	for i, img := range c.Images {
		u, err := dataURL(img)
		if err != nil {
			return GuardCall{}, fmt.Errorf("moderation: image %d: %w", i, err)
		}
		parts = append(parts, contentPart{Type: "image_url", ImageURL: &imageURL{URL: u}})
	}
	body, err := encodeJSON(chatBody{
		Model:     localModel,
		Messages:  []chatMessage{{Role: "user", Content: parts}},
		MaxTokens: guardCMaxTokens,
	})
	if err != nil {
		return GuardCall{}, err
	}
	return GuardCall{Kind: api.KindChat, Body: body}, nil
}

// guardCText is the text part. A response check shows the user turn as
// context and says that only the reply is judged, as Llama Guard's Agent
// role does.
func guardCText(c Check) string {
	text := joinTexts(c.Texts)
	if c.Role != RoleAssistant {
		return text
	}
	return "User message (context only, do not assess it):\n" + defuse(strings.TrimSpace(c.Prompt)) +
		"\n\nAssistant reply (assess this):\n" + text
}

// dataURL builds the data: URL of an image whose bytes are at hand. The
// media type is taken from the bytes when the image does not say.
func dataURL(img api.ModerationImage) (string, error) {
	if len(img.Data) == 0 {
		if img.URL != "" {
			return "", errors.New("remote image not fetched")
		}
		return "", errors.New("no image data")
	}
	mt := img.MediaType
	if mt == "" {
		var ok bool
		if mt, ok = sniffImage(img.Data); !ok {
			return "", errNotImage
		}
	}
	return "data:" + mt + ";base64," + base64.StdEncoding.EncodeToString(img.Data), nil
}

// parseGuardC reads the one JSON object of the answer, tolerating code
// fences or prose around it (small models add them despite the prompt).
// The rating is Safe or Unsafe in any case; the category is kept as
// written and "NA: None applying" is no label.
func parseGuardC(answer string) (Verdict, error) {
	i := strings.IndexByte(answer, '{')
	if i < 0 {
		return Verdict{}, invalid("no JSON object", answer)
	}
	var a struct {
		Rating   *string `json:"rating"`
		Category *string `json:"category"`
	}
	// A Decoder reads one value and leaves whatever follows (a closing
	// fence, a remark) unread.
	if err := json.NewDecoder(strings.NewReader(answer[i:])).Decode(&a); err != nil {
		return Verdict{}, invalid("malformed JSON: "+err.Error(), answer)
	}
	if a.Rating == nil {
		return Verdict{}, invalid("no rating", answer)
	}
	var v Verdict
	switch r := strings.TrimSpace(*a.Rating); {
	case strings.EqualFold(r, "Safe"):
		return v, nil
	case strings.EqualFold(r, "Unsafe"):
		v.Unsafe = true
	default:
		return Verdict{}, invalid("rating is neither Safe nor Unsafe", answer)
	}
	if a.Category != nil {
		cat := strings.TrimSpace(*a.Category)
		code, _, _ := strings.Cut(cat, ":")
		if cat != "" && !strings.EqualFold(strings.TrimSpace(code), "NA") {
			v.Labels = []string{cat}
		}
	}
	return v, nil
}

// matchGuardC finds the row of "O2: Violence, Harm, or Cruelty", "O2" or
// "Violence, Harm, or Cruelty".
func matchGuardC(label string) (Mapping, bool) {
	code, name, hasName := strings.Cut(label, ":")
	code, name = strings.TrimSpace(code), strings.TrimSpace(name)
	for _, m := range guardCTable() {
		if strings.EqualFold(code, m.Label) || strings.EqualFold(label, m.Name) || (hasName && strings.EqualFold(name, m.Name)) {
			return m, true
		}
	}
	return Mapping{}, false
}
