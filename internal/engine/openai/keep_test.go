package openai

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
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
	var ps atomic.Value
	ps.Store(`{"models":[]}`)
	f = newFake(t, map[string]http.HandlerFunc{
		"/v1/models": jsonHandler(200, ollamaModels),
		"/api/ps":    func(w http.ResponseWriter, r *http.Request) { jsonHandler(200, ps.Load().(string))(w, r) },
		"/api/generate": func(w http.ResponseWriter, r *http.Request) {
			if reqs := f.requests(); strings.Contains(string(reqs[len(reqs)-1].Body), "nomic") {
				jsonHandler(400, `{"error":"\"nomic-embed-text:latest\" does not support generate"}`)(w, r)
				return
			}
			// As Ollama answers a load without a prompt: no timings.
			time.Sleep(20 * time.Millisecond)
			jsonHandler(200, `{"model":"qwen3:8b","created_at":"2026-01-01T00:00:00Z","response":"","done":true,"done_reason":"load"}`)(w, r)
		},
		"/api/embed": jsonHandler(200, `{"model":"nomic-embed-text:latest","embeddings":[]}`),
	})
	e := f.engine(t)
	if _, err := e.Models(ctx); err != nil {
		t.Fatal(err)
	}
	took, err := e.Keep(ctx, "qwen3:8b")
	if err != nil || took < 20*time.Millisecond {
		t.Fatalf("keep: %s, %v; want the load's time", took, err)
	}
	if g := string(f.last(t, "/api/generate").Body); g != `{"model":"qwen3:8b","keep_alive":-1}` {
		t.Errorf("load sent %s", g)
	}
	// Loaded already (by a request through the OpenAI API, say): asked
	// again, for keep_alive, and no load is reported.
	ps.Store(`{"models":[{"name":"qwen3:8b","model":"qwen3:8b"}]}`)
	before := len(f.requests())
	if took, err := e.Keep(ctx, "qwen3:8b"); err != nil || took != 0 {
		t.Fatalf("keep a loaded model: %s, %v", took, err)
	}
	if reqs := f.requests()[before:]; len(reqs) != 2 || reqs[0].Path != "/api/ps" || reqs[1].Path != "/api/generate" {
		t.Errorf("a loaded model was not asked to stay: %v", reqs)
	}
	if _, err := e.Keep(ctx, "nomic-embed-text"); err != nil {
		t.Fatalf("keep an embedding model: %v", err)
	}
	if g := string(f.last(t, "/api/embed").Body); g != `{"model":"nomic-embed-text","keep_alive":-1}` {
		t.Errorf("embedding model's load sent %s", g)
	}

	// An Ollama whose /api/ps does not answer is asked to keep the model,
	// and no load is reported: the worker asks again at every listing.
	nops := newFake(t, map[string]http.HandlerFunc{
		"/v1/models":    jsonHandler(200, ollamaModels),
		"/api/generate": jsonHandler(200, `{"model":"qwen3:8b","response":"","done":true,"done_reason":"load"}`),
	})
	en := nops.engine(t)
	if _, err := en.Models(ctx); err != nil {
		t.Fatal(err)
	}
	if took, err := en.Keep(ctx, "qwen3:8b"); err != nil || took != 0 {
		t.Errorf("keep without /api/ps: %s, %v", took, err)
	}
	nops.last(t, "/api/generate")

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
