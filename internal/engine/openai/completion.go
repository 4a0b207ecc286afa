package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

const completionsPath = "/v1/completions"

// completion serves a raw text completion: the prompt reaches the model as
// it is, with no chat template around it, which is how the worker sends a
// guard the exact prompt it was trained on and how POST /v1/completions is
// served. The answer is normalised as a chat completion's is: usage
// captured, engine statistics removed, streamed or whole.
func (e *Engine) completion(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if e.detected() == flavourOllama {
		// Ollama's /v1/completions puts the prompt through the model's
		// template, so a guard would judge its own prompt wrapped in
		// another and answer for the wrapper.
		return engine.Failure(http.StatusNotImplemented, api.TypeNotSupported,
			"Ollama's OpenAI API applies the chat template to completion prompts; run the worker with --engine ollama to send raw prompts")
	}
	body, err := completionBody(req.Body, req.Model)
	if err != nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
	}
	if req.Stream {
		// Streamed with usage, whatever the client asked: usage is how the
		// worker accounts, and the gateway writes the client's usage chunk.
		if body, err = streamBody(body); err != nil {
			return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
		}
		return e.relayStream(ctx, completionsPath, body, &stream{sink: sink, st: stats{start: time.Now()}, text: true})
	}
	resp, res := e.post(ctx, completionsPath, body, "application/json")
	if res != nil {
		return res
	}
	defer resp.Close()
	b, res := e.readBody(ctx, resp, sink)
	if res != nil {
		return res
	}
	var st stats
	out, res := normaliseCompletion(validUTF8(b), &st)
	if res != nil {
		return res
	}
	if err := sink.Body(ctx, out); err != nil {
		return engine.Cancelled()
	}
	return st.result()
}

// completionBody is the request as the gateway sent it, with the engine's
// own name for the model and without the streaming switches: the answer
// is read whole whatever the body said.
func completionBody(body []byte, model string) ([]byte, error) {
	return unstreamedBody(body, model, "completion")
}

// unstreamedBody is completionBody for a request of any kind (what names
// it in errors).
func unstreamedBody(body []byte, model, what string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("invalid %s request: %w", what, err)
	}
	if m == nil {
		return nil, fmt.Errorf("invalid %s request: not a JSON object", what)
	}
	if model != "" {
		name, err := json.Marshal(model)
		if err != nil {
			return nil, fmt.Errorf("encode model name: %w", err)
		}
		m["model"] = name
	}
	delete(m, "stream")
	delete(m, "stream_options")
	return encodeObject(m), nil
}
