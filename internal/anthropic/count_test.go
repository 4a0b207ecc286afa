package anthropic

import (
	"net/http"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// TestCount counts what the model would read as text, in characters, and
// holds a count's request to Messages' checks less max_tokens.
func TestCount(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		chars int
	}{
		{"no max_tokens", `{"model":"m","messages":[{"role":"user","content":"hello"}]}`, 5},
		{"max_tokens kept", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hello"}]}`, 5},
		{"system blocks", `{"model":"m","system":[{"type":"text","text":"ab"},{"type":"text","text":"cd"}],"messages":[{"role":"user","content":"é"}]}`,
			len("ab\n\ncd") + 1},
		{"an image counts nothing", `{"model":"m","messages":[{"role":"user","content":[` + imgB64 + `,{"type":"text","text":"what"}]}]}`, 4},
		{"a document, decoded", `{"model":"m","messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"text/plain","data":"` + b64("héllo") + `"}}]}]}`, 5},
		{"tool call and result", `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":[` + toolUse + `]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]}]}`,
			1 + len("get_weather") + len(`{"city":"Paris","days":[1,2]}`) + len("sunny")},
		{"tools", `{"model":"m","tools":[{"name":"f","description":"does","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"q"}]}`,
			1 + 1 + 4 + len(`{"type":"object"}`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model, chars, err := Count([]byte(tc.body), remoteOK)
			if err != nil || model != "m" || chars != tc.chars {
				t.Fatalf("Count = %q, %d, %v; want m, %d", model, chars, err, tc.chars)
			}
		})
	}
	for _, body := range []string{
		`{"model":"m"}`,
		`{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":"hi"}]}`,
	} {
		if _, _, err := Count([]byte(body), remoteOK); api.ErrorOf(err).HTTPStatus() != http.StatusUnprocessableEntity {
			t.Errorf("%s: %v, want a 422", body, err)
		}
	}
	if _, _, _, err := ToChat([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), remoteOK); err == nil {
		t.Error("a message without max_tokens was taken")
	}
}
