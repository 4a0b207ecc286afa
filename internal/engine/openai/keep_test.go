package openai

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestKeep checks that a model is kept loaded through Ollama's native API
// when the server behind the OpenAI API is Ollama (an embedding model
// through /api/embed), and that servers holding their model from start
// are asked nothing.
func TestKeep(t *testing.T) {
	ctx := context.Background()
	var f *fake
	f = newFake(t, map[string]http.HandlerFunc{
		"/v1/models": jsonHandler(200, ollamaModels),
		"/api/generate": func(w http.ResponseWriter, r *http.Request) {
			if reqs := f.requests(); strings.Contains(string(reqs[len(reqs)-1].Body), "nomic") {
				jsonHandler(400, `{"error":"\"nomic-embed-text:latest\" does not support generate"}`)(w, r)
				return
			}
			jsonHandler(200, `{"model":"qwen3:8b","response":"","done":true,"done_reason":"load","load_duration":2500000000}`)(w, r)
		},
		"/api/embed": jsonHandler(200, `{"model":"nomic-embed-text:latest","embeddings":[],"load_duration":700000000}`),
	})
	e := f.engine(t)
	if _, err := e.Models(ctx); err != nil {
		t.Fatal(err)
	}
	took, err := e.Keep(ctx, "qwen3:8b")
	if err != nil || took != 2500*time.Millisecond {
		t.Fatalf("keep: %s, %v", took, err)
	}
	if g := string(f.last(t, "/api/generate").Body); g != `{"model":"qwen3:8b","keep_alive":-1}` {
		t.Errorf("load sent %s", g)
	}
	if took, err := e.Keep(ctx, "nomic-embed-text:latest"); err != nil || took != 700*time.Millisecond {
		t.Fatalf("keep an embedding model: %s, %v", took, err)
	}
	if g := string(f.last(t, "/api/embed").Body); g != `{"model":"nomic-embed-text:latest","keep_alive":-1}` {
		t.Errorf("embedding model's load sent %s", g)
	}

	vllm := newFake(t, map[string]http.HandlerFunc{"/v1/models": jsonHandler(200, vllmModels)})
	ev := vllm.engine(t)
	if _, err := ev.Models(ctx); err != nil {
		t.Fatal(err)
	}
	if took, err := ev.Keep(ctx, "m"); err != nil || took != 0 {
		t.Errorf("keep on vLLM: %s, %v", took, err)
	}
	for _, r := range vllm.requests() {
		if r.Path != "/v1/models" {
			t.Errorf("vLLM was asked %s", r.Path)
		}
	}
}
