package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/svc-dev/svc/internal/api"
)

// modelEntry is one data[] entry of /v1/models, with the context-window
// fields each engine uses.
type modelEntry struct {
	ID      string `json:"id"`
	OwnedBy string `json:"owned_by"`
	// MaxModelLen is vLLM's serving context.
	MaxModelLen flexInt `json:"max_model_len"`
	// Meta is llama.cpp's; n_ctx_train is what the model was trained on,
	// not what the server was started with (see /props).
	Meta *struct {
		NCtxTrain flexInt `json:"n_ctx_train"`
	} `json:"meta"`
	ContextLength flexInt `json:"context_length"`
	ContextWindow flexInt `json:"context_window"`
}

func (m *modelEntry) contextWindow() int {
	switch {
	case m.MaxModelLen > 0:
		return int(m.MaxModelLen)
	case m.Meta != nil && m.Meta.NCtxTrain > 0:
		return int(m.Meta.NCtxTrain)
	case m.ContextLength > 0:
		return int(m.ContextLength)
	default:
		return int(m.ContextWindow)
	}
}

// Models lists the models the server has loaded, from GET /v1/models. It
// also records which engine the server is, from owned_by.
func (e *Engine) Models(ctx context.Context) ([]api.Model, error) {
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := e.getJSON(ctx, "/v1/models", &list); err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	models := make([]api.Model, 0, len(list.Data))
	fl, llamaCpp, simulated := flavourGeneric, 0, false
	for _, raw := range list.Data {
		var entry modelEntry
		// One odd entry should not hide the others.
		if json.Unmarshal(raw, &entry) != nil || entry.ID == "" {
			continue
		}
		f := flavourOf(entry.OwnedBy)
		if fl == flavourGeneric {
			fl = f
		}
		if f == flavourLlamaCpp {
			llamaCpp++
		}
		// svc sim names itself: its models are simulated however they
		// are reached.
		sim := strings.EqualFold(entry.OwnedBy, "svc-sim")
		simulated = simulated || sim
		models = append(models, api.Model{
			ID:            entry.ID,
			Capabilities:  capabilities(entry.ID),
			ContextWindow: entry.contextWindow(),
			Engine:        "openai",
			Simulated:     sim,
		})
	}
	e.flavour.Store(uint32(fl))
	e.simulated.Store(simulated)
	// llama-server's /props has the context it actually serves per slot.
	// It describes the one loaded model, so it is only used when there is
	// exactly one: a router serving several would answer for none of them.
	if llamaCpp == 1 && len(models) == 1 {
		if n := e.servingContext(ctx); n > 0 {
			models[0].ContextWindow = n
		}
	}
	return models, nil
}

// servingContext is llama.cpp's default_generation_settings.n_ctx from
// /props, or 0 when it cannot be had: the trained context from /v1/models
// is still a usable answer.
func (e *Engine) servingContext(ctx context.Context) int {
	var props struct {
		DefaultGenerationSettings struct {
			NCtx flexInt `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if e.getJSON(ctx, "/props", &props) != nil {
		return 0
	}
	return int(props.DefaultGenerationSettings.NCtx)
}

// getJSON decodes the JSON answer to GET path into v.
func (e *Engine) getJSON(ctx context.Context, path string, v any) error {
	resp, err := e.client.do(ctx, &request{method: http.MethodGet, path: path, accept: "application/json"})
	if err != nil {
		return err
	}
	defer resp.Close()
	if resp.status >= http.StatusBadRequest {
		r := errorResponse(ctx, resp)
		return fmt.Errorf("GET %s: status %d: %s", path, resp.status, r.Error.Message)
	}
	b, err := readLimited(resp, maxMetaBody)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// capabilities guesses what a model does from its name: /v1/models does
// not say, and sending chat to an embedding model fails on every engine.
// The hints match whisper-*, gpt-4o-transcribe, parakeet-* and canary-*
// (speech to text); tts-1, Kokoro-*, piper-*, orpheus-* and XTTS-* (text
// to speech); bge-reranker-*, jina-reranker-*, Qwen3-Reranker-* and
// ms-marco cross-encoders (reranking, before the embedding hints, which
// bge-reranker would match too); stable-diffusion-*, sdxl-*, sd3*,
// FLUX.*, dall-e-* and any name with "image" in it, such as gpt-image-1,
// Qwen-Image and Z-Image-Turbo (image generation); and
// text-embedding-*, nomic-embed-*, bge-*, multilingual-e5-*, gte-* and
// all-MiniLM-*. Speech models list no voices: only --model-meta can tell
// them.
func capabilities(id string) []string {
	lower := strings.ToLower(id)
	hints := []struct {
		caps  []string
		words []string
	}{
		{[]string{api.CapTranscription}, []string{"whisper", "stt", "transcribe", "parakeet", "canary"}},
		{[]string{api.CapSpeech}, []string{"tts", "kokoro", "piper", "speech", "orpheus", "xtts"}},
		{[]string{api.CapRerank}, []string{"rerank", "cross-encoder", "ms-marco"}},
		{[]string{api.CapImageGeneration}, []string{"stable-diffusion", "sdxl", "sd3", "flux.", "flux-", "dall-e", "image"}},
		{[]string{api.CapEmbeddings}, []string{"embed", "bge", "e5-", "gte", "minilm"}},
	}
	for _, h := range hints {
		for _, w := range h.words {
			if strings.Contains(lower, w) {
				return h.caps
			}
		}
	}
	return []string{api.CapChat, api.CapTools}
}
