package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// completionRequest is the part of an OpenAI completions request the
// simulator reads. Sampling switches are accepted and ignored.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *wholeInt       `json:"max_tokens"`
	Seed          *wholeInt       `json:"seed"`
	Stop          json.RawMessage `json:"stop"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
}

// parseCompletionRequest reads a completions body as the chat request it
// amounts to, so that it is checked and planned as chat is: the prompt is
// one user message (directives, seeds, caps and stop sequences work
// alike), and thinking is off, as a raw prompt has no chat template to
// open a thinking block.
func parseCompletionRequest(body []byte) (*chatRequest, error) {
	var in completionRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %w", err)
	}
	var prompt string
	if json.Unmarshal(in.Prompt, &prompt) != nil {
		return nil, errors.New("prompt: want a string")
	}
	asChat, err := json.Marshal(struct {
		Model          string          `json:"model"`
		Messages       []message       `json:"messages"`
		MaxTokens      *wholeInt       `json:"max_tokens,omitempty"`
		Seed           *wholeInt       `json:"seed,omitempty"`
		Stop           json.RawMessage `json:"stop,omitempty"`
		Stream         bool            `json:"stream"`
		StreamOptions  *streamOptions  `json:"stream_options,omitempty"`
		EnableThinking bool            `json:"enable_thinking"`
	}{
		Model:         in.Model,
		Messages:      []message{{Role: "user", Content: in.Prompt}},
		MaxTokens:     in.MaxTokens,
		Seed:          in.Seed,
		Stop:          in.Stop,
		Stream:        in.Stream,
		StreamOptions: in.StreamOptions,
	})
	if err != nil {
		return nil, fmt.Errorf("restate completion as chat: %w", err)
	}
	return parseChatRequest(asChat)
}

// prepareCompletion checks and plans a completions request.
func (s *simulator) prepareCompletion(modelID string, body []byte) (*job, *api.Result) {
	req, err := parseCompletionRequest(body)
	if err != nil {
		return nil, badRequest(err.Error())
	}
	j, fail := s.prepare(modelID, req, nil)
	if fail != nil {
		return nil, fail
	}
	// A fresh id each time, as a chat completion's: the prompt's seed
	// would give every request of the same prompt the same one.
	j.render.id = "cmpl-" + strings.TrimPrefix(s.cfg.ID(), "chatcmpl-")
	j.render.text = true
	return j, nil
}

// textCompletion renders plans as OpenAI's text_completion object.
func (r *renderer) textCompletion(ps []*plan) object {
	choices := make([]object, len(ps))
	for i, p := range ps {
		choices[i] = object{
			{"index", i},
			{"text", p.text(pieceContent)},
			{"logprobs", nil},
			{"finish_reason", p.finish},
		}
	}
	return r.head("text_completion", field{"choices", choices}, field{"usage", usageObject(ps)})
}

func (e *Engine) serveCompletion(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	j, fail := e.sim.prepareCompletion(req.Model, req.Body)
	if fail != nil {
		return fail
	}
	return e.serveJob(ctx, j, req.Stream, sink, j.render.textCompletion)
}

// completions answers POST /v1/completions with one text_completion.
func (h *httpFace) completions(w http.ResponseWriter, r *http.Request) {
	body, fail := readBody(w, r)
	if fail != nil {
		writeError(w, fail)
		return
	}
	j, fail := h.sim.prepareCompletion("", body)
	if fail != nil {
		writeError(w, fail)
		return
	}
	if j.stream {
		h.stream(w, r, j)
	} else {
		h.complete(w, r, j, j.render.textCompletion)
	}
}
