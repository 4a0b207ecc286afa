package openai

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// Recorded-style text completions of a guard model.
const (
	// vLLM 0.11 serving meta-llama/Llama-Guard-3-1B.
	vllmTextCompletion = `{"id":"cmpl-5b2e","object":"text_completion","created":1736000000,"model":"meta-llama/Llama-Guard-3-1B","choices":[{"index":0,"text":"\n\nunsafe\nS1","logprobs":null,"finish_reason":"stop","stop_reason":null,"prompt_logprobs":null}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":212,"total_tokens":217,"completion_tokens":5,"prompt_tokens_details":null},"kv_transfer_params":null}`
	vllmTextLength     = `{"id":"cmpl-5b2f","object":"text_completion","created":1736000000,"model":"meta-llama/Llama-Guard-3-1B","choices":[{"index":0,"text":"\n\nuns","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":212,"total_tokens":214,"completion_tokens":2}}`
	// llama-server b6xxx serving a Llama Guard 3 8B GGUF.
	llamaTextCompletion = `{"choices":[{"text":"safe","index":0,"logprobs":null,"finish_reason":"stop"}],"created":1736000000,"model":"llama-guard-3-8b-q4_k_m.gguf","system_fingerprint":"b6123-8e186ef0","object":"text_completion","usage":{"completion_tokens":2,"prompt_tokens":230,"total_tokens":232},"id":"cmpl-Zx9","timings":{"cache_n":0,"prompt_n":230,"prompt_ms":41.5,"prompt_per_token_ms":0.18,"prompt_per_second":5542.1,"predicted_n":2,"predicted_ms":20.2,"predicted_per_token_ms":10.1,"predicted_per_second":99.0}}`
	llamaTextNormalised = `{"choices":[{"text":"safe","index":0,"logprobs":null,"finish_reason":"stop"}],"created":1736000000,"id":"cmpl-Zx9","model":"llama-guard-3-8b-q4_k_m.gguf","object":"text_completion","system_fingerprint":"b6123-8e186ef0","usage":{"completion_tokens":2,"prompt_tokens":230,"total_tokens":232}}`
)

// guardRequest is a completion as the worker sends one: a raw prompt, a
// short cap, greedy decoding; x_custom checks that fields pass unchanged.
const guardRequest = `{"model":"guard-a:1b","prompt":"<|begin_of_text|>Task: check <b>this</b>","max_tokens":20,"temperature":0,"stop":["<|eot_id|>"],"stream":false,"stream_options":null,"x_custom":{"keep":[1,2,3]}}`

func completionReq(model, body string) *engine.Request {
	return &engine.Request{Kind: api.KindCompletion, Model: model, Body: []byte(body)}
}

func TestCompletion(t *testing.T) {
	tests := []struct {
		name, answer, want string
		finish             string
		usage              api.Usage
		ttft, tps          float64 // 0: not reported
	}{
		{name: "vllm", answer: vllmTextCompletion, want: vllmTextCompletion, finish: "stop",
			usage: api.Usage{PromptTokens: 212, CompletionTokens: 5, TotalTokens: 217}},
		{name: "vllm length", answer: vllmTextLength, want: vllmTextLength, finish: "length",
			usage: api.Usage{PromptTokens: 212, CompletionTokens: 2, TotalTokens: 214}},
		{name: "llama.cpp timings", answer: llamaTextCompletion, want: llamaTextNormalised, finish: "stop",
			usage: api.Usage{PromptTokens: 230, CompletionTokens: 2, TotalTokens: 232}, ttft: 41.5, tps: 99},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"/v1/completions": jsonHandler(200, tt.answer)})
			var s sink
			r := newEngine(t, f.URL).Serve(t.Context(), completionReq("meta-llama/Llama-Guard-3-1B", guardRequest), &s)
			wantStatus(t, r, http.StatusOK)
			if string(s.body) != tt.want {
				t.Fatalf("body\n%s\nwant\n%s", s.body, tt.want)
			}
			if r.Usage == nil || *r.Usage != tt.usage || r.FinishReason != tt.finish {
				t.Fatalf("usage %+v finish %q", r.Usage, r.FinishReason)
			}
			if (tt.ttft == 0) != (r.Timing.TTFTMs == nil) || (r.Timing.TTFTMs != nil && *r.Timing.TTFTMs != tt.ttft) ||
				(tt.tps == 0) != (r.Timing.TokensPerSecond == nil) || (r.Timing.TokensPerSecond != nil && *r.Timing.TokensPerSecond != tt.tps) {
				t.Fatalf("timing %+v", r.Timing)
			}

			// The request goes out as sent, with the engine's model name
			// and no streaming switches.
			got := f.last(t, "/v1/completions")
			if got.Method != http.MethodPost || got.Header.Get("Accept") != "application/json" || got.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("request %s %v", got.Method, got.Header)
			}
			want := `{"max_tokens":20,"model":"meta-llama/Llama-Guard-3-1B","prompt":"<|begin_of_text|>Task: check <b>this</b>","stop":["<|eot_id|>"],"temperature":0,"x_custom":{"keep":[1,2,3]}}`
			if string(got.Body) != want {
				t.Fatalf("sent\n%s\nwant\n%s", got.Body, want)
			}
		})
	}
}

