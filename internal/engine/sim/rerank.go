package sim

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/rerank"
)

// rerankReply is a finished rerank answer.
type rerankReply struct {
	body   api.RerankResponse
	result *api.Result
}

// rerank answers a rerank request with scores from the words the query
// and each document share: the share of the query's distinct words found
// in the document, so the same request always ranks the same way, and a
// document that repeats the query ranks first.
func (s *simulator) rerank(ctx context.Context, modelID string, body []byte) (*rerankReply, *api.Result) {
	req, err := rerank.Parse(body)
	if err != nil {
		return nil, badRequest(err.Error())
	}
	if modelID == "" {
		modelID = req.Model
	}
	m, fail := s.lookup(modelID, api.CapRerank)
	if fail != nil {
		return nil, fail
	}
	// Directives ride in the query; only hang and fail mean anything here.
	dir, err := parseDirectives(req.Query)
	if err != nil {
		return nil, badRequest(err.Error())
	}
	query := wordSet(req.Query)
	queryTokens := textTokens(req.Query)
	results := make([]api.RerankResult, len(req.Documents))
	prompt := 0
	for i, doc := range req.Documents {
		n := queryTokens + textTokens(doc)
		if w := m.spec.ContextWindow; w > 0 && n > w {
			r := engine.Failure(engine.ContextLengthStatus(api.KindRerank), chat.TypeContextLengthExceeded,
				fmt.Sprintf("the query and document %d are %d tokens, more than the model's maximum context length of %d tokens", i, n, w))
			r.Error.Code = chat.TypeContextLengthExceeded
			return nil, r
		}
		prompt += n
		results[i] = api.RerankResult{Index: i, RelevanceScore: overlap(query, doc)}
		if req.ReturnDocuments {
			results[i].Document = &api.RerankDocument{Text: doc}
		}
	}
	if r := dir.scripted(ctx); r != nil {
		return nil, r
	}
	res := s.work(ctx, m, s.cfg.Latency+s.cfg.TTFT)
	if res.Status != http.StatusOK {
		return nil, res
	}
	slices.SortStableFunc(results, func(a, b api.RerankResult) int { return cmp.Compare(b.RelevanceScore, a.RelevanceScore) })
	if req.TopN > 0 && req.TopN < len(results) {
		results = results[:req.TopN]
	}
	res.Usage = &api.Usage{PromptTokens: prompt, TotalTokens: prompt}
	return &rerankReply{
		body: api.RerankResponse{
			ID: "rerank-" + newSeed(m.spec.ID, body, nil).hex("id", 24), Model: m.spec.ID, Results: results,
			Usage: api.RerankUsage{PromptTokens: prompt, TotalTokens: prompt},
		},
		result: res,
	}, nil
}

// textTokens estimates a text's tokens as for chat prompts.
func textTokens(s string) int { return max(1, (len(s)+3)/4) }

// wordSet is the distinct lower-cased words of s.
func wordSet(s string) map[string]bool {
	set := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), notWordRune) {
		set[w] = true
	}
	return set
}

func notWordRune(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }

// overlap is the share of query's words found in doc, 0 to 1.
func overlap(query map[string]bool, doc string) float64 {
	if len(query) == 0 {
		return 0
	}
	found := 0
	for w := range wordSet(doc) {
		if query[w] {
			found++
		}
	}
	return float64(found) / float64(len(query))
}
