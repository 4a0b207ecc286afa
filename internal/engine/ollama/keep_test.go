package ollama

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestKeep checks that a kept model is loaded without a prompt and that
// every request for it from then on asks Ollama to keep it for good, so
// that no request resets it to Ollama's idle timeout.
func TestKeep(t *testing.T) {
	f := newFake(t)
	e := f.engine(t)
	ctx := context.Background()

	d, err := e.Keep(ctx, "llama3")
	if err != nil {
		t.Fatal(err)
	}
	if d != 3*time.Millisecond {
		t.Errorf("load took %s, want the answer's 3ms", d)
	}
	if g, want := jsonOf(t, f.last(t, "/api/generate")), `{"keep_alive":-1,"model":"llama3"}`; g != want {
		t.Errorf("load sent %s, want %s", g, want)
	}
	if s := e.loadState("llama3:latest"); !s.loaded {
		t.Error("a kept model is not marked loaded")
	}

	for _, tt := range []struct {
		model string
		want  any // keep_alive sent
	}{{"llama3", float64(-1)}, {"LLAMA3:latest", float64(-1)}, {"other", nil}} {
		if r := e.Serve(ctx, chatReq(tt.model, false, ""), &recordSink{}); r.Status != 200 {
			t.Fatalf("%s: %d %+v", tt.model, r.Status, r.Error)
		}
		if g := f.last(t, "/api/chat")["keep_alive"]; g != tt.want {
			t.Errorf("chat of %s sent keep_alive %v, want %v", tt.model, g, tt.want)
		}
	}

	// A model that only embeds refuses /api/generate: it is loaded
	// through /api/embed, and its embeddings keep it too.
	if _, err := e.Keep(ctx, "embedder"); err != nil {
		t.Fatal(err)
	}
	if g, want := jsonOf(t, f.last(t, "/api/embed")), `{"keep_alive":-1,"model":"embedder"}`; g != want {
		t.Errorf("embedder's load sent %s, want %s", g, want)
	}
	req := embedReq(`{"model":"embedder","input":"hi"}`)
	req.Model = "embedder"
	if r := e.Serve(ctx, req, &recordSink{}); r.Status != 200 {
		t.Fatalf("embed: %d %+v", r.Status, r.Error)
	}
	if g := f.last(t, "/api/embed")["keep_alive"]; g != float64(-1) {
		t.Errorf("embeddings of a kept model sent keep_alive %v", g)
	}

	if _, err := e.Keep(ctx, "missing"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("keeping a model Ollama lacks: %v", err)
	}
}

// TestKeepLoadedAlready checks that a model /api/ps lists as loaded is
// kept at no load time.
func TestKeepLoadedAlready(t *testing.T) {
	f := newFake(t)
	f.ps = []string{"llama3:latest"}
	e := f.engine(t)
	e.setLoaded(map[string]bool{"llama3:latest": true}, e.lastMark())
	d, err := e.Keep(context.Background(), "llama3")
	if err != nil || d != 0 {
		t.Errorf("got %s, %v; want 0 for a loaded model", d, err)
	}
}

// Ollama answers a load without a prompt with no timings: the call's time
// is the load's when the model was known not to be loaded, and none is
// reported when its state was unknown.
func TestKeepTimesALoadWithoutTimings(t *testing.T) {
	f := newFake(t)
	e := f.engine(t)
	if d, err := e.Keep(context.Background(), "loadonly"); err != nil || d != 0 {
		t.Errorf("state unknown: %s, %v; want no load reported", d, err)
	}
	e = f.engine(t)
	e.setLoaded(map[string]bool{}, e.lastMark())
	if d, err := e.Keep(context.Background(), "loadonly"); err != nil || d <= 0 {
		t.Errorf("known unloaded: %s, %v; want the call's time", d, err)
	}
}
