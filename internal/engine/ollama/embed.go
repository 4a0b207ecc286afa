package ollama

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// embedRequest is Ollama's POST /api/embed body.
type embedRequest struct {
	Model      string `json:"model"`
	Input      any    `json:"input"` // a string or []string
	Dimensions *int   `json:"dimensions,omitempty"`
	// KeepAlive is set for a kept model (Engine.Keep).
	KeepAlive *int `json:"keep_alive,omitempty"`
	// Truncate is always sent false: by default Ollama embeds the start of
	// an input over the model's limit as if it were the whole; refused, it
	// is the client's 413 context_length_exceeded.
	Truncate bool `json:"truncate"`
}

type embedAnswer struct {
	// Embeddings stay raw so that float vectors pass through unchanged.
	Embeddings      []json.RawMessage `json:"embeddings"`
	LoadDuration    int64             `json:"load_duration"`
	PromptEvalCount int               `json:"prompt_eval_count"`
	Error           json.RawMessage   `json:"error"`
}

type (
	embeddingList struct {
		Object string      `json:"object"`
		Data   []embedding `json:"data"`
		Model  string      `json:"model"`
		Usage  embedUsage  `json:"usage"`
	}
	embedding struct {
		Object string `json:"object"`
		Index  int    `json:"index"`
		// Embedding is a JSON array of floats, or a base64 string when
		// the client asked for encoding_format "base64".
		Embedding json.RawMessage `json:"embedding"`
	}
	embedUsage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}
)

// embed serves an embeddings request through /api/embed.
func (e *Engine) embed(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	in, base64Out, err := translateEmbed(req.Body, req.Model)
	if err != nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
	}
	in.KeepAlive = e.keepAlive(in.Model)
	before := e.loadState(in.Model)
	b, res := e.postWhole(ctx, "/api/embed", in, "embeddings")
	if res != nil {
		return res
	}
	var ans embedAnswer
	if err := json.Unmarshal(b, &ans); err != nil {
		return badAnswer(err)
	}
	if hasError(ans.Error) {
		return engine.ErrorResult(http.StatusInternalServerError, b)
	}
	e.markLoaded(in.Model)

	out := embeddingList{
		Object: "list",
		Data:   make([]embedding, len(ans.Embeddings)),
		Model:  in.Model,
		Usage:  embedUsage{PromptTokens: ans.PromptEvalCount, TotalTokens: ans.PromptEvalCount},
	}
	for i, v := range ans.Embeddings {
		if base64Out {
			if v, err = base64Vector(v); err != nil {
				return badAnswer(fmt.Errorf("embedding %d: %w", i, err))
			}
		}
		out.Data[i] = embedding{Object: "embedding", Index: i, Embedding: v}
	}
	body, err := marshal(out)
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode embeddings: "+err.Error())
	}
	if err := sink.Body(ctx, body); err != nil {
		return engine.Cancelled()
	}
	r := engine.OK()
	r.Usage = &api.Usage{PromptTokens: ans.PromptEvalCount, TotalTokens: ans.PromptEvalCount}
	r.Timing = timing(before, ans.LoadDuration, 0, 0, 0)
	return r
}

// translateEmbed reads an OpenAI embeddings request. Ollama takes text
// only: token-array inputs are refused.
func translateEmbed(body []byte, model string) (*embedRequest, bool, error) {
	var in struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		Dimensions     *int            `json:"dimensions"`
		EncodingFormat string          `json:"encoding_format"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, false, badf("invalid embeddings request: %v", err)
	}
	out := &embedRequest{Model: in.Model, Dimensions: in.Dimensions}
	if model != "" {
		out.Model = model
	}
	var one string
	var many []string
	switch {
	case !present(in.Input):
		return nil, false, badf("input is required")
	case json.Unmarshal(in.Input, &one) == nil:
		out.Input = one
	case json.Unmarshal(in.Input, &many) == nil:
		if len(many) == 0 {
			return nil, false, badf("input must not be empty")
		}
		out.Input = many
	default:
		return nil, false, badf("the Ollama engine embeds text only: input must be a string or an array of strings, not tokens")
	}
	switch in.EncodingFormat {
	case "", "float":
		return out, false, nil
	case "base64":
		return out, true, nil
	}
	return nil, false, badf("encoding_format must be float or base64")
}

// base64Vector encodes a JSON float array as OpenAI's base64 format:
// little-endian float32s.
func base64Vector(raw json.RawMessage) (json.RawMessage, error) {
	var v []float32
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	buf := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
	}
	return json.Marshal(base64.StdEncoding.EncodeToString(buf))
}
