package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/svc-dev/svc/internal/harness"
)

// rerankReply is the body of a rerank answer.
type rerankReply struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Results []struct {
		Index          int     `json:"index"`
		RelevanceScore float64 `json:"relevance_score"`
		Document       *struct {
			Text string `json:"text"`
		} `json:"document"`
	} `json:"results"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
	Svc struct {
		Worker    struct{ ID, Name, Version string } `json:"worker"`
		RequestID string                             `json:"request_id"`
	} `json:"svc"`
}

// imagesReply is the body of an image generation's answer.
type imagesReply struct {
	Created int64 `json:"created"`
	Data    []struct {
		B64JSON string `json:"b64_json"`
	} `json:"data"`
	Svc struct {
		Worker    struct{ ID, Name string } `json:"worker"`
		RequestID string                    `json:"request_id"`
	} `json:"svc"`
}

// workerHeaders checks the headers every inference reply carries, and
// that svc names the same worker and request.
func workerHeaders(t *testing.T, r reply, worker, svcWorker, svcRequest string) {
	t.Helper()
	if r.Header.Get("X-Request-Id") == "" || r.Header.Get("X-Worker-Name") != worker || !strings.HasPrefix(r.Header.Get("X-Worker-Id"), "wk_") ||
		svcWorker != r.Header.Get("X-Worker-Id") || svcRequest != r.Header.Get("X-Request-Id") {
		t.Fatalf("headers %v, svc worker %q request %q", r.Header, svcWorker, svcRequest)
	}
}

// Rerank and image generation through a real gateway and worker, under
// both prefixes: headers, svc, the answer's shape, usage rows and totals,
// validation, and the models list.
func TestRerankAndImages(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "gpu-1", "--engine", "sim=tps=0,ttft=0")

	for _, prefix := range []string{"/v1", "/api/v1"} {
		// A whole number is one however JSON writes it (Python's 2.0).
		two := map[string]string{"/v1": "2", "/api/v1": "2.0"}[prefix]
		r := s.do("POST", prefix+"/rerank",
			`{"model":"sim-rerank","query":"red fox","documents":["a blue whale",{"text":"the red fox"},"red sky"],"top_n":`+two+`}`, bearer(key))
		var rr rerankReply
		if err := json.Unmarshal(r.Body, &rr); err != nil || r.Status != 200 {
			t.Fatalf("%s/rerank = %d %s", prefix, r.Status, r.Body)
		}
		workerHeaders(t, r, "gpu-1", rr.Svc.Worker.ID, rr.Svc.RequestID)
		if rr.Model != "sim-rerank" || len(rr.Results) != 2 || rr.Results[0].Index != 1 || rr.Results[0].Document.Text != "the red fox" ||
			rr.Results[1].Index != 2 || rr.Results[0].RelevanceScore <= rr.Results[1].RelevanceScore || rr.Usage.PromptTokens == 0 {
			t.Fatalf("rerank answer %s", r.Body)
		}
		row := s.usageRow(key, r.Header.Get("X-Request-Id"))
		if row["request_type"] != "rerank" || row["prompt_tokens"] != float64(rr.Usage.PromptTokens) || row["total_tokens"] != float64(rr.Usage.TotalTokens) ||
			row["worker_name"] != "gpu-1" || row["status_code"] != 200.0 || row["images"] != 0.0 {
			t.Fatalf("rerank row %v", row)
		}

		r = s.do("POST", prefix+"/images/generations", `{"model":"sim-image","prompt":"a red fox","n":`+two+`,"size":"256x256"}`, bearer(key))
		var ir imagesReply
		if err := json.Unmarshal(r.Body, &ir); err != nil || r.Status != 200 || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s/images/generations = %d %.300s", prefix, r.Status, r.Body)
		}
		workerHeaders(t, r, "gpu-1", ir.Svc.Worker.ID, ir.Svc.RequestID)
		if ir.Created == 0 || len(ir.Data) != 2 {
			t.Fatalf("images answer %.300s", r.Body)
		}
		for _, d := range ir.Data {
			b, err := base64.StdEncoding.DecodeString(d.B64JSON)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil || img.Bounds().Dx() != 256 || img.Bounds().Dy() != 256 {
				t.Fatalf("image %v, %v", img, err)
			}
		}
		row = s.usageRow(key, r.Header.Get("X-Request-Id"))
		if row["request_type"] != "images" || row["images"] != 2.0 || row["prompt_tokens"] != 0.0 || row["worker_name"] != "gpu-1" {
			t.Fatalf("images row %v", row)
		}
	}
	// The images made count toward the totals; nothing else here made any.
	var summary map[string]any
	_ = json.Unmarshal(s.do("GET", "/api/v1/usage/summary?days=1", "", bearer(key)).Body, &summary)
	if summary["images"] != 4.0 || summary["requests"] != 4.0 {
		t.Fatalf("summary %v", summary)
	}
	r := s.do("POST", "/v1/embeddings", `{"model":"sim-embed","input":"a fox","dimensions":8.0}`, bearer(key))
	var er struct {
		Data []struct{ Embedding []float64 }
	}
	if err := json.Unmarshal(r.Body, &er); err != nil || r.Status != 200 || len(er.Data) != 1 || len(er.Data[0].Embedding) != 8 {
		t.Fatalf("embeddings with dimensions 8.0: %d %.300s", r.Status, r.Body)
	}

	// The official client's images call works unchanged.
	client := sdk(s, key, "/v1")
	res, err := client.Images.Generate(context.Background(), openai.ImageGenerateParams{Model: "sim-image", Prompt: "a fox",
		Size: openai.ImageGenerateParamsSize("256x256"), ResponseFormat: openai.ImageGenerateParamsResponseFormatB64JSON})
	if err != nil || len(res.Data) != 1 || res.Data[0].B64JSON == "" {
		t.Fatalf("sdk images %+v, %v", res, err)
	}

	for _, tc := range []struct {
		path, body string
		status     int
		field      string
	}{
		{"/v1/rerank", `{"model":"sim-rerank","query":"q","documents":["a",{"text":1}]}`, 422, "documents.1.text"},
		{"/api/v1/rerank", `{"model":"sim-rerank","documents":["a"]}`, 422, "query"},
		{"/v1/rerank", `{"model":"sim-rerank","query":"q","documents":[],"top_n":0}`, 422, "documents"},
		{"/v1/images/generations", `{"model":"sim-image","prompt":"a","n":11}`, 422, "n"},
		{"/api/v1/images/generations", `{"model":"sim-image"}`, 422, "prompt"},
		{"/v1/images/generations", `{"model":"sim-image","prompt":"a","size":"huge"}`, 422, "size"},
		{"/v1/images/generations", `{"model":"sim-image","prompt":"a","response_format":"url"}`, 400, ""},
		{"/v1/rerank", `{"model":`, 400, ""},
	} {
		r := s.do("POST", tc.path, tc.body, bearer(key))
		if r.Status != tc.status || tc.field != "" && !strings.Contains(string(r.Body), `"field":"`+tc.field+`"`) ||
			r.Header.Get("X-Request-Id") == "" {
			t.Errorf("POST %s %s = %d %s", tc.path, tc.body, r.Status, r.Body)
		}
		if tc.status == 400 && strings.Contains(tc.body, "url") {
			if msg, typ := message(t, r); !strings.Contains(msg, "b64_json") || typ != "invalid_request_error" {
				t.Errorf("url refusal %s", r.Body)
			}
		}
	}

	r = s.do("GET", "/v1/models", "", bearer(key))
	var list struct {
		Data []struct {
			ID           string   `json:"id"`
			Capabilities []string `json:"capabilities"`
			Simulated    bool     `json:"simulated"`
		} `json:"data"`
	}
	_ = json.Unmarshal(r.Body, &list)
	caps := map[string]string{}
	for _, m := range list.Data {
		caps[m.ID] = strings.Join(m.Capabilities, ",")
	}
	if caps["sim-rerank"] != "rerank" || caps["sim-image"] != "image_generation" {
		t.Fatalf("models %s", r.Body)
	}
}

// X-Svc-Worker-Id sends rerank and image requests to one worker; a
// failure before any answer is tried on another worker, and the row
// counts both attempts.
func TestRerankAndImagesPinnedAndRetried(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "a", "--engine", "sim=tps=0,ttft=0")
	startWorker(t, s.URL, s.tokenFile(), "b", "--engine", "sim=tps=0,ttft=0")
	b := s.workerNamed(key, "b", statusIs("healthy"))
	pin := header{"X-Svc-Worker-Id", b["worker_id"].(string)}
	for range 3 {
		r := s.do("POST", "/v1/rerank", `{"model":"sim-rerank","query":"q","documents":["q"]}`, bearer(key), pin)
		if r.Status != 200 || r.Header.Get("X-Worker-Name") != "b" {
			t.Fatalf("pinned rerank = %d %v %s", r.Status, r.Header, r.Body)
		}
		r = s.do("POST", "/api/v1/images/generations", `{"model":"sim-image","prompt":"q","size":"64x64"}`, bearer(key), pin)
		if r.Status != 200 || r.Header.Get("X-Worker-Name") != "b" {
			t.Fatalf("pinned images = %d %v %.200s", r.Status, r.Header, r.Body)
		}
	}
	if r := s.do("POST", "/v1/rerank", `{"model":"sim-rerank","query":"q","documents":["q"]}`, bearer(key), header{"X-Svc-Worker-Id", "wk_nobody"}); r.Status != 404 {
		t.Fatalf("pinned to no worker = %d %s", r.Status, r.Body)
	}
	// Both workers fail the same way: the answer is the last one's 503,
	// after trying each.
	for _, tc := range []struct{ path, body string }{
		{"/v1/rerank", `{"model":"sim-rerank","query":"q\nsim: fail=503","documents":["q"]}`},
		{"/v1/images/generations", `{"model":"sim-image","prompt":"q\nsim: fail=503"}`},
	} {
		r := s.do("POST", tc.path, tc.body, bearer(key))
		if r.Status != 503 || !strings.Contains(string(r.Body), "sim fail=503") || r.Header.Get("Retry-After") == "" {
			t.Fatalf("%s = %d %v %s", tc.path, r.Status, r.Header, r.Body)
		}
		row := s.usageRow(key, r.Header.Get("X-Request-Id"))
		if row["attempts"] != 2.0 || row["status_code"] != 503.0 || row["images"] != 0.0 {
			t.Fatalf("row of a failure %v", row)
		}
	}
	// A lasting failure (507) is not retried.
	r := s.do("POST", "/v1/images/generations", `{"model":"sim-image","prompt":"q\nsim: fail=507"}`, bearer(key))
	if _, typ := message(t, r); r.Status != 507 || typ != "insufficient_memory_error" {
		t.Fatalf("507 = %d %s", r.Status, r.Body)
	}
	if row := s.usageRow(key, r.Header.Get("X-Request-Id")); row["attempts"] != 1.0 {
		t.Fatalf("row %v", row)
	}
}

// An image model the worker lists but has not fully installed gets the
// spec's 409, naming the file missing; a worker with it whole serves it,
// and one pinned to the partial worker still gets the 409.
func TestImageModelNotFullyInstalled(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "partial", "--engine", "sim=tps=0,ttft=0,incomplete=sim-image")
	const body = `{"model":"sim-image","prompt":"a fox","size":"64x64"}`
	r := s.do("POST", "/v1/images/generations", body, bearer(key))
	msg, typ := message(t, r)
	if r.Status != http.StatusConflict || typ != "conflict_error" || !strings.Contains(msg, "not fully installed on worker partial") ||
		!strings.Contains(msg, "vae/diffusion_pytorch_model.safetensors missing") || !strings.Contains(string(r.Body), `"code":"model_incomplete"`) {
		t.Fatalf("partial model = %d %s", r.Status, r.Body)
	}
	if row := s.usageRow(key, r.Header.Get("X-Request-Id")); row["status_code"] != 409.0 || row["request_type"] != "images" {
		t.Fatalf("row %v", row)
	}
	// The rest of the worker's models serve as ever.
	if r := s.do("POST", "/v1/rerank", `{"model":"sim-rerank","query":"q","documents":["q"]}`, bearer(key)); r.Status != 200 {
		t.Fatalf("rerank on the same worker = %d %s", r.Status, r.Body)
	}
	models := s.do("GET", "/v1/models", "", bearer(key))
	if !strings.Contains(string(models.Body), `"incomplete":{"missing":["vae/diffusion_pytorch_model.safetensors"]}`) {
		t.Fatalf("models list %s", models.Body)
	}

	startWorker(t, s.URL, s.tokenFile(), "whole", "--engine", "sim=tps=0,ttft=0")
	partial := s.workerNamed(key, "partial", statusIs("healthy"))
	harness.Eventually(10*time.Second, func() bool {
		return s.do("POST", "/api/v1/images/generations", body, bearer(key)).Status == 200
	})
	for range 3 {
		r := s.do("POST", "/api/v1/images/generations", body, bearer(key))
		if r.Status != 200 || r.Header.Get("X-Worker-Name") != "whole" {
			t.Fatalf("with a whole install = %d %v %.200s", r.Status, r.Header, r.Body)
		}
	}
	if strings.Contains(string(s.do("GET", "/v1/models", "", bearer(key)).Body), `"incomplete"`) {
		t.Fatal("a model whole on one worker is listed as incomplete")
	}
	r = s.do("POST", "/v1/images/generations", body, bearer(key), header{"X-Svc-Worker-Id", partial["worker_id"].(string)})
	if r.Status != http.StatusConflict {
		t.Fatalf("pinned to the partial worker = %d %s", r.Status, r.Body)
	}
}

// Rerank and image requests sealed end to end by the client transport:
// the worker opens, checks and serves them, the worker is named beside
// the sealed reply, and the marker reaches no log of the gateway's.
func TestPrivateRerankAndImages(t *testing.T) {
	marker := newMarker()
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "vault", "--engine", "sim=tps=0,ttft=0")
	client := privateClient(s, key, http.DefaultTransport)
	ctx := context.Background()

	var rr rerankReply
	err := client.Post(ctx, "rerank", map[string]any{"model": "sim-rerank", "query": "fox " + marker,
		"documents": []any{"cat", map[string]string{"text": "fox " + marker}}}, &rr)
	if err != nil || len(rr.Results) != 2 || rr.Results[0].Index != 1 || rr.Svc.Worker.Name != "vault" {
		t.Fatalf("sealed rerank %+v, %v", rr, err)
	}
	res, err := client.Images.Generate(ctx, openai.ImageGenerateParams{Model: "sim-image", Prompt: "a fox " + marker, N: openai.Int(2),
		Size: openai.ImageGenerateParamsSize("256x256")})
	if err != nil || len(res.Data) != 2 || res.Data[1].B64JSON == "" || svcOf(t, res.RawJSON())["worker"] == nil {
		t.Fatalf("sealed images %+v, %v", res, err)
	}
	// The worker checks what the gateway could not read.
	var ir imagesReply
	err = client.Post(ctx, "images/generations", map[string]any{"model": "sim-image", "prompt": "a fox", "response_format": "url"}, &ir)
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 {
		t.Fatalf("sealed url request: %v", err)
	}

	var rows []map[string]any
	harness.Eventually(5*time.Second, func() bool {
		_ = json.Unmarshal(s.do("GET", "/api/v1/usage/logs?limit=10", "", bearer(key)).Body, &rows)
		return len(rows) >= 3
	})
	types := map[string]bool{}
	for _, r := range rows {
		types[r["request_type"].(string)] = true
	}
	if len(rows) != 3 || !types["rerank"] || !types["images"] {
		t.Fatalf("rows %v", rows)
	}
	if strings.Contains(s.Log().String(), marker) {
		t.Fatal("the gateway's log holds the marker")
	}
}