func TestCompletionFailures(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		answer    string
		want      int
		typ       string
		retryable bool
	}{
		{"model not found", 404, vllmNotFound, 404, api.TypeNotFound, false},
		{"out of memory", 500, vllmOOM, 507, api.TypeInsufficientMemory, false},
		{"context too long", 400, llamaContextErr, 400, "context_length_exceeded", false},
		{"error with status 200", 200, `{"error":{"message":"model is loading","type":"unavailable","code":503}}`, 503, "upstream_error", true},
		{"not JSON", 200, `<html>oops</html>`, 502, api.TypeUpstream, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"/v1/completions": jsonHandler(tt.status, tt.answer)})
			var s sink
			r := newEngine(t, f.URL).Serve(t.Context(), completionReq("m", guardRequest), &s)
			wantStatus(t, r, tt.want)
			if r.Error.Type != tt.typ || r.Retryable != tt.retryable || s.body != nil {
				t.Fatalf("error %+v retryable=%v body=%s", *r.Error, r.Retryable, s.body)
			}
		})
	}
}

func TestCompletionRefused(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{
		"/v1/models":      jsonHandler(200, ollamaModels),
		"/v1/completions": jsonHandler(200, vllmTextCompletion),
	})
	e := newEngine(t, f.URL)
	wantStatus(t, e.Serve(t.Context(), completionReq("m", `["not","an","object"]`), &sink{}), http.StatusBadRequest)
	wantStatus(t, e.Serve(t.Context(), completionReq("m", `null`), &sink{}), http.StatusBadRequest)

	// Once the engine is known to be Ollama, whose /v1 templates the
	// prompt, completions are refused rather than judged wrongly.
	if _, err := e.Models(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := e.Serve(t.Context(), completionReq("llama-guard3:1b", guardRequest), &sink{})
	wantStatus(t, r, http.StatusNotImplemented)
	if r.Error.Type != api.TypeNotSupported || !contains(r.Error.Message, "--engine ollama") {
		t.Fatalf("error %+v", *r.Error)
	}
	streamed := completionReq("llama-guard3:1b", guardRequest)
	streamed.Stream = true
	wantStatus(t, e.Serve(t.Context(), streamed, &sink{}), http.StatusNotImplemented)
	for _, req := range f.requests() {
		if req.Path == "/v1/completions" {
			t.Fatalf("a refused completion reached the engine: %s", req.Body)
		}
	}
}

