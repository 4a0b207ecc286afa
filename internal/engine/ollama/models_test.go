package ollama

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

const (
	showLlama = `{"capabilities":["completion","tools","insert"],
		"model_info":{"general.architecture":"llama","llama.context_length":131072,"llama.embedding_length":3072},
		"parameters":"stop                           \"<|eot_id|>\"\ntemperature                    0.6\ntop_p                          0.9\ntop_k                          40\nmin_p                          0.05\nrepeat_penalty                 1.1\nnum_ctx                        8192"}`
	showQwen = `{"capabilities":["completion","thinking","tools","vision"],
		"model_info":{"qwen3.context_length":40960},"parameters":"temperature 0.6\ntop_p 0.95"}`
	showOld = `{"model_info":{"phi3.context_length":4096},"parameters":""}`
)

func TestModels(t *testing.T) {
	f := newFake(t)
	f.tags = []fakeModel{
		{name: "llama3.2:latest", digest: "d1", show: showLlama},
		{name: "qwen3:8b", digest: "d2", show: showQwen},
		{name: "nomic-embed-text:latest", digest: "d3"}, // show fails
		{name: "phi3:latest", digest: "d4", show: showOld},
	}
	f.ps = []string{"llama3.2:latest"}
	e := f.engine(t)

	got, err := e.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []api.Model{
		{
			// Trained for 131072 tokens, run with its Modelfile's num_ctx.
			ID: "llama3.2:latest", Capabilities: []string{"chat", "tools"}, ContextWindow: 8192,
			SamplingDefaults: map[string]float64{"temperature": 0.6, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1},
			Engine:           "ollama", Loaded: ptr(true),
		},
		{
			ID: "qwen3:8b", Capabilities: []string{"chat", "reasoning", "tools", "vision"}, ContextWindow: 40960,
			SamplingDefaults: map[string]float64{"temperature": 0.6, "top_p": 0.95},
			DefaultThinking:  ptr(true), Engine: "ollama", Loaded: ptr(false),
		},
		{ID: "nomic-embed-text:latest", Capabilities: []string{"embeddings"}, Engine: "ollama", Loaded: ptr(false)},
		{ID: "phi3:latest", Capabilities: []string{"chat"}, ContextWindow: 4096, Engine: "ollama", Loaded: ptr(false)},
	}
	if g, w := jsonOf(t, got), jsonOf(t, want); g != w {
		t.Fatalf("models:\n got %s\nwant %s", g, w)
	}
	if s := e.loadState("llama3.2"); !s.known || !s.loaded {
		t.Fatalf("loaded set after Models: %+v", s)
	}

	// A second listing reuses the cached /api/show answers, asks again
	// for the one that failed, and refreshes a model whose digest changed.
	got[0].Capabilities[0] = "mutated" // callers may change what they get
	f.mu.Lock()
	f.tags[1].digest = "d2-new"
	f.ps = nil
	f.mu.Unlock()
	got, err = e.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	hits := map[string]int{}
	for k, v := range f.showHits {
		hits[k] = v
	}
	f.mu.Unlock()
	wantHits := map[string]int{"llama3.2:latest": 1, "qwen3:8b": 2, "nomic-embed-text:latest": 2, "phi3:latest": 1}
	if jsonOf(t, hits) != jsonOf(t, wantHits) {
		t.Fatalf("show calls = %v, want %v", hits, wantHits)
	}
	if got[0].Capabilities[0] != "chat" || *got[0].Loaded {
		t.Fatalf("second listing: %+v", got[0])
	}
	if s := e.loadState("llama3.2:latest"); s.loaded {
		t.Fatal("loaded set not refreshed from /api/ps")
	}
}

