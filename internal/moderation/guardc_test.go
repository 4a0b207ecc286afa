package moderation

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestGuardCCall(t *testing.T) {
	img := pngBytes(t, 2, 2)
	jpg := jpegBytes(t)
	png64 := base64.StdEncoding.EncodeToString(img)
	jpg64 := base64.StdEncoding.EncodeToString(jpg)
	policy := encodeForTest(t, guardCPolicy)
	tests := []struct {
		name  string
		check Check
		want  string
	}{
		{"text and images", Check{
			Texts:  []string{"Is this OK?"},
			Images: []api.ModerationImage{{Data: img, MediaType: "image/png"}, {Data: jpg}},
		}, `{"model":"guard-c","messages":[{"role":"user","content":[{"type":"text","text":` + policy + `},` +
			`{"type":"text","text":"Is this OK?"},` +
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png64 + `"}},` +
			`{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + jpg64 + `"}}]}],"max_tokens":200,"temperature":0,"stream":false}`},
		{"image only", Check{Images: []api.ModerationImage{{Data: img, MediaType: "image/png", URL: "https://example.com/a.png"}}},
			`{"model":"guard-c","messages":[{"role":"user","content":[{"type":"text","text":` + policy + `},` +
				`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png64 + `"}}]}],"max_tokens":200,"temperature":0,"stream":false}`},
		{"response check", Check{Role: RoleAssistant, Prompt: "Draw a cat", Texts: []string{"Here it is."}},
			`{"model":"guard-c","messages":[{"role":"user","content":[{"type":"text","text":` + policy + `},` +
				`{"type":"text","text":"User message (context only, do not assess it):\nDraw a cat\n\nAssistant reply (assess this):\nHere it is."}]}],"max_tokens":200,"temperature":0,"stream":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			call, err := family(t, "guard-c:0.8b").Call("guard-c", tt.check)
			if err != nil {
				t.Fatal(err)
			}
			if call.Kind != api.KindChat {
				t.Errorf("Kind = %q", call.Kind)
			}
			if string(call.Body) != tt.want {
				t.Errorf("body\n got %s\nwant %s", call.Body, tt.want)
			}
		})
	}
}

func encodeForTest(t *testing.T, s string) string {
	t.Helper()
	b, err := encodeJSON(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGuardCCallNeedsImageBytes(t *testing.T) {
	f := family(t, "guard-c:4b")
	for _, img := range []api.ModerationImage{{URL: "https://example.com/a.png"}, {}, {Data: []byte("not an image")}} {
		if _, err := f.Call("m", Check{Images: []api.ModerationImage{img}}); err == nil {
			t.Errorf("Call with image %+v succeeded", img)
		}
	}
}

// The policy must name every category exactly as the table does, or the
// model's answer would not parse back to a row.
func TestGuardCPolicyNamesTable(t *testing.T) {
	for _, m := range guardCTable() {
		if !strings.Contains(guardCPolicy, m.Label+": "+m.Name+".") {
			t.Errorf("policy lacks %q", m.Label+": "+m.Name)
		}
	}
	if !strings.Contains(guardCPolicy, `"NA: None applying"`) {
		t.Error("policy lacks NA: None applying")
	}
}

func TestGuardCParse(t *testing.T) {
	tests := []struct {
		answer string
		want   Verdict
		bad    bool
	}{
		{answer: `{"rating": "Safe", "category": "NA: None applying", "rationale": "A cat on a sofa."}`, want: Verdict{}},
		{answer: `{"rating": "Unsafe", "category": "O2: Violence, Harm, or Cruelty", "rationale": "The image shows a violent assault."}`,
			want: Verdict{Unsafe: true, Labels: []string{"O2: Violence, Harm, or Cruelty"}}},
		{answer: "```json\n{\"rating\": \"Unsafe\", \"category\": \"O4: Nudity Content\", \"rationale\": \"Nudity.\"}\n```",
			want: Verdict{Unsafe: true, Labels: []string{"O4: Nudity Content"}}},
		{answer: "Here is my assessment: {\"rating\":\"unsafe\",\"category\":\"O5: Criminal Planning\"} Hope this helps.",
			want: Verdict{Unsafe: true, Labels: []string{"O5: Criminal Planning"}}},
		{answer: `{"rating": " SAFE ", "category": "O1: Hate, Humiliation, Harassment"}`, want: Verdict{}},
		{answer: `{"rating": "Unsafe", "category": "NA: None applying"}`, want: Verdict{Unsafe: true}},
		{answer: `{"rating": "Unsafe"}`, want: Verdict{Unsafe: true}},
		{answer: `{"rating": "Unsafe", "category": null}`, want: Verdict{Unsafe: true}},
		{answer: `{"rating": "Unsafe", "category": "O10: Something"}`, want: Verdict{Unsafe: true, Labels: []string{"O10: Something"}}},
		{answer: `{"Rating": "Unsafe", "Category": "O7: Self-Harm"}`, want: Verdict{Unsafe: true, Labels: []string{"O7: Self-Harm"}}},
		{answer: "", bad: true},
		{answer: "Unsafe", bad: true},
		{answer: "maybe", bad: true},
		{answer: `{"rating": "Unsafe", "category": "O2: Viol`, bad: true},
		{answer: "```json\n{\"rating\": \"Unsafe\",", bad: true},
		{answer: `{"category": "O2: Violence, Harm, or Cruelty"}`, bad: true},
		{answer: `{"rating": "Borderline", "category": "O2"}`, bad: true},
		{answer: `{"rating": 1}`, bad: true},
		{answer: `{"rating": "Unsafe", "category": 2}`, bad: true},
		{answer: `["Unsafe"]`, bad: true},
	}
	f := family(t, "guard-c:4b")
	for _, tt := range tests {
		got, err := f.Parse(tt.answer)
		if tt.bad {
			if !isInvalidVerdict(err) {
				t.Errorf("Parse(%q) = %+v, %v; want ErrInvalidVerdict", tt.answer, got, err)
			}
			continue
		}
		if err != nil || got.Unsafe != tt.want.Unsafe || got.Borderline || !slices.Equal(got.Labels, tt.want.Labels) {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.answer, got, err, tt.want)
		}
	}
}

func TestGuardCResult(t *testing.T) {
	img := api.ModerationImage{Data: pngBytes(t, 1, 1), MediaType: "image/png"}
	both := Check{Texts: []string{"x"}, Images: []api.ModerationImage{img}}
	tests := []struct {
		labels []string
		want   []string
	}{
		{[]string{"O1: Hate, Humiliation, Harassment"}, []string{catHarassment, catHate}},
		{[]string{"O2: Violence, Harm, or Cruelty"}, []string{catViolence}},
		{[]string{"O3: Sexual Content"}, []string{catSexual}},
		{[]string{"O4: Nudity Content"}, []string{catNudity}},
		{[]string{"O5: Criminal Planning"}, []string{catIllicit, catFraud}},
		{[]string{"O6: Weapons or Substance Abuse"}, []string{catIllicit}},
		{[]string{"O7: Self-Harm"}, []string{catSelfHarm}},
		{[]string{"O8: Animal Cruelty"}, []string{catViolence}},
		{[]string{"O9: Disasters or Emergencies"}, []string{catUnspecified}},
		{[]string{"o2"}, []string{catViolence}},
		{[]string{"Violence, Harm, or Cruelty"}, []string{catViolence}},
		{[]string{"O10: Something"}, []string{catUnspecified}},
		{nil, []string{catUnspecified}},
	}
	f := family(t, "guard-c:0.8b")
	for _, tt := range tests {
		checkResult(t, f, f.Result(Verdict{Unsafe: true, Labels: tt.labels}, both), tt.want, 1.0, []string{"text", "image"})
	}
	checkResult(t, f, f.Result(Verdict{}, both), nil, 0, []string{"text", "image"})
	imageOnly := Check{Images: []api.ModerationImage{img}}
	checkResult(t, f, f.Result(Verdict{Unsafe: true, Labels: []string{"O4"}}, imageOnly), []string{catNudity}, 1.0, []string{"image"})
	checkResult(t, f, f.Result(Verdict{}, Check{Texts: []string{"x"}}), nil, 0, []string{"text"})
}
