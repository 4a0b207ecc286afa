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
		{"streamed, unknown model", true, `{"model":"nope","prompt":"x"}`, 404},
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

// A streamed completion is text_completion chunks whose text makes up the
// unary reply, the finish reason on the last; usage is in the result.
func TestCompletionStream(t *testing.T) {
	body := completionBody(t, "sim-chat", "Once upon a time", map[string]any{"stream": true})
	whole := decodeTextCompletion(t, mustServe(t, New(fixedConfig()), api.KindCompletion,
		completionBody(t, "sim-chat", "Once upon a time", nil)))
	res, s := serve(t, New(fixedConfig()), api.KindCompletion, true, body)
	if res.Status != http.StatusOK || s.bodies != 0 || len(s.events) < 2 {
		t.Fatalf("status %d, %d bodies, %d events", res.Status, s.bodies, len(s.events))
	}
	text := checkTextChunks(t, s.events, whole.Choices[0].FinishReason)
	if text != whole.Choices[0].Text {
		t.Fatalf("streamed %q, whole %q", text, whole.Choices[0].Text)
	}
	if res.Usage == nil || res.Usage.CompletionTokens != whole.Usage.CompletionTokens || res.FinishReason != whole.Choices[0].FinishReason {
		t.Fatalf("result %+v, whole usage %+v", res, whole.Usage)
	}
}

// checkTextChunks checks a completion stream's chunks and returns their
// text.
func checkTextChunks(t *testing.T, events [][]byte, finish string) string {
	t.Helper()
	var text strings.Builder
	for i, ev := range events {
		c := decodeTextCompletion(t, ev)
		ch := c.Choices[0]
		text.WriteString(ch.Text)
		last := i == len(events)-1
		if last && ch.FinishReason != finish || !last && ch.FinishReason != "" {
			t.Fatalf("chunk %d of %d: %s", i, len(events), ev)
		}
	}
	return text.String()
}

func TestHTTPCompletionStream(t *testing.T) {
	srv := newServer(t, NewHandler(fixedConfig()))
	body := completionBody(t, "sim-chat", "Tell me a story.", map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}})
	resp := post(t, srv, "/v1/completions", body)
	got, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d %q: %s %v", resp.StatusCode, resp.Header.Get("Content-Type"), got, err)
	}
	fs := frames(t, got)
	if len(fs) < 4 || fs[len(fs)-1] != "[DONE]" {
		t.Fatalf("frames %q", fs)
	}
	var usage struct {
		Object  string            `json:"object"`
		Choices []json.RawMessage `json:"choices"`
		Usage   *api.Usage        `json:"usage"`
	}
	if err := json.Unmarshal([]byte(fs[len(fs)-2]), &usage); err != nil || usage.Object != "text_completion" ||
		len(usage.Choices) != 0 || usage.Usage == nil || usage.Usage.CompletionTokens == 0 {
		t.Fatalf("usage chunk %s %v", fs[len(fs)-2], err)
	}
	var events [][]byte
	for _, f := range fs[:len(fs)-2] {
		events = append(events, []byte(f))
	}
	whole := decodeTextCompletion(t, mustServe(t, New(fixedConfig()), api.KindCompletion, completionBody(t, "sim-chat", "Tell me a story.", nil)))
	if text := checkTextChunks(t, events, whole.Choices[0].FinishReason); text != whole.Choices[0].Text {
		t.Fatalf("streamed %q, whole %q", text, whole.Choices[0].Text)
	}
}
