package api

// Reranking on the link and in usage rows.
const (
	// KindRerank carries a rerank request (query, documents) as the
	// client sent it; the worker answers with a RerankResponse.
	KindRerank = "rerank"
	// RequestRerank is the usage row type of a rerank request.
	RequestRerank = "rerank"
)

// RerankResponse is the answer to POST /v1/rerank, in the shape vLLM,
// llama-server, Jina and Cohere share. Engine adapters normalise their
// engine's answer to it: results by relevance, best first, cut to top_n.
type RerankResponse struct {
	ID      string         `json:"id"`
	Object  string         `json:"object,omitempty"`
	Model   string         `json:"model"`
	Results []RerankResult `json:"results"`
	Usage   RerankUsage    `json:"usage"`
}

// RerankResult is one document's score; Index is its place in the
// request's documents.
type RerankResult struct {
	Index          int             `json:"index"`
	RelevanceScore float64         `json:"relevance_score"`
	Document       *RerankDocument `json:"document,omitempty"`
}

// RerankDocument is a document as a rerank answer returns it.
type RerankDocument struct {
	Text string `json:"text"`
}

// RerankUsage counts the tokens a rerank read: the query once per
// document, and the documents.
type RerankUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}