// Ollama cuts a prompt longer than the context it loaded a model with,
// without a word, so that context is the window offered: as /api/ps
// reports it once the model was loaded, and still after it is unloaded;
// the Modelfile's num_ctx before that; what the model was trained for
// when neither says.
func TestModelsContextIsWhatOllamaRunsWith(t *testing.T) {
	f := newFake(t)
	f.tags = []fakeModel{
		{name: "llama3.2:latest", digest: "d1", show: showLlama}, // num_ctx 8192
		{name: "qwen3:8b", digest: "d2", show: showQwen},         // trained 40960
		{name: "phi3:latest", digest: "d4", show: showOld},       // trained 4096
	}
	e := f.engine(t)
	windows := func() map[string]int {
		t.Helper()
		got, err := e.Models(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, m := range got {
			out[m.ID] = m.ContextWindow
		}
		return out
	}
	want := map[string]int{"llama3.2:latest": 8192, "qwen3:8b": 40960, "phi3:latest": 4096}
	if got := windows(); jsonOf(t, got) != jsonOf(t, want) {
		t.Fatalf("before any load: %v, want %v", got, want)
	}
	f.mu.Lock()
	f.ps = []string{"llama3.2:latest", "qwen3:8b", "phi3:latest"}
	f.psContexts = map[string]int{"llama3.2:latest": 4096, "qwen3:8b": 32768, "phi3:latest": 32768}
	f.mu.Unlock()
	want = map[string]int{"llama3.2:latest": 4096, "qwen3:8b": 32768, "phi3:latest": 4096}
	if got := windows(); jsonOf(t, got) != jsonOf(t, want) {
		t.Fatalf("loaded: %v, want %v (no more than trained)", got, want)
	}
	f.mu.Lock()
	f.ps, f.psContexts = nil, nil
	f.mu.Unlock()
	if got := windows(); jsonOf(t, got) != jsonOf(t, want) {
		t.Fatalf("unloaded: %v, want the contexts last loaded with, %v", got, want)
	}
}

func TestModelsLoadedUnknownWhenPSFails(t *testing.T) {
	f := newFake(t)
	f.tags = []fakeModel{{name: "llama3.2:latest", digest: "d1", show: showLlama}}
	f.psFail = true
	e := f.engine(t)
	got, err := e.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Loaded != nil {
		t.Fatalf("got %+v, want Loaded unset", got)
	}
	if e.loadState("llama3.2").known {
		t.Fatal("loaded set marked known after a failed /api/ps")
	}
}

func TestModelsTagsFailure(t *testing.T) {
	srv := newFake(t).srv
	srv.Close()
	e, err := New(Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Models(context.Background()); err == nil || !strings.Contains(err.Error(), "ollama: list models") {
		t.Fatalf("err = %v", err)
	}
}

func TestSamplingDefaults(t *testing.T) {
	tests := []struct {
		params string
		want   map[string]float64
	}{
		{"", nil},
		{"stop \"<|im_end|>\"\nnum_ctx 4096", nil},
		{"temperature 0.7\ntop_k 20\nmin_p 0\n", map[string]float64{"temperature": 0.7, "top_k": 20, "min_p": 0}},
		{"temperature abc\nrepeat_penalty\t1.05", map[string]float64{"repeat_penalty": 1.05}},
	}
	for _, tt := range tests {
		if got := samplingDefaults(tt.params); jsonOf(t, got) != jsonOf(t, tt.want) {
			t.Errorf("samplingDefaults(%q) = %v, want %v", tt.params, got, tt.want)
		}
	}
}

func TestNewAndInfo(t *testing.T) {
	for _, bad := range []string{"", "localhost:11434", "ftp://x", "http://"} {
		if _, err := New(Config{BaseURL: bad}); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
	e, err := New(Config{BaseURL: "http://127.0.0.1:11434/"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Kind() != "ollama" || e.Info() != (api.EngineInfo{Kind: "ollama", URL: "http://127.0.0.1:11434"}) {
		t.Fatalf("Kind %q Info %+v", e.Kind(), e.Info())
	}
	if e.client.Timeout != 0 || e.client.Transport.(*http.Transport).Proxy != nil {
		t.Fatal("default client must have no overall timeout and no proxy")
	}
}

func TestModelKey(t *testing.T) {
	for in, want := range map[string]string{
		"llama3":                        "llama3:latest",
		"llama3:latest":                 "llama3:latest",
		"Qwen3:8B":                      "qwen3:8b",
		"registry.local:5000/org/model": "registry.local:5000/org/model:latest",
		"hf.co/org/model:Q4_K_M":        "hf.co/org/model:q4_k_m",
	} {
		if got := ModelKey(in); got != want {
			t.Errorf("ModelKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLoadedSet checks that a /api/ps answer replaces the loaded set but
// keeps models served while it was being asked for.
func TestLoadedSet(t *testing.T) {
	e, err := New(Config{BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if s := e.loadState("a"); s.known || s.loaded {
		t.Fatalf("fresh engine: %+v", s)
	}
	e.markLoaded("a")
	since := e.lastMark()
	e.markLoaded("b") // served after /api/ps was asked
	e.setLoaded(map[string]bool{"c:latest": true}, since)
	for model, want := range map[string]bool{"a": false, "b": true, "c": true, "d": false} {
		if s := e.loadState(model); !s.known || s.loaded != want {
			t.Errorf("%s: %+v, want loaded=%v", model, s, want)
		}
	}
}
