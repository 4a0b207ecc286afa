package ollama

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// completionReq builds a completion request for model from an OpenAI
// completions body.
func completionReq(model, body string) *engine.Request {
	return &engine.Request{Kind: api.KindCompletion, Model: model, Body: []byte(body)}
}

func TestGenerate(t *testing.T) {
	f := newFake(t)
	e := f.engine(t)
	body := `{"model":"guard-a:1b","prompt":"<|begin_of_text|>Task: check","max_tokens":20,"temperature":0,"seed":7,"stop":"<|eot_id|>","user":"u1"}`
	sink := &recordSink{}
	r := e.Serve(context.Background(), completionReq("llama-guard3:1b", body), sink)
	if r.Status != 200 || r.FinishReason != "stop" {
		t.Fatalf("result %d %q %+v", r.Status, r.FinishReason, r.Error)
	}

	// Sent raw, whole, with the sampling fields as options.
	want := `{"model":"llama-guard3:1b","options":{"num_predict":20,"seed":7,"stop":["<|eot_id|>"],"temperature":0},"prompt":"<|begin_of_text|>Task: check","raw":true,"stream":false,"truncate":false}`
	if got, want := jsonOf(t, f.last(t, "/api/generate")), canon(t, want); got != want {
		t.Fatalf("sent\n%s\nwant\n%s", got, want)
	}

	b := sink.body
	if !strings.HasPrefix(b["id"].(string), "cmpl-") || b["object"] != "text_completion" || b["created"] != float64(1700000000) || b["model"] != "llama-guard3:1b" {
		t.Fatalf("envelope %s", jsonOf(t, b))
	}
	if g, w := jsonOf(t, b["choices"]), canon(t, `[{"index":0,"text":"<b>unsafe</b>\nS1","finish_reason":"stop"}]`); g != w {
		t.Fatalf("choices\n got %s\nwant %s", g, w)
	}
	if g := jsonOf(t, b["usage"]); g != `{"completion_tokens":5,"prompt_tokens":10,"total_tokens":15}` {
		t.Fatalf("usage %s", g)
	}
	if g := jsonOf(t, r.Usage); g != `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}` {
		t.Fatalf("result usage %s", g)
	}
	if tm := r.Timing; tm.TTFTMs == nil || *tm.TTFTMs != 120 || tm.TokensPerSecond == nil || *tm.TokensPerSecond != 20 {
		t.Fatalf("timing %s", jsonOf(t, tm))
	}

	// No sampling fields, no options; the body's model when the request
	// names none; length is reported.
	r = e.Serve(context.Background(), completionReq("", `{"model":"long","prompt":"hi"}`), &recordSink{})
	if r.Status != 200 || r.FinishReason != "length" {
		t.Fatalf("result %d %q %+v", r.Status, r.FinishReason, r.Error)
	}
	if got := jsonOf(t, f.last(t, "/api/generate")); got != `{"model":"long","prompt":"hi","raw":true,"stream":false,"truncate":false}` {
		t.Fatalf("sent %s", got)
	}
}

// TestGenerateMarkup checks that the model's text is relayed as written:
// the prompt delimiters a guard echoes must not come out as \u003c.
func TestGenerateMarkup(t *testing.T) {
	e := newFake(t).engine(t)
	var raw rawSink
	if r := e.Serve(context.Background(), completionReq("g", `{"prompt":"x"}`), &raw); r.Status != 200 {
		t.Fatalf("result %d %+v", r.Status, r.Error)
	}
	if !strings.Contains(raw.body, `"text":"<b>unsafe</b>\nS1"`) {
		t.Fatalf("body %s", raw.body)
	}
}

// rawSink keeps a body as bytes.
type rawSink struct{ body string }

func (s *rawSink) Event(context.Context, []byte) error { return nil }

func (s *rawSink) Body(_ context.Context, data []byte) error {
	s.body = string(data)
	return nil
}

func TestGenerateErrors(t *testing.T) {
	tests := []struct {
		name      string
		model     string
		body      string
		stream    bool
		status    int
		typ       string
		retryable bool
		sent      bool
	}{
		{name: "missing", model: "missing", status: 404, typ: api.TypeNotFound, sent: true},
		{name: "out of memory", model: "oom", status: 507, typ: api.TypeInsufficientMemory, sent: true},
		{name: "not a generating model", model: "embedder", status: 400, typ: api.TypeInvalidRequest, sent: true},
		{name: "error in the answer", model: "errorline", status: 500, typ: api.TypeUpstream, retryable: true, sent: true},
		{name: "unreadable answer", model: "garbage", status: 502, typ: api.TypeUpstream, retryable: true, sent: true},
		{name: "streamed", model: "g", stream: true, status: 501, typ: api.TypeNotSupported},
		{name: "prompt not a string", model: "g", body: `{"prompt":["a"]}`, status: 400, typ: api.TypeInvalidRequest},
		{name: "bad stop", model: "g", body: `{"prompt":"a","stop":7}`, status: 400, typ: api.TypeInvalidRequest},
		{name: "not JSON", model: "g", body: `prompt=a`, status: 400, typ: api.TypeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			body := tt.body
			if body == "" {
				body = `{"prompt":"x"}`
			}
			req := completionReq(tt.model, body)
			req.Stream = tt.stream
			sink := &recordSink{}
			r := f.engine(t).Serve(context.Background(), req, sink)
			if r.Status != tt.status || r.Error == nil || r.Error.Type != tt.typ || r.Retryable != tt.retryable {
				t.Fatalf("got %d %+v retryable=%v, want %d %s retryable=%v", r.Status, r.Error, r.Retryable, tt.status, tt.typ, tt.retryable)
			}
			if sink.body != nil {
				t.Fatalf("body written: %v", sink.body)
			}
			if sent := f.count("/api/generate") > 0; sent != tt.sent {
				t.Fatalf("sent to Ollama: %v", sent)
			}
		})
	}
}

func TestGenerateCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := newFake(t).engine(t).Serve(ctx, completionReq("g", `{"prompt":"x"}`), &recordSink{})
	if r.Status != 499 {
		t.Fatalf("got %d %+v", r.Status, r.Error)
	}
}

// A prompt over the model's context is refused as the client's
// context_length_exceeded, chat (streamed or not) and raw prompts alike:
// Ollama is told not to drop the front of it and answer all the same,
// which would have a guard judge text without its policy.
func TestOverContextIsRefusedNotTruncated(t *testing.T) {
	f := newFake(t)
	e := f.engine(t)
	for name, req := range map[string]*engine.Request{
		"chat":          chatReq("toolong", false, `{"model":"toolong","messages":[{"role":"user","content":"long"}]}`),
		"chat streamed": chatReq("toolong", true, `{"model":"toolong","messages":[{"role":"user","content":"long"}],"stream":true}`),
		"raw prompt":    completionReq("toolong", `{"model":"guard-a:1b","prompt":"<|begin_of_text|>Task: check long","max_tokens":20}`),
	} {
		r := e.Serve(context.Background(), req, &recordSink{})
		if r.Status != http.StatusBadRequest || r.Error == nil || r.Error.Type != engine.TypeContextLengthExceeded ||
			!strings.Contains(r.Error.Message, "exceeds the available context size") || r.Retryable {
			t.Errorf("%s: %d %+v retryable=%v", name, r.Status, r.Error, r.Retryable)
		}
	}
}
