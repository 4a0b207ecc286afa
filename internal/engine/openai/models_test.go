package openai

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestModels(t *testing.T) {
	chat := []string{api.CapChat, api.CapTools}
	emb := []string{api.CapEmbeddings}
	tests := []struct {
		name    string
		routes  map[string]http.HandlerFunc
		want    []api.Model
		flavour flavour
		props   bool // whether /props should have been asked
	}{
		{
			name:    "vllm max_model_len",
			routes:  map[string]http.HandlerFunc{"/v1/models": jsonHandler(200, vllmModels)},
			want:    []api.Model{{ID: "Qwen/Qwen3-8B", Capabilities: chat, ContextWindow: 32768, Engine: "openai"}},
			flavour: flavourVLLM,
		},
		{
			name: "llama.cpp serving context from props",
			routes: map[string]http.HandlerFunc{
				"/v1/models": jsonHandler(200, llamaModels),
				"/props":     jsonHandler(200, llamaProps),
			},
			want:    []api.Model{{ID: "qwen3-8b-q4_k_m.gguf", Capabilities: chat, ContextWindow: 8192, Engine: "openai"}},
			flavour: flavourLlamaCpp,
			props:   true,
		},
		{
			name: "llama.cpp props failing falls back to n_ctx_train",
			routes: map[string]http.HandlerFunc{
				"/v1/models": jsonHandler(200, llamaModels),
				"/props":     jsonHandler(500, `{"error":{"code":500,"message":"boom","type":"server_error"}}`),
			},
			want:    []api.Model{{ID: "qwen3-8b-q4_k_m.gguf", Capabilities: chat, ContextWindow: 40960, Engine: "openai"}},
			flavour: flavourLlamaCpp,
			props:   true,
		},
		{
			name: "llama.cpp props not JSON",
			routes: map[string]http.HandlerFunc{
				"/v1/models": jsonHandler(200, llamaModels),
				"/props":     jsonHandler(200, `<html>`),
			},
			want:    []api.Model{{ID: "qwen3-8b-q4_k_m.gguf", Capabilities: chat, ContextWindow: 40960, Engine: "openai"}},
			flavour: flavourLlamaCpp,
			props:   true,
		},
		{
			name:   "generic context_length, context_window and embedding heuristic",
			routes: map[string]http.HandlerFunc{"/v1/models": jsonHandler(200, genericModels)},
			want: []api.Model{
				{ID: "my-chat-model", Capabilities: chat, ContextWindow: 16384, Engine: "openai"},
				{ID: "BAAI/bge-m3", Capabilities: emb, ContextWindow: 8192, Engine: "openai"},
				{ID: "odd", Capabilities: chat, ContextWindow: 4096, Engine: "openai"},
			},
			flavour: flavourGeneric,
		},
		{
			name:   "ollama",
			routes: map[string]http.HandlerFunc{"/v1/models": jsonHandler(200, ollamaModels)},
			want: []api.Model{
				{ID: "qwen3:8b", Capabilities: chat, Engine: "openai"},
				{ID: "nomic-embed-text:latest", Capabilities: emb, Engine: "openai"},
			},
			flavour: flavourOllama,
		},
		{
			name:    "sglang",
			routes:  map[string]http.HandlerFunc{"/v1/models": jsonHandler(200, sglangModels)},
			want:    []api.Model{{ID: "Qwen/Qwen3-8B", Capabilities: chat, ContextWindow: 40960, Engine: "openai"}},
			flavour: flavourSGLang,
		},
		{
			name:    "empty list",
			routes:  map[string]http.HandlerFunc{"/v1/models": jsonHandler(200, `{"object":"list","data":[]}`)},
			want:    []api.Model{},
			flavour: flavourGeneric,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, tt.routes)
			e := newEngine(t, f.URL)
			got, err := e.Models(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
			if e.detected() != tt.flavour {
				t.Fatalf("flavour = %v, want %v", e.detected(), tt.flavour)
			}
			asked := 0
			for _, r := range f.requests() {
				if r.Path == "/props" {
					asked++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tt.props]; asked != want {
				t.Fatalf("/props asked %d times, want %d", asked, want)
			}
		})
	}
}

func TestModelsErrors(t *testing.T) {
	tests := map[string]http.HandlerFunc{
		"status":   jsonHandler(401, `{"error":{"message":"Invalid API key","type":"authentication_error"}}`),
		"not json": jsonHandler(200, `not json`),
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"/v1/models": h})
			if got, err := newEngine(t, f.URL).Models(context.Background()); err == nil {
				t.Fatalf("got %v, want error", got)
			}
		})
	}
}

func TestCapabilities(t *testing.T) {
	tests := map[string]bool{ // id: is embedding
		"text-embedding-3-small":                 true,
		"BAAI/bge-large-en-v1.5":                 true,
		"intfloat/multilingual-e5-large":         true,
		"thenlper/GTE-base":                      true,
		"nomic-embed-text:latest":                true,
		"sentence-transformers/all-MiniLM-L6-v2": true,
		"Qwen/Qwen3-Embedding-0.6B":              true,
		"Qwen/Qwen3-8B":                          false,
		"meta-llama/Llama-3.1-8B-Instruct":       false,
		"gpt-oss-20b":                            false,
	}
	for id, isEmb := range tests {
		got := capabilities(id)
		if (len(got) == 1 && got[0] == api.CapEmbeddings) != isEmb {
			t.Errorf("capabilities(%q) = %v", id, got)
		}
	}
}

func TestFlavourOf(t *testing.T) {
	for in, want := range map[string]flavour{
		"vllm": flavourVLLM, "llamacpp": flavourLlamaCpp, "sglang": flavourSGLang,
		"library": flavourOllama, "ollama": flavourOllama, "openai": flavourGeneric, "": flavourGeneric,
	} {
		if got := flavourOf(in); got != want {
			t.Errorf("flavourOf(%q) = %v, want %v", in, got, want)
		}
	}
}
