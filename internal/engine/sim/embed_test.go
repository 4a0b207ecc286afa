package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

type embeddingList struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// embedVectors runs an embeddings request and returns its vectors.
func embedVectors(t *testing.T, e *Engine, body string) ([][]float32, embeddingList, *api.Result) {
	t.Helper()
	res, s := serve(t, e, api.KindEmbeddings, false, []byte(body))
	if res.Status != http.StatusOK {
		return nil, embeddingList{}, res
	}
	var list embeddingList
	if err := json.Unmarshal(s.body, &list); err != nil {
		t.Fatalf("decode %s: %v", s.body, err)
	}
	if list.Object != "list" || list.Model != "sim-embed" {
		t.Fatalf("list %s", s.body)
	}
	out := make([][]float32, len(list.Data))
	for i, d := range list.Data {
		if d.Object != "embedding" || d.Index != i {
			t.Fatalf("item %d: %+v", i, d)
		}
		var b64 string
		if json.Unmarshal(d.Embedding, &b64) == nil {
			raw, err := base64.StdEncoding.DecodeString(b64)
			if err != nil || len(raw)%4 != 0 {
				t.Fatalf("base64 %q: %v", b64, err)
			}
			for k := 0; k < len(raw); k += 4 {
				out[i] = append(out[i], math.Float32frombits(binary.LittleEndian.Uint32(raw[k:])))
			}
			continue
		}
		if err := json.Unmarshal(d.Embedding, &out[i]); err != nil {
			t.Fatalf("embedding %d: %v", i, err)
		}
	}
	return out, list, res
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func cosine(a, b []float32) float64 {
	var dot float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
	}
	return dot / norm(a) / norm(b)
}

func TestEmbeddings(t *testing.T) {
	e := New(fixedConfig())
	vecs, list, res := embedVectors(t, e, `{"model":"sim-embed","input":"The quick brown fox"}`)
	if len(vecs) != 1 || len(vecs[0]) != 256 || math.Abs(norm(vecs[0])-1) > 1e-5 {
		t.Fatalf("got %d vectors of %d, norm %v", len(vecs), len(vecs[0]), norm(vecs[0]))
	}
	if list.Usage.PromptTokens != 5 || list.Usage.TotalTokens != 5 || res.Usage.PromptTokens != 5 || res.Usage.CompletionTokens != 0 {
		t.Fatalf("usage %+v / %+v", list.Usage, res.Usage)
	}

	// Deterministic, and different inputs point different ways.
	again, _, _ := embedVectors(t, New(fixedConfig()), `{"model":"sim-embed","input":"The quick brown fox"}`)
	if cosine(vecs[0], again[0]) != 1 && !equalVectors(vecs[0], again[0]) {
		t.Fatal("same input, different vector")
	}
	batch, list, _ := embedVectors(t, e, `{"model":"sim-embed","input":["something else","The quick brown fox"]}`)
	if len(batch) != 2 || !equalVectors(batch[1], vecs[0]) || math.Abs(cosine(batch[0], batch[1])) > 0.5 {
		t.Fatalf("batch: %d vectors, cosine %v", len(batch), cosine(batch[0], batch[1]))
	}
	if list.Usage.PromptTokens != 4+5 {
		t.Fatalf("batch usage %+v", list.Usage)
	}

	// Shortened vectors are the renormalised start of the full one.
	short, _, _ := embedVectors(t, e, `{"model":"sim-embed","input":"The quick brown fox","dimensions":64}`)
	if len(short[0]) != 64 || math.Abs(norm(short[0])-1) > 1e-5 || cosine(short[0], vecs[0][:64]) < 0.99999 {
		t.Fatalf("dimensions 64: len %d norm %v", len(short[0]), norm(short[0]))
	}

	// base64 carries the same floats.
	b64, _, _ := embedVectors(t, e, `{"model":"sim-embed","input":"The quick brown fox","encoding_format":"base64"}`)
	if !equalVectors(b64[0], vecs[0]) {
		t.Fatal("base64 vector differs from the float one")
	}

	// Token inputs.
	toks, list, _ := embedVectors(t, e, `{"model":"sim-embed","input":[1,2,3]}`)
	if len(toks) != 1 || list.Usage.PromptTokens != 3 {
		t.Fatalf("token input: %d vectors, usage %+v", len(toks), list.Usage)
	}
	toks, list, _ = embedVectors(t, e, `{"model":"sim-embed","input":[[1,2],[3]]}`)
	if len(toks) != 2 || list.Usage.PromptTokens != 3 || equalVectors(toks[0], toks[1]) {
		t.Fatalf("token batches: %d vectors, usage %+v", len(toks), list.Usage)
	}
}

func equalVectors(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEmbeddingErrors(t *testing.T) {
	e := New(fixedConfig())
	tests := []struct {
		name      string
		body      string
		status    int
		typ       string
		retryable bool
	}{
		{"too many dimensions", `{"model":"sim-embed","input":"x","dimensions":300}`, 400, api.TypeInvalidRequest, false},
		{"zero dimensions", `{"model":"sim-embed","input":"x","dimensions":0}`, 400, api.TypeInvalidRequest, false},
		{"empty list", `{"model":"sim-embed","input":[]}`, 400, api.TypeInvalidRequest, false},
		{"empty string", `{"model":"sim-embed","input":""}`, 400, api.TypeInvalidRequest, false},
		{"no input", `{"model":"sim-embed"}`, 400, api.TypeInvalidRequest, false},
		{"mixed input", `{"model":"sim-embed","input":["a",1]}`, 400, api.TypeInvalidRequest, false},
		{"bad format", `{"model":"sim-embed","input":"x","encoding_format":"int8"}`, 400, api.TypeInvalidRequest, false},
		{"bad json", `{"model":`, 400, api.TypeInvalidRequest, false},
		{"too long", `{"model":"sim-embed","input":"` + strings.Repeat("abcd", 600) + `"}`, 413, "context_length_exceeded", false},
		{"unknown model", `{"model":"nope","input":"x"}`, 404, api.TypeNotFound, false},
		{"chat model", `{"model":"sim-chat","input":"x"}`, 400, api.TypeInvalidRequest, false},
		{"fail directive", `{"model":"sim-embed","input":"x\nsim: fail=503"}`, 503, api.TypeServiceUnavailable, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, res := embedVectors(t, e, tt.body)
			if res.Status != tt.status || res.Error == nil || res.Error.Type != tt.typ || res.Retryable != tt.retryable {
				t.Fatalf("got %d %+v retryable=%v", res.Status, res.Error, res.Retryable)
			}
		})
	}
}
