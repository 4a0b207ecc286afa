package ollama

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// generateRequest is Ollama's POST /api/generate body. Raw skips the
// model's template: the prompt is sent as the worker built it.
type generateRequest struct {
	Model   string                     `json:"model"`
	Prompt  string                     `json:"prompt"`
	Raw     bool                       `json:"raw"`
	Stream  bool                       `json:"stream"`
	Options map[string]json.RawMessage `json:"options,omitempty"`
	// KeepAlive is set for a kept model (Engine.Keep).
	KeepAlive *int `json:"keep_alive,omitempty"`
	// Truncate is always sent false: a guard's prompt over the model's
	// context would otherwise lose its front, the policy with it, and the
	// verdict would be on text the guard never read.
	Truncate bool `json:"truncate"`
}

// generateAnswer is the non-streamed answer of /api/generate.
type generateAnswer struct {
	Response           string          `json:"response"`
	DoneReason         string          `json:"done_reason"`
	LoadDuration       int64           `json:"load_duration"`
	PromptEvalCount    int             `json:"prompt_eval_count"`
	PromptEvalDuration int64           `json:"prompt_eval_duration"`
	EvalCount          int             `json:"eval_count"`
	EvalDuration       int64           `json:"eval_duration"`
	Error              json.RawMessage `json:"error"`
}

// OpenAI's text_completion, written to the sink.
type (
	textCompletion struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []textChoice `json:"choices"`
		Usage   usage        `json:"usage"`
	}
	textChoice struct {
		Index        int    `json:"index"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	}
)

// openAICompletion is the part of an OpenAI completions request the
// adapter reads; sampling fields are picked up by name (see options).
type openAICompletion struct {
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens json.RawMessage `json:"max_tokens"`
	Stop      json.RawMessage `json:"stop"`
}

// generate serves a raw completion through /api/generate, answered whole.
func (e *Engine) generate(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if req.Stream {
		// A lasting limitation of this adapter, not of the request: 501.
		return engine.Failure(http.StatusNotImplemented, api.TypeNotSupported,
			"the Ollama engine answers text completions whole; send stream false, or serve the model with an OpenAI-compatible server (svc worker --engine openai=URL)")
	}
	in, err := translateCompletion(req.Body, req.Model)
	if err != nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
	}
	in.KeepAlive = e.keepAlive(in.Model)
	before := e.loadState(in.Model)
	b, res := e.postWhole(ctx, "/api/generate", in, "completion")
	if res != nil {
		return res
	}
	var ans generateAnswer
	if err := json.Unmarshal(b, &ans); err != nil {
		return badAnswer(err)
	}
	if hasError(ans.Error) {
		return engine.ErrorResult(http.StatusInternalServerError, b)
	}
	e.markLoaded(in.Model)

	u := usage{
		PromptTokens:     ans.PromptEvalCount,
		CompletionTokens: ans.EvalCount,
		TotalTokens:      ans.PromptEvalCount + ans.EvalCount,
	}
	finish := finishReason(ans.DoneReason, false)
	out, err := marshal(textCompletion{
		ID:      newID("cmpl-"),
		Object:  "text_completion",
		Created: e.now().Unix(),
		Model:   in.Model,
		Choices: []textChoice{{Text: ans.Response, FinishReason: finish}},
		Usage:   u,
	})
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode completion: "+err.Error())
	}
	if err := sink.Body(ctx, out); err != nil {
		return engine.Cancelled()
	}
	r := engine.OK()
	r.Usage = &api.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	r.FinishReason = finish
	r.Timing = timing(before, ans.LoadDuration, ans.PromptEvalDuration, ans.EvalCount, ans.EvalDuration)
	return r
}

// translateCompletion turns an OpenAI completions request into a raw,
// non-streamed /api/generate request. model, when set, overrides the
// body's.
func translateCompletion(body []byte, model string) (*generateRequest, error) {
	var in openAICompletion
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, badf("invalid completion request: %v", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, badf("invalid completion request: %v", err)
	}
	out := &generateRequest{Model: in.Model, Raw: true}
	if model != "" {
		out.Model = model
	}
	if err := json.Unmarshal(in.Prompt, &out.Prompt); err != nil {
		return nil, badf("prompt: must be a string")
	}
	opts := make(map[string]json.RawMessage)
	for _, o := range options {
		if v := fields[o.from]; present(v) {
			opts[o.to] = v
		}
	}
	if present(in.MaxTokens) {
		opts["num_predict"] = in.MaxTokens
	}
	if present(in.Stop) {
		stop, err := stopList(in.Stop)
		if err != nil {
			return nil, err
		}
		opts["stop"] = stop
	}
	if len(opts) > 0 {
		out.Options = opts
	}
	return out, nil
}
