package sim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestRerank(t *testing.T) {
	cfg, _ := testConfig()
	e := New(cfg)
	tests := []struct {
		name    string
		body    string
		order   []int
		docs    bool
		status  int
		message string
	}{
		{"ranks by shared words", `{"model":"sim-rerank","query":"red fox jumps","documents":["a blue whale","the red fox jumps high","red sky"]}`,
			[]int{1, 2, 0}, true, 200, ""},
		{"objects, top_n, no documents", `{"model":"sim-rerank","query":"Red fox","documents":[{"text":"nothing"},{"text":"RED? fox!"},"red"],"top_n":2,"return_documents":false}`,
			[]int{1, 2}, false, 200, ""},
		{"ties keep their order", `{"model":"sim-rerank","query":"q","documents":["a","b","c"]}`, []int{0, 1, 2}, true, 200, ""},
		{"top_n past the end", `{"model":"sim-rerank","query":"q","documents":["q","b"],"top_n":9}`, []int{0, 1}, true, 200, ""},
		{"chat model", `{"model":"sim-chat","query":"q","documents":["a"]}`, nil, false, 400, "/v1/chat/completions"},
		{"unknown model", `{"model":"nope","query":"q","documents":["a"]}`, nil, false, 404, "does not exist"},
		{"no documents", `{"model":"sim-rerank","query":"q"}`, nil, false, 400, "documents"},
		{"too long", `{"model":"sim-rerank","query":"q","documents":["` + strings.Repeat("word ", 600) + `"]}`, nil, false, 413, "context length"},
		{"fail directive", `{"model":"sim-rerank","query":"q\nsim: fail=503","documents":["a"]}`, nil, false, 503, "sim fail=503"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, s := serve(t, e, api.KindRerank, false, []byte(tt.body))
			if res.Status != tt.status {
				t.Fatalf("status %d %+v", res.Status, res.Error)
			}
			if tt.status != 200 {
				if !strings.Contains(res.Error.Message, tt.message) {
					t.Fatalf("message %q", res.Error.Message)
				}
				return
			}
			var got api.RerankResponse
			if err := json.Unmarshal(s.body, &got); err != nil || got.Model != "sim-rerank" || !strings.HasPrefix(got.ID, "rerank-") {
				t.Fatalf("%s: %v", s.body, err)
			}
			if len(got.Results) != len(tt.order) {
				t.Fatalf("results %+v", got.Results)
			}
			for i, r := range got.Results {
				if r.Index != tt.order[i] || (r.Document != nil) != tt.docs || i > 0 && r.RelevanceScore > got.Results[i-1].RelevanceScore ||
					r.RelevanceScore < 0 || r.RelevanceScore > 1 {
					t.Fatalf("result %d: %+v in %s", i, r, s.body)
				}
			}
			if got.Usage.PromptTokens == 0 || got.Usage.TotalTokens != got.Usage.PromptTokens || res.Usage == nil || res.Usage.PromptTokens != got.Usage.PromptTokens {
				t.Fatalf("usage %+v, result %+v", got.Usage, res.Usage)
			}
		})
	}
	// The same request ranks the same way, scores and all.
	body := `{"model":"sim-rerank","query":"red fox","documents":["red","fox red","blue"]}`
	_, a := serve(t, e, api.KindRerank, false, []byte(body))
	_, b := serve(t, e, api.KindRerank, false, []byte(body))
	if string(a.body) != string(b.body) || !strings.Contains(string(a.body), `"relevance_score":1,"document":{"text":"fox red"}`) {
		t.Fatalf("%s\n%s", a.body, b.body)
	}
}

// The HTTP face answers as vLLM's /v1/rerank does.
func TestHTTPRerank(t *testing.T) {
	cfg, _ := testConfig()
	srv := httptest.NewServer(NewHandler(cfg))
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL+"/v1/rerank", "application/json",
		strings.NewReader(`{"model":"sim-rerank","query":"fox","documents":["cat","fox"]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got api.RerankResponse
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 || got.Results[0].Index != 1 || got.Results[0].Document.Text != "fox" {
		t.Fatalf("%d %+v %v", resp.StatusCode, got, err)
	}
	resp, err = srv.Client().Post(srv.URL+"/v1/rerank", "application/json", strings.NewReader(`{"model":"sim-rerank"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad request answered %d", resp.StatusCode)
	}
}