// Streamed text completions as vLLM and llama-server send them: the
// chunks pass on with usage and timings taken into the result, and the
// usage-only chunk is not passed on.
func TestCompletionStream(t *testing.T) {
	const (
		vllm1     = `{"id":"cmpl-9","object":"text_completion","created":1736000000,"model":"m","choices":[{"index":0,"text":"Once","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`
		vllm2     = `{"id":"cmpl-9","object":"text_completion","created":1736000000,"model":"m","choices":[{"index":0,"text":" more","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":null}`
		vllmUsage = `{"id":"cmpl-9","object":"text_completion","created":1736000000,"model":"m","choices":[],"usage":{"prompt_tokens":4,"total_tokens":6,"completion_tokens":2}}`
		llama1    = `{"choices":[{"text":"Once","index":0,"logprobs":null,"finish_reason":null}],"created":1736000000,"id":"cmpl-Z","model":"m","object":"text_completion"}`
		llama2    = `{"choices":[{"text":" more","index":0,"logprobs":null,"finish_reason":"length"}],"created":1736000000,"id":"cmpl-Z","model":"m","object":"text_completion","usage":{"completion_tokens":2,"prompt_tokens":4,"total_tokens":6},"timings":{"prompt_n":4,"prompt_ms":12.5,"predicted_n":2,"predicted_ms":20,"predicted_per_second":100}}`
		vllm1Out  = `{"choices":[{"index":0,"text":"Once","logprobs":null,"finish_reason":null,"stop_reason":null}],"created":1736000000,"id":"cmpl-9","model":"m","object":"text_completion"}`
		vllm2Out  = `{"choices":[{"index":0,"text":" more","logprobs":null,"finish_reason":"length","stop_reason":null}],"created":1736000000,"id":"cmpl-9","model":"m","object":"text_completion"}`
		llama2Out = `{"choices":[{"text":" more","index":0,"logprobs":null,"finish_reason":"length"}],"created":1736000000,"id":"cmpl-Z","model":"m","object":"text_completion"}`
	)
	tests := []struct {
		name   string
		frames []string
		want   []string
	}{
		{"vllm", append(frames(vllm1, vllm2, vllmUsage), done), []string{vllm1Out, vllm2Out}},
		{"llama.cpp", append(frames(llama1, llama2), done), []string{llama1, llama2Out}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"/v1/completions": sseHandler(0, tt.frames...)})
			req := completionReq("served-name", `{"model":"alias","prompt":"Tell","max_tokens":2,"stream":true,"stream_options":{"include_usage":false}}`)
			req.Stream = true
			var s sink
			r := newEngine(t, f.URL).Serve(t.Context(), req, &s)
			wantStatus(t, r, http.StatusOK)
			if len(s.events) != len(tt.want) || s.body != nil {
				t.Fatalf("events %q body %s", s.events, s.body)
			}
			for i := range tt.want {
				if string(s.events[i]) != tt.want[i] {
					t.Fatalf("event %d\n%s\nwant\n%s", i, s.events[i], tt.want[i])
				}
			}
			if r.Usage == nil || *r.Usage != (api.Usage{PromptTokens: 4, CompletionTokens: 2, TotalTokens: 6}) || r.FinishReason != "length" {
				t.Fatalf("usage %+v finish %q", r.Usage, r.FinishReason)
			}
			// The first text is the first token, whatever the engine timed.
			if r.Timing.TTFTMs == nil {
				t.Fatalf("timing %+v", r.Timing)
			}
			// The engine is asked for a stream with usage, under its own
			// name for the model.
			var sent struct {
				Model         string `json:"model"`
				Stream        bool   `json:"stream"`
				StreamOptions struct {
					IncludeUsage bool `json:"include_usage"`
				} `json:"stream_options"`
			}
			if err := json.Unmarshal(f.last(t, "/v1/completions").Body, &sent); err != nil || sent.Model != "served-name" ||
				!sent.Stream || !sent.StreamOptions.IncludeUsage {
				t.Fatalf("sent %+v %v", sent, err)
			}
		})
	}

	// A server that answers a streaming request whole: one chunk.
	f := newFake(t, map[string]http.HandlerFunc{"/v1/completions": jsonHandler(200, llamaTextCompletion)})
	req := completionReq("m", guardRequest)
	req.Stream = true
	var s sink
	r := newEngine(t, f.URL).Serve(t.Context(), req, &s)
	wantStatus(t, r, http.StatusOK)
	if len(s.events) != 1 || string(s.events[0]) != `{"choices":[{"text":"safe","index":0,"logprobs":null,"finish_reason":"stop"}],"created":1736000000,"id":"cmpl-Zx9","model":"llama-guard-3-8b-q4_k_m.gguf","object":"text_completion","system_fingerprint":"b6123-8e186ef0"}` ||
		r.Usage == nil || r.Usage.CompletionTokens != 2 {
		t.Fatalf("events %q usage %+v", s.events, r.Usage)
	}
}
