package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// POST /v1/completions through real svc serve and svc worker processes:
// under both prefixes, whole and streamed, raw and with the official Go
// SDK; each request a usage row of type completion with the worker's
// counts.
func TestCompletions(t *testing.T) {
	s, key := gateway(t)
	ctx := context.Background()
	const prompt = `{"model":"sim-chat","prompt":"Once upon a time","max_tokens":24,"temperature":0`
	for _, prefix := range []string{"/v1", "/api/v1"} {
		t.Run(prefix, func(t *testing.T) {
			r := s.do("POST", prefix+"/completions", prompt+`}`, bearer(key))
			if r.Status != http.StatusOK {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			var whole struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Model   string `json:"model"`
				Choices []struct {
					Text         string `json:"text"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(r.Body, &whole); err != nil || whole.Object != "text_completion" || whole.Model != "sim-chat" ||
				len(whole.Choices) != 1 || whole.Choices[0].Text == "" || whole.Usage.CompletionTokens == 0 {
				t.Fatalf("reply %s %v", r.Body, err)
			}
			id := r.Header.Get("X-Request-Id")
			svc := svcOf(t, string(r.Body))
			worker, _ := svc["worker"].(map[string]any)
			if id == "" || svc["request_id"] != id || worker["id"] != r.Header.Get("X-Worker-Id") || r.Header.Get("X-Worker-Name") != "sim-box" {
				t.Fatalf("svc %v, headers %v", svc, r.Header)
			}
			row := waitRow(t, s, key, id)
			if row["request_type"] != "completion" || row["status_code"] != float64(200) || row["worker_name"] != "sim-box" ||
				row["prompt_tokens"] != float64(whole.Usage.PromptTokens) || row["completion_tokens"] != float64(whole.Usage.CompletionTokens) ||
				row["tokens_estimated"] == true {
				t.Fatalf("row %v, usage %+v", row, whole.Usage)
			}

			// Streamed: text_completion chunks, the usage chunk and the svc
			// chunk, then [DONE].
			r = s.do("POST", prefix+"/completions", prompt+`,"stream":true}`, bearer(key))
			if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d %q: %s", r.Status, r.Header.Get("Content-Type"), r.Body)
			}
			var text strings.Builder
			var chunks []map[string]any
			sawDone := false
			for _, line := range strings.Split(string(r.Body), "\n") {
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					continue
				}
				if data == "[DONE]" {
					sawDone = true
					continue
				}
				var c map[string]any
				if err := json.Unmarshal([]byte(data), &c); err != nil || c["object"] != "text_completion" {
					t.Fatalf("chunk %s %v", data, err)
				}
				for _, ch := range c["choices"].([]any) {
					text.WriteString(ch.(map[string]any)["text"].(string))
				}
				chunks = append(chunks, c)
			}
			if !sawDone || len(chunks) < 3 || text.String() != whole.Choices[0].Text {
				t.Fatalf("streamed %q in %d chunks (done %v), want %q", text.String(), len(chunks), sawDone, whole.Choices[0].Text)
			}
			usage, _ := chunks[len(chunks)-2]["usage"].(map[string]any)
			last, _ := chunks[len(chunks)-1]["svc"].(map[string]any)
			id = r.Header.Get("X-Request-Id")
			if usage["completion_tokens"] != float64(whole.Usage.CompletionTokens) || last["request_id"] != id || last["worker"] == nil {
				t.Fatalf("final chunks %v", chunks[len(chunks)-2:])
			}
			row = waitRow(t, s, key, id)
			if row["request_type"] != "completion" || row["completion_tokens"] != float64(whole.Usage.CompletionTokens) {
				t.Fatalf("streamed row %v", row)
			}

			// The official Go SDK, whole and streamed.
			client := sdk(s, key, prefix)
			params := openai.CompletionNewParams{
				Model:     "sim-chat",
				Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
				MaxTokens: openai.Int(24), Temperature: openai.Float(0),
			}
			var resp *http.Response
			comp, err := client.Completions.New(ctx, params, option.WithResponseInto(&resp))
			if err != nil {
				t.Fatal(err)
			}
			if comp.Choices[0].Text != whole.Choices[0].Text || comp.Usage.CompletionTokens != int64(whole.Usage.CompletionTokens) {
				t.Fatalf("SDK completion %s", comp.RawJSON())
			}
			if row := waitRow(t, s, key, resp.Header.Get("X-Request-Id")); row["request_type"] != "completion" {
				t.Fatalf("SDK row %v", row)
			}
			stream := client.Completions.NewStreaming(ctx, params)
			text.Reset()
			var lastChunk openai.Completion
			for stream.Next() {
				lastChunk = stream.Current()
				for _, ch := range lastChunk.Choices {
					text.WriteString(ch.Text)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if text.String() != whole.Choices[0].Text {
				t.Fatalf("SDK streamed %q, want %q", text.String(), whole.Choices[0].Text)
			}
			if svc := svcOf(t, lastChunk.RawJSON()); svc["request_id"] == nil || svc["worker"] == nil {
				t.Fatalf("SDK last chunk %s", lastChunk.RawJSON())
			}
		})
	}

	// Refusals: validation, and a model that does not do chat.
	r := s.do("POST", "/v1/completions", `{"model":"sim-chat","prompt":["a","b"],"n":2}`, bearer(key))
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), `"field":"n"`) || !strings.Contains(string(r.Body), `"field":"prompt"`) {
		t.Fatalf("422: %d %s", r.Status, r.Body)
	}
	r = s.do("POST", "/v1/completions", `{"model":"sim-embed","prompt":"x"}`, bearer(key))
	if r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), "/v1/embeddings") {
		t.Fatalf("wrong endpoint: %d %s", r.Status, r.Body)
	}
}
