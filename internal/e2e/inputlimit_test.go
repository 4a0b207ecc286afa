package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// An input over the model's limit, through a real gateway and worker:
// embeddings, rerank and moderations are 413 (too large for the model:
// shorten or split), a chat prompt too long for the context window stays 400; all
// are context_length_exceeded with the engine's message, and the usage
// row keeps the status.
func TestInputOverModelLimit(t *testing.T) {
	s, key := gateway(t)
	long := strings.Repeat("word ", 1000) // 1,250 tokens to the simulator; sim-embed and sim-rerank take 512
	for _, tc := range []struct {
		path, body string
		status     int
		msg        string
	}{
		{"/v1/embeddings", `{"model":"sim-embed","input":"` + long + `"}`, 413, "input[0] is 1250 tokens, more than the model's maximum context length of 512 tokens"},
		{"/api/v1/embeddings", `{"model":"sim-embed","input":["short","` + long + `"]}`, 413, "input[1] is 1250 tokens"},
		{"/v1/rerank", `{"model":"sim-rerank","query":"q","documents":["a","` + long + `"]}`, 413, "the query and document 1 are 1251 tokens, more than the model's maximum context length of 512 tokens"},
		// sim-small's window is 4,096 tokens: 5,000 tokens get past the
		// gateway's estimate and are refused by the engine.
		{"/v1/chat/completions", chatBody("sim-small", strings.Repeat("abcd", 5000), false), 400, "maximum context length is 4096 tokens"},
		// A moderation's input is the client's to shorten, as an
		// embedding's is.
		{"/v1/moderations", `{"model":"guard-a:8b","input":"` + strings.Repeat("word ", 40000) + `"}`, 413, "longer than the moderation model's context window allows"},
	} {
		r := s.do("POST", tc.path, tc.body, bearer(key))
		if r.Status != tc.status {
			t.Fatalf("POST %s = %d %.300s, want %d", tc.path, r.Status, r.Body, tc.status)
		}
		msg, typ := message(t, r)
		if typ != "context_length_exceeded" || !strings.Contains(msg, tc.msg) {
			t.Fatalf("POST %s: %q %q", tc.path, typ, msg)
		}
		if row := s.usageRow(key, r.Header.Get("X-Request-Id")); row["status_code"] != float64(tc.status) {
			t.Fatalf("POST %s: row %v", tc.path, row)
		}
	}

	// The official client sees the status as sent.
	client := sdk(s, key, "/v1")
	_, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "sim-embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(long)}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 413 || ae.Type != "context_length_exceeded" || ae.Code != "context_length_exceeded" {
		t.Fatalf("sdk embeddings: %v", err)
	}
}
