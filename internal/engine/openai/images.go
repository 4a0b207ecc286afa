package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

const imagesPath = "/v1/images/generations"

// images serves an image generation from /v1/images/generations, which
// OpenAI, vLLM-Omni, LocalAI and stable-diffusion.cpp's sd-server serve.
// The gateway asked for b64_json; the answer goes on as it came, once it
// is checked to be images in that form.
func (e *Engine) images(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	// Partial images (gpt-image's stream) are not relayed: the answer is
	// read whole.
	body, err := unstreamedBody(req.Body, req.Model, "image generation")
	if err != nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
	}
	resp, res := e.post(ctx, imagesPath, body, "application/json")
	if res != nil {
		return unserved(res, imagesPath)
	}
	defer resp.Close()
	b, res := e.readBody(ctx, resp, sink)
	if res != nil {
		return res
	}
	var a struct {
		Data []struct {
			B64JSON json.RawMessage `json:"b64_json"`
			URL     string          `json:"url"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return invalidResponse(fmt.Errorf("decode images answer: %w", err))
	}
	if a.Data == nil {
		if hasError(b) {
			return engine.ErrorResult(errorStatus(b), b)
		}
		return invalidResponse(fmt.Errorf("the images answer has no data"))
	}
	for _, d := range a.Data {
		if !isString(d.B64JSON) {
			if d.URL != "" {
				return engine.Failure(http.StatusBadGateway, api.TypeUpstream,
					"the inference engine answered with image URLs, not the b64_json asked for")
			}
			return invalidResponse(fmt.Errorf("an image without b64_json"))
		}
	}
	if err := sink.Body(ctx, b); err != nil {
		return engine.Cancelled()
	}
	return engine.OK()
}

// unserved makes an engine's 404 for a path it has no route for, as
// vLLM and llama-server answer one, a 501: the engine cannot do it at all.
// A 404 for a model it does not have is kept.
func unserved(res *api.Result, path string) *api.Result {
	if res.Status != http.StatusNotFound || res.Error == nil {
		return res
	}
	switch strings.ToLower(strings.TrimSpace(res.Error.Message)) {
	case "not found", "file not found", "404 page not found", "404 not found":
		return engine.Failure(http.StatusNotImplemented, api.TypeNotSupported, "the inference engine does not serve POST "+path)
	}
	return res
}

func isString(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil && len(raw) > 0 && raw[0] == '"' && s != ""
}
