package openai

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/rerank"
)

const rerankPath = "/v1/rerank"

// rerank serves a rerank request from /v1/rerank, which vLLM and
// llama-server (started with --reranking) serve. The documents go as
// strings, which both read, whether the client sent strings or
// {"text": ...} objects. The answer is normalised to api.RerankResponse:
// results best first and cut to top_n whatever the engine did with them,
// each with its document's text unless return_documents is false, and
// usage with prompt_tokens (vLLM counts only total_tokens).
func (e *Engine) rerank(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	r, err := rerank.Parse(req.Body)
	if err != nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
	}
	body, res := rerankBody(req.Body, req.Model, r.Documents)
	if res != nil {
		return res
	}
	resp, res := e.post(ctx, rerankPath, body, "application/json")
	if res != nil {
		return unserved(res, rerankPath)
	}
	defer resp.Close()
	b, res := e.readBody(ctx, resp, sink)
	if res != nil {
		return res
	}
	out, res := normaliseRerank(b, r)
	if res != nil {
		return res
	}
	data, err := json.Marshal(out)
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode rerank answer: "+err.Error())
	}
	if err := sink.Body(ctx, data); err != nil {
		return engine.Cancelled()
	}
	result := engine.OK()
	result.Usage = &api.Usage{PromptTokens: out.Usage.PromptTokens, TotalTokens: out.Usage.TotalTokens}
	return result
}

// rerankBody is the request for the engine: as the client sent it, with
// the engine's own name for the model and the documents as strings.
func rerankBody(body []byte, model string, docs []string) ([]byte, *api.Result) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "invalid rerank request: not a JSON object")
	}
	enc, err := json.Marshal(docs)
	if err != nil {
		return nil, engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode documents: "+err.Error())
	}
	m["documents"] = enc
	if model != "" {
		name, _ := json.Marshal(model) // a string always marshals
		m["model"] = name
	}
	return encodeObject(m), nil
}

// engineRerank is a rerank answer as the engines send it: llama-server's
// and vLLM's are Jina's shape, a document given as {"text"} or as a string.
type engineRerank struct {
	ID      string `json:"id"`
	Results []struct {
		Index          *int            `json:"index"`
		RelevanceScore *float64        `json:"relevance_score"`
		Document       json.RawMessage `json:"document"`
	} `json:"results"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// normaliseRerank turns an engine's answer to r into the one shape.
func normaliseRerank(b []byte, r *rerank.Request) (*api.RerankResponse, *api.Result) {
	var a engineRerank
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, invalidResponse(fmt.Errorf("decode rerank answer: %w", err))
	}
	if a.Results == nil {
		if hasError(b) {
			return nil, engine.ErrorResult(errorStatus(b), b)
		}
		return nil, invalidResponse(fmt.Errorf("the rerank answer has no results"))
	}
	out := &api.RerankResponse{ID: a.ID, Model: r.Model, Results: make([]api.RerankResult, 0, len(a.Results))}
	if out.ID == "" {
		out.ID = "rerank-" + strings.ToLower(rand.Text())
	}
	seen := make([]bool, len(r.Documents))
	for _, res := range a.Results {
		if res.Index == nil || res.RelevanceScore == nil || *res.Index < 0 || *res.Index >= len(r.Documents) || seen[*res.Index] {
			return nil, invalidResponse(fmt.Errorf("a rerank result without a score, or for no document sent once"))
		}
		seen[*res.Index] = true
		item := api.RerankResult{Index: *res.Index, RelevanceScore: *res.RelevanceScore}
		if r.ReturnDocuments {
			item.Document = &api.RerankDocument{Text: r.Documents[*res.Index]}
		}
		out.Results = append(out.Results, item)
	}
	slices.SortStableFunc(out.Results, func(x, y api.RerankResult) int { return cmp.Compare(y.RelevanceScore, x.RelevanceScore) })
	if r.TopN > 0 && r.TopN < len(out.Results) {
		out.Results = out.Results[:r.TopN]
	}
	out.Usage = api.RerankUsage{PromptTokens: cmp.Or(a.Usage.PromptTokens, a.Usage.TotalTokens), TotalTokens: a.Usage.TotalTokens}
	out.Usage.TotalTokens = max(out.Usage.TotalTokens, out.Usage.PromptTokens)
	return out, nil
}

// hasError reports whether an answer with status 200 is an error.
func hasError(b []byte) bool {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal(b, &v) == nil && !isNull(v.Error)
}
