package sim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestCompletion(t *testing.T) {
	e := New(fixedConfig())

	res, s := serve(t, e, api.KindCompletion, false, completionBody(t, "sim-chat", "Once upon a time", nil))
	if res.Status != http.StatusOK || s.bodies != 1 || len(s.events) != 0 {
		t.Fatalf("status %d, %d bodies, %d events", res.Status, s.bodies, len(s.events))
	}
	c := decodeTextCompletion(t, s.body)
	text := c.Choices[0].Text
	if c.Model != "sim-chat" || text == "" || c.Created == 0 || c.Choices[0].Index != 0 {
		t.Fatalf("completion %s", s.body)
	}
	u := res.Usage
	if u == nil || u.PromptTokens != c.Usage.PromptTokens || u.CompletionTokens != c.Usage.CompletionTokens ||
		u.TotalTokens != u.PromptTokens+u.CompletionTokens || c.Choices[0].FinishReason != res.FinishReason {
		t.Fatalf("result %+v, body usage %+v", res, c.Usage)
	}

	// A completion is the reply to its prompt as one user message.
	asChat := []byte(`{"model":"sim-chat","max_tokens":20,"messages":[{"role":"user","content":"Once upon a time"}]}`)
	chat := *decodeCompletion(t, mustServe(t, e, api.KindChat, asChat)).Choices[0].Message.Content
	if chat != text {
		t.Fatalf("completion %q, chat %q", text, chat)
	}

	// Deterministic, and steered like chat.
	if _, again := serve(t, New(fixedConfig()), api.KindCompletion, false, completionBody(t, "sim-chat", "Once upon a time", nil)); !bytes.Equal(again.body, s.body) {
		t.Fatalf("two runs differ:\n%s\n%s", s.body, again.body)
	}
	res, s = serve(t, e, api.KindCompletion, false, completionBody(t, "sim-chat", "go\nsim: tokens=9", map[string]any{"max_tokens": 4}))
	if c := decodeTextCompletion(t, s.body); c.Choices[0].FinishReason != "length" || c.Usage.CompletionTokens != 4 || res.FinishReason != "length" {
		t.Fatalf("capped %s", s.body)
	}
	_, s = serve(t, e, api.KindCompletion, false, completionBody(t, "sim-chat", "go\nsim: json=1", map[string]any{"stop": "\""}))
	if c := decodeTextCompletion(t, s.body); c.Choices[0].Text != "{" {
		t.Fatalf("stopped %s", s.body)
	}

	// A raw prompt has no template to open a thinking block.
	res, s = serve(t, e, api.KindCompletion, false, completionBody(t, "sim-reasoner", "go\nsim: reasoning=10", nil))
	if res.Usage.ReasoningTokens != nil || strings.Contains(string(s.body), "reasoning") {
		t.Fatalf("reasoning in a completion: %s", s.body)
	}
}

func TestCompletionRefused(t *testing.T) {
	e := New(fixedConfig())
	tests := []struct {
		name   string
		stream bool
		body   string
		status int
	}{
		{"streamed", true, `{"model":"sim-chat","prompt":"x"}`, 400},
		{"prompt array", false, `{"model":"sim-chat","prompt":["x"]}`, 400},
		{"no prompt", false, `{"model":"sim-chat"}`, 400},
		{"bad max_tokens", false, `{"model":"sim-chat","prompt":"x","max_tokens":0}`, 400},
		{"bad directive", false, `{"model":"sim-chat","prompt":"sim: tokens=lots"}`, 400},
		{"not a chat model", false, `{"model":"sim-tts","prompt":"x"}`, 400},
		{"unknown model", false, `{"model":"nope","prompt":"x"}`, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, s := serve(t, e, api.KindCompletion, tt.stream, []byte(tt.body))
			if res.Status != tt.status || s.bodies != 0 {
				t.Fatalf("status %d %+v", res.Status, res.Error)
			}
		})
	}
}

func TestHTTPCompletions(t *testing.T) {
	srv := newServer(t, NewHandler(fixedConfig()))
	tests := []struct {
		name, model, prompt string
	}{
		{"text", "sim-chat", "Tell me a story."},
		{"llama guard", "guard-a:1b", llamaGuardPrompt("User", codes(13), user("I will murder him."))},
		{"qwen guard", "guard-b:4b", "a hateful remark"},
		{"llava guard", "guard-c:0.8b", "sim: verdict=unsafe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := completionBody(t, tt.model, tt.prompt, nil)
			resp := post(t, srv, "/v1/completions", body)
			got, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d: %s %v", resp.StatusCode, got, err)
			}
			// The HTTP face answers what the engine does in-process.
			want := mustServe(t, New(fixedConfig()), api.KindCompletion, body)
			if !bytes.Equal(bytes.TrimSpace(got), want) {
				t.Fatalf("over HTTP\n%s\nin-process\n%s", got, want)
			}
		})
	}

	// Guards answer chat over HTTP too.
	resp := post(t, srv, "/v1/chat/completions", chatBody(t, "guard-b:8b", "Who won the election?", nil))
	var c completion
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || len(c.Choices) != 1 ||
		*c.Choices[0].Message.Content != "Safety: Controversial\nCategories: Politically Sensitive Topics" {
		t.Fatalf("guard chat %+v %v", c, err)
	}
}

// mustServe runs a non-streaming request on e and returns its body.
func mustServe(t *testing.T, e *Engine, kind string, body []byte) []byte {
	t.Helper()
	res, s := serve(t, e, kind, false, body)
	if res.Status != http.StatusOK {
		t.Fatalf("status %d: %+v", res.Status, res.Error)
	}
	return s.body
}
