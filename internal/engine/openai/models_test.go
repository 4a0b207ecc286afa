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
			name:    "svc sim, which is labelled",
			routes:  map[string]http.HandlerFunc{"/v1/models": jsonHandler(200, `{"object":"list","data":[{"id":"sim-chat","object":"model","created":0,"owned_by":"svc-sim"}]}`)},
			want:    []api.Model{{ID: "sim-chat", Capabilities: chat, Engine: "openai", Simulated: true}},
			flavour: flavourGeneric,
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
			if sim := len(tt.want) > 0 && tt.want[0].Simulated; e.Info().Simulated != sim {
				t.Fatalf("engine info simulated = %v, want %v", e.Info().Simulated, sim)
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
	chat := []string{api.CapChat, api.CapTools}
	emb := []string{api.CapEmbeddings}
	stt := []string{api.CapTranscription}
	tts := []string{api.CapSpeech}
	rr := []string{api.CapRerank}
	img := []string{api.CapImageGeneration}
	tests := map[string][]string{
		"text-embedding-3-small":                    emb,
		"BAAI/bge-large-en-v1.5":                    emb,
		"intfloat/multilingual-e5-large":            emb,
		"thenlper/GTE-base":                         emb,
		"nomic-embed-text:latest":                   emb,
		"sentence-transformers/all-MiniLM-L6-v2":    emb,
		"Qwen/Qwen3-Embedding-0.6B":                 emb,
		"Qwen/Qwen3-8B":                             chat,
		"meta-llama/Llama-3.1-8B-Instruct":          chat,
		"gpt-oss-20b":                               chat,
		"mistralai/Mistral-Small-3.2-24B":           chat,
		"whisper-1":                                 stt,
		"Systran/faster-whisper-large-v3":           stt,
		"ggml-large-v3-turbo.bin (whisper.cpp)":     stt,
		"gpt-4o-mini-transcribe":                    stt,
		"nvidia/parakeet-tdt-0.6b-v2":               stt,
		"nvidia/canary-1b-flash":                    stt,
		"sim-stt":                                   stt,
		"tts-1-hd":                                  tts,
		"gpt-4o-mini-tts":                           tts,
		"hexgrad/Kokoro-82M":                        tts,
		"speaches-ai/piper-en_US-amy-low":           tts,
		"canopylabs/orpheus-3b-0.1-ft":              tts,
		"coqui/XTTS-v2":                             tts,
		"microsoft/VibeVoice-speech-1.5B":           tts,
		"sim-tts":                                   tts,
		"BAAI/bge-reranker-v2-m3":                   rr,
		"jinaai/jina-reranker-v2-base-multilingual": rr,
		"Qwen/Qwen3-Reranker-0.6B":                  rr,
		"cross-encoder/ms-marco-MiniLM-L6-v2":       rr,
		"sim-rerank":                                rr,
		"stabilityai/stable-diffusion-xl-base-1.0":  img,
		"sd3.5_medium.safetensors":                  img,
		"black-forest-labs/FLUX.1-schnell":          img,
		"flux-dev":                                  img,
		"gpt-image-1":                               img,
		"dall-e-3":                                  img,
		"Qwen/Qwen-Image":                           img,
		"Tongyi-MAI/Z-Image-Turbo":                  img,
		"sim-image":                                 img,
		"Qwen/Qwen2.5-VL-7B-Instruct":               chat,
	}
	for id, want := range tests {
		if got := capabilities(id); !reflect.DeepEqual(got, want) {
			t.Errorf("capabilities(%q) = %v, want %v", id, got, want)
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
