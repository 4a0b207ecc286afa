package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
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
	name, _ := json.Marshal(model) // a string always marshals
	body := fmt.Appendf(nil, `{"model":%s,"keep_alive":-1}`, name)
	took, res := e.load(ctx, "/api/generate", body)
	if res != nil && res.Status == http.StatusBadRequest && res.Error != nil && strings.Contains(res.Error.Message, "does not support generate") {
		took, res = e.load(ctx, "/api/embed", body)
	}
	if res != nil {
		msg := http.StatusText(res.Status)
		if res.Error != nil {
			msg = res.Error.Message
		}
		return 0, fmt.Errorf("keep %s loaded: Ollama answered %d: %s", model, res.Status, msg)
	}
	return took, nil
}

// load posts body to Ollama's path and returns the load's time it reports.
func (e *Engine) load(ctx context.Context, path string, body []byte) (time.Duration, *api.Result) {
	resp, res := e.post(ctx, path, body, "application/json")
	if res != nil {
		return 0, res
	}
	defer resp.Close()
	b, err := readLimited(resp, maxKeepAnswer)
	if err != nil {
		return 0, engine.Unreachable(err)
	}
	var out struct {
		LoadDuration int64 `json:"load_duration"`
	}
	_ = json.Unmarshal(b, &out)
	return time.Duration(out.LoadDuration), nil
}
