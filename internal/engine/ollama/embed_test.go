package ollama

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/engine"
)

func embedReq(body string) *engine.Request {
	return &engine.Request{Kind: "embeddings", Model: "nomic-embed-text", Body: []byte(body)}
}

func TestEmbed(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		sent  string // what Ollama must receive
		data  string // the data array relayed
		usage string
	}{
		{
			name:  "string",
			body:  `{"model":"nomic-embed-text","input":"hello"}`,
			sent:  `{"model":"nomic-embed-text","input":"hello","truncate":false}`,
			data:  `[{"object":"embedding","index":0,"embedding":[0.5,-0.25,0]}]`,
			usage: `{"prompt_tokens":7,"total_tokens":7}`,
		},
		{
			name:  "array with dimensions",
			body:  `{"model":"nomic-embed-text","input":["a","b"],"dimensions":3,"encoding_format":"float"}`,
			sent:  `{"model":"nomic-embed-text","input":["a","b"],"dimensions":3,"truncate":false}`,
			data:  `[{"object":"embedding","index":0,"embedding":[0.5,-0.25,0]},{"object":"embedding","index":1,"embedding":[0.5,-0.25,1]}]`,
			usage: `{"prompt_tokens":7,"total_tokens":7}`,
		},
	}
	f := newFake(t)
	e := f.engine(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &recordSink{}
			r := e.Serve(context.Background(), embedReq(tt.body), sink)
			if r.Status != 200 {
				t.Fatalf("got %d %+v", r.Status, r.Error)
			}
			if g := jsonOf(t, f.last(t, "/api/embed")); g != canon(t, tt.sent) {
				t.Errorf("sent %s, want %s", g, tt.sent)
			}
			b := sink.body
			if b["object"] != "list" || b["model"] != "nomic-embed-text" {
				t.Errorf("envelope %s", jsonOf(t, b))
			}
			if g := jsonOf(t, b["data"]); g != canon(t, tt.data) {
				t.Errorf("data %s, want %s", g, tt.data)
			}
			if g := jsonOf(t, b["usage"]); g != canon(t, tt.usage) {
				t.Errorf("usage %s, want %s", g, tt.usage)
			}
			if r.Usage == nil || r.Usage.PromptTokens != 7 || r.Usage.TotalTokens != 7 {
				t.Errorf("result usage %+v", r.Usage)
			}
		})
	}
}

// TestEmbedBase64 checks encoding_format "base64", the OpenAI Python
// SDK's default: little-endian float32s.
func TestEmbedBase64(t *testing.T) {
	e := newFake(t).engine(t)
	sink := &recordSink{}
	r := e.Serve(context.Background(), embedReq(`{"model":"m","input":"x","encoding_format":"base64"}`), sink)
	if r.Status != 200 {
		t.Fatalf("got %d %+v", r.Status, r.Error)
	}
	s := sink.body["data"].([]any)[0].(map[string]any)["embedding"].(string)
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != 12 {
		t.Fatalf("embedding %q: %v", s, err)
	}
	for i, want := range []float32{0.5, -0.25, 0} {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != want {
			t.Errorf("[%d] = %v, want %v", i, got, want)
		}
	}
}

func TestEmbedErrors(t *testing.T) {
	tests := []struct {
		name, body string
		status     int
		msg        string
	}{
		{"tokens", `{"model":"m","input":[1,2,3]}`, 400, "text only"},
		{"token arrays", `{"model":"m","input":[[1,2],[3]]}`, 400, "text only"},
		{"empty", `{"model":"m","input":[]}`, 400, "empty"},
		{"no input", `{"model":"m"}`, 400, "required"},
		{"format", `{"model":"m","input":"x","encoding_format":"int8"}`, 400, "encoding_format"},
		{"missing model", `{"model":"missing","input":"x"}`, 404, "not found"},
	}
	f := newFake(t)
	e := f.engine(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := embedReq(tt.body)
			req.Model = ""
			r := e.Serve(context.Background(), req, &recordSink{})
			if r.Status != tt.status || !strings.Contains(r.Error.Message, tt.msg) {
				t.Fatalf("got %d %+v, want %d %q", r.Status, r.Error, tt.status, tt.msg)
			}
		})
	}
	if n := f.count("/api/embed"); n != 1 {
		t.Fatalf("Ollama received %d embed requests, want only the valid one", n)
	}
}

// An input over the model's context length is 413 on embeddings, Ollama's
// message and the type context_length_exceeded kept, whichever status
// Ollama sent it with; Ollama is told not to embed the start of it
// instead, as it does by default.
func TestEmbedTooLong(t *testing.T) {
	f := newFake(t)
	e := f.engine(t)
	for model, msg := range map[string]string{
		"toolong":        "the input length exceeds the context length",
		"toolong-runner": "the input length exceeds the context length",
	} {
		t.Run(model, func(t *testing.T) {
			req := embedReq(`{"model":"` + model + `","input":"x"}`)
			req.Model = ""
			r := e.Serve(context.Background(), req, &recordSink{})
			if r.Status != http.StatusRequestEntityTooLarge || r.Error == nil || r.Error.Type != "context_length_exceeded" || r.Error.Message != msg || r.Retryable {
				t.Fatalf("got %d %+v retryable=%v", r.Status, r.Error, r.Retryable)
			}
		})
	}
}
