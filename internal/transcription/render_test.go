package transcription

import (
	"encoding/json"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// verbose_json names its task: a translation's is translate.
func TestRenderVerboseTask(t *testing.T) {
	tr := &api.Transcript{Text: " hello ", Language: "en", Duration: 1.5}
	for _, translate := range []bool{false, true} {
		r := &Request{ResponseFormat: FormatVerboseJSON, Params: api.TranscriptionParams{Translate: translate, Seconds: 1.5}}
		ctype, out, err := r.Render(tr, nil)
		if err != nil || ctype != "application/json" {
			t.Fatalf("%s, %v", ctype, err)
		}
		var got struct {
			Task     string            `json:"task"`
			Text     string            `json:"text"`
			Segments []json.RawMessage `json:"segments"`
		}
		want := map[bool]string{false: "transcribe", true: "translate"}[translate]
		if err := json.Unmarshal(out, &got); err != nil || got.Task != want || got.Text != "hello" || got.Segments == nil {
			t.Fatalf("translate %v: %s", translate, out)
		}
	}
}
