package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/engine/ollama"
)

var _ engine.Keeper = (*Engine)(nil)

// maxKeepAnswer bounds the answer to a load: a few fields.
const maxKeepAnswer = 1 << 16

// Keep keeps model loaded on a server that loads models on demand and
// unloads idle ones. Of the servers behind the OpenAI API only Ollama
// does: vLLM, SGLang and llama-server hold what they were started with,
// and keeping takes nothing. Ollama is asked through its native API, as
// the ollama engine asks it: an empty /api/generate, or /api/embed for a
// model that only embeds, with keep_alive -1. Its OpenAI API sends no
// keep_alive, which leaves a loaded model's as it is.
func (e *Engine) Keep(ctx context.Context, model string) (time.Duration, error) {
	if e.detected() != flavourOllama {
		return 0, nil
	}
	// Asked even of a loaded model: one that a request through the OpenAI
	// API loaded again, after a restart or an eviction, has Ollama's idle
	// timeout, and is kept for good only once asked. Whether it was
	// loaded says whether this was a load.
	loaded, known := e.ollamaLoaded(ctx, model)
	name, _ := json.Marshal(model) // a string always marshals
	body := fmt.Appendf(nil, `{"model":%s,"keep_alive":%d}`, name, ollama.KeepForever)
	start := time.Now()
	res := e.load(ctx, "/api/generate", body)
	if res != nil && res.Error != nil && ollama.EmbedsOnly(res.Status, res.Error.Message) {
		res = e.load(ctx, "/api/embed", body)
	}
	if res != nil {
		msg := http.StatusText(res.Status)
		if res.Error != nil {
			msg = res.Error.Message
		}
		return 0, fmt.Errorf("keep %s loaded: Ollama answered %d: %s", model, res.Status, msg)
	}
	if loaded || !known {
		// Unknown is no load: the worker keeps such a model again at
		// every listing, and reports only loads.
		return 0, nil
	}
	// Ollama's answer to a load without a prompt carries no timings: the
	// call's own time is the load's.
	return time.Since(start), nil
}

// load posts body to Ollama's path, for a load without a prompt.
func (e *Engine) load(ctx context.Context, path string, body []byte) *api.Result {
	resp, res := e.post(ctx, path, body, "application/json")
	if res != nil {
		return res
	}
	defer resp.Close()
	if _, err := readLimited(resp, maxKeepAnswer); err != nil {
		return engine.Unreachable(err)
	}
	return nil
}

// ollamaLoaded reports whether Ollama's /api/ps lists model as loaded,
// and whether it answered.
func (e *Engine) ollamaLoaded(ctx context.Context, model string) (loaded, known bool) {
	resp, res := e.do(ctx, &request{method: http.MethodGet, path: "/api/ps", accept: "application/json"})
	if res != nil {
		return false, false
	}
	defer resp.Close()
	b, err := readLimited(resp, maxKeepAnswer)
	if err != nil {
		return false, false
	}
	var ps struct {
		Models []struct {
			Name  string `json:"name"`
			Model string `json:"model"`
		} `json:"models"`
	}
	if json.Unmarshal(b, &ps) != nil {
		return false, false
	}
	want := ollama.ModelKey(model)
	for _, m := range ps.Models {
		if ollama.ModelKey(m.Name) == want || ollama.ModelKey(m.Model) == want {
			return true, true
		}
	}
	return false, true
}
