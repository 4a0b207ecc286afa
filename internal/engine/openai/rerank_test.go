package openai

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/engine/sim"
)

// Recorded-style rerank answers: vLLM's (0.11) counts only total tokens
// and sends documents as {"text"}; llama-server's (b6xxx, --reranking)
// sends no id and has its own order.
const (
	vllmRerank  = `{"id":"rerank-8c2b","model":"BAAI/bge-reranker-v2-m3","usage":{"total_tokens":31},"results":[{"index":1,"document":{"text":"the red fox","multi_modal":null},"relevance_score":0.98},{"index":0,"document":{"text":"a blue whale","multi_modal":null},"relevance_score":0.01},{"index":2,"document":{"text":"red sky","multi_modal":null},"relevance_score":0.2}]}`
	llamaRerank = `{"model":"bge-reranker-v2-m3-q8_0.gguf","object":"list","usage":{"prompt_tokens":29,"total_tokens":29},"results":[{"index":0,"relevance_score":-8.2},{"index":1,"relevance_score":5.1},{"index":2,"relevance_score":-2.0}]}`
)

func TestRerank(t *testing.T) {
	const req = `{"model":"reranker","query":"red fox","documents":["a blue whale",{"text":"the red fox"},"red sky"],"top_n":2,"truncate":true}`
	tests := []struct {
		name   string
		req    string
		status int
		answer string
		want   int
		order  []int
		docs   bool
		usage  *api.Usage
	}{
		{name: "vllm", req: req, status: 200, answer: vllmRerank, want: 200, order: []int{1, 2}, docs: true,
			usage: &api.Usage{PromptTokens: 31, TotalTokens: 31}},
		{name: "llama-server, no documents", req: strings.Replace(req, `"top_n":2`, `"return_documents":false`, 1), status: 200, answer: llamaRerank, want: 200,
			order: []int{1, 2, 0}, usage: &api.Usage{PromptTokens: 29, TotalTokens: 29}},
		{name: "bad request", req: `{"model":"reranker","query":"q"}`, want: 400},
		{name: "no reranking", req: req, status: 501, answer: `{"error":{"code":501,"message":"This server does not support reranking. Start it with --reranking","type":"not_supported_error"}}`, want: 501},
		{name: "no route", req: req, status: 404, answer: `{"detail":"Not Found"}`, want: 501},
		{name: "no model", req: req, status: 404, answer: vllmNotFound, want: 404},
		{name: "out of memory", req: req, status: 500, answer: vllmOOM, want: 507},
		{name: "too long, vllm", req: req, status: 400, answer: `{"object":"error","message":"This model's maximum context length is 512 tokens. However, your request has 751 input tokens. Please reduce the length of the input messages.","type":"BadRequestError","param":null,"code":400}`, want: 413},
		{name: "too long, llama-server", req: req, status: 400, answer: llamaContextErr, want: 413},
		{name: "an error as 200", req: req, status: 200, answer: `{"error":{"message":"boom","type":"server_error","code":500}}`, want: 500},
		{name: "not json", req: req, status: 200, answer: `<html>`, want: 502},
		{name: "a result for no document", req: req, status: 200, answer: `{"results":[{"index":7,"relevance_score":1}]}`, want: 502},
		{name: "a document twice", req: req, status: 200, answer: `{"results":[{"index":1,"relevance_score":1},{"index":1,"relevance_score":0.5}]}`, want: 502},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"/v1/rerank": jsonHandler(tt.status, tt.answer)})
			var s sink
			r := newEngine(t, f.URL).Serve(context.Background(), &engine.Request{Kind: api.KindRerank, Model: "local-reranker", Body: []byte(tt.req)}, &s)
			wantStatus(t, r, tt.want)
			if tt.want == 400 {
				return
			}
			var sent struct {
				Model     string          `json:"model"`
				Documents []string        `json:"documents"`
				Truncate  json.RawMessage `json:"truncate"`
			}
			if err := json.Unmarshal(f.last(t, "/v1/rerank").Body, &sent); err != nil || sent.Model != "local-reranker" ||
				strings.Join(sent.Documents, "|") != "a blue whale|the red fox|red sky" || string(sent.Truncate) != "true" {
				t.Fatalf("sent %+v, %v", sent, err)
			}
			if tt.want != 200 {
				if s.body != nil {
					t.Fatal("error body forwarded")
				}
				return
			}
			var got api.RerankResponse
			if err := json.Unmarshal(s.body, &got); err != nil || got.ID == "" || got.Model != "reranker" || len(got.Results) != len(tt.order) {
				t.Fatalf("answer %s, %v", s.body, err)
			}
			for i, res := range got.Results {
				if res.Index != tt.order[i] || (res.Document != nil) != tt.docs {
					t.Fatalf("result %d: %+v in %s", i, res, s.body)
				}
			}
			if tt.docs && got.Results[0].Document.Text != "the red fox" {
				t.Fatalf("document %+v", got.Results[0].Document)
			}
			if got.Usage.PromptTokens != tt.usage.PromptTokens || *r.Usage != *tt.usage {
				t.Fatalf("usage %+v, result %+v", got.Usage, r.Usage)
			}
		})
	}
}

// The adapter in front of the simulator's HTTP face ranks as the
// simulator does in process.
func TestSimulatorRerank(t *testing.T) {
	srv := httptest.NewServer(sim.NewHandler(simConfig()))
	t.Cleanup(srv.Close)
	req := &engine.Request{Kind: api.KindRerank, Model: "sim-rerank",
		Body: []byte(`{"model":"sim-rerank","query":"red fox","documents":["blue",{"text":"red fox"},"fox"],"top_n":2}`)}
	var s sink
	wantStatus(t, newEngine(t, srv.URL).Serve(t.Context(), req, &s), 200)
	var viaHTTP, inProcess api.RerankResponse
	if json.Unmarshal(s.body, &viaHTTP) != nil || json.Unmarshal(direct(t, req), &inProcess) != nil {
		t.Fatalf("%s", s.body)
	}
	viaHTTP.ID, inProcess.ID = "", ""
	a, _ := json.Marshal(viaHTTP)
	b, _ := json.Marshal(inProcess)
	if string(a) != string(b) || viaHTTP.Results[0].Index != 1 {
		t.Fatalf("through HTTP %s\nin process   %s", a, b)
	}
}
