package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

func TestChatBody(t *testing.T) {
	const req = `{"model":"m","messages":[{"role":"user","content":"hi"}],"x_custom":true}`
	tests := []struct {
		name      string
		answer    string
		identical bool // forwarded byte for byte
		message   map[string]any
		usage     *api.Usage
		finish    string
		timing    api.Timing
	}{
		{
			name:    "llama.cpp: timings removed, usage kept, reasoning mirrored",
			answer:  llamaCompletion,
			message: map[string]any{"role": "assistant", "content": "Hi", "reasoning_content": "Think", "reasoning": "Think"},
			usage:   &api.Usage{PromptTokens: 12, CompletionTokens: 6, TotalTokens: 18, CachedTokens: ptr(4)},
			finish:  "stop",
			timing:  api.Timing{TTFTMs: ptr(35.25), TokensPerSecond: ptr(99.8)},
		},
		{
			name:   "vllm: reasoning mirrored, nothing measured",
			answer: vllmCompletion,
			message: map[string]any{"role": "assistant", "content": "Hello there", "refusal": nil, "annotations": nil, "audio": nil,
				"function_call": nil, "tool_calls": []any{}, "reasoning": "The user greets.", "reasoning_content": "The user greets."},
			usage:  &api.Usage{PromptTokens: 12, CompletionTokens: 9, TotalTokens: 21},
			finish: "stop",
		},
		{
			name:      "nothing to change",
			answer:    vllmPlainCompletion,
			identical: true,
			usage:     &api.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5},
			finish:    "length",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"/v1/chat/completions": jsonHandler(200, tt.answer)})
			var s sink
			r := newEngine(t, f.URL).Serve(context.Background(), chatReq(false, req), &s)
			wantStatus(t, r, 200)
			if sent := f.last(t, "/v1/chat/completions"); string(sent.Body) != req {
				t.Fatalf("request changed: %s", sent.Body)
			}
			if len(s.got()) != 0 {
				t.Fatal("Event used for a non-streaming answer")
			}
			if tt.identical && string(s.body) != tt.answer {
				t.Fatalf("body changed:\n got %s\nwant %s", s.body, tt.answer)
			}
			body := decode(t, s.body)
			if _, ok := body["timings"]; ok {
				t.Error("timings forwarded")
			}
			want := decode(t, []byte(tt.answer))
			if body["usage"] == nil || !reflect.DeepEqual(body["usage"], want["usage"]) {
				t.Errorf("usage in body = %v, want %v", body["usage"], want["usage"])
			}
			if tt.message != nil {
				if m := path(body, "choices", 0, "message"); !reflect.DeepEqual(m, tt.message) {
					t.Errorf("message = %v\nwant %v", m, tt.message)
				}
			}
			// Every other field survives.
			delete(want, "timings")
			delete(body, "choices")
			delete(want, "choices")
			if !reflect.DeepEqual(body, want) {
				t.Errorf("fields changed:\n got %v\nwant %v", body, want)
			}
			if !reflect.DeepEqual(r.Usage, tt.usage) || r.FinishReason != tt.finish {
				t.Errorf("usage = %+v finish = %q", r.Usage, r.FinishReason)
			}
			if !reflect.DeepEqual(r.Timing, tt.timing) {
				t.Errorf("timing = %s, want %s", fmtTiming(r.Timing), fmtTiming(tt.timing))
			}
		})
	}
}

func TestChatBodyFailures(t *testing.T) {
	const testMaxBody = 4 << 10
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		status    int
		msg       string
		retryable bool
	}{
		{name: "error with status 200", handler: jsonHandler(200, `{"error":{"message":"model is loading","code":503}}`), status: 503, msg: "model is loading", retryable: true},
		{name: "not JSON", handler: jsonHandler(200, `<html>oops</html>`), status: 502, msg: "invalid response", retryable: true},
		{name: "connection lost mid-body", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "1000")
			io.WriteString(w, `{"id":`)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, status: 502, msg: "read response", retryable: true},
		{name: "too large", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[],"pad":"`+strings.Repeat("0", testMaxBody)+`"}`)
		}, status: 502, msg: "too large"},
		{name: "at the limit", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			const head, tail = `{"choices":[],"pad":"`, `"}`
			io.WriteString(w, head+strings.Repeat("0", testMaxBody-len(head)-len(tail))+tail)
		}, status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"/v1/chat/completions": tt.handler})
			var s sink
			e := newEngine(t, f.URL)
			e.maxBody = testMaxBody
			r := e.Serve(context.Background(), chatReq(false, `{"model":"m"}`), &s)
			wantStatus(t, r, tt.status)
			if !contains(errMsg(r), tt.msg) || r.Retryable != tt.retryable {
				t.Fatalf("got %q retryable=%v", errMsg(r), r.Retryable)
			}
			if (s.body != nil) != (tt.status == 200) {
				t.Fatalf("body forwarded: %v", s.body != nil)
			}
		})
	}
}

type failingSink struct{ sink }

func (*failingSink) Body(context.Context, []byte) error { return errors.New("gone") }

func TestSinkBodyFailureIsCancelled(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{
		"/v1/chat/completions": jsonHandler(200, vllmPlainCompletion),
		"/v1/embeddings":       jsonHandler(200, embeddingsBody),
	})
	e := newEngine(t, f.URL)
	wantStatus(t, e.Serve(context.Background(), chatReq(false, `{}`), &failingSink{}), 499)
	wantStatus(t, e.Serve(context.Background(), &engine.Request{Kind: api.KindEmbeddings, Body: []byte(`{}`)}, &failingSink{}), 499)
}

func TestEmbeddings(t *testing.T) {
	const req = `{"model":"BAAI/bge-m3","input":["a","b"],"encoding_format":"float","dimensions":3}`
	noUsage := strings.Replace(embeddingsBody, `,"usage":{"prompt_tokens":7,"total_tokens":7,"completion_tokens":0,"prompt_tokens_details":null}`, "", 1)
	tests := []struct {
		name   string
		status int
		answer string
		want   int
		usage  *api.Usage
	}{
		{name: "passthrough with usage", status: 200, answer: embeddingsBody, want: 200, usage: &api.Usage{PromptTokens: 7, TotalTokens: 7}},
		{name: "no usage", status: 200, answer: noUsage, want: 200},
		{name: "model without embeddings", status: 501, answer: `{"error":{"code":501,"message":"This server does not support embeddings. Start it with --embeddings","type":"not_supported_error"}}`, want: 501},
		{name: "too long", status: 400, answer: `{"object":"error","message":"This model's maximum context length is 512 tokens","type":"BadRequestError","param":null,"code":400}`, want: 413},
		{name: "too long, TEI", status: 413, answer: "{\"message\":\"Input validation error: `inputs` must have less than 512 tokens. Given: 600\",\"code\":413,\"type\":\"Validation\"}", want: 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"/v1/embeddings": jsonHandler(tt.status, tt.answer)})
			var s sink
			r := newEngine(t, f.URL+"/v1").Serve(context.Background(), &engine.Request{Kind: api.KindEmbeddings, Model: "BAAI/bge-m3", Body: []byte(req)}, &s)
			wantStatus(t, r, tt.want)
			if sent := f.last(t, "/v1/embeddings"); string(sent.Body) != req || sent.Method != http.MethodPost {
				t.Fatalf("sent %s %s", sent.Method, sent.Body)
			}
			if tt.want != 200 {
				if s.body != nil {
					t.Fatal("error body forwarded")
				}
				return
			}
			if string(s.body) != tt.answer {
				t.Fatalf("body changed: %s", s.body)
			}
			if !reflect.DeepEqual(r.Usage, tt.usage) {
				t.Fatalf("usage = %+v, want %+v", r.Usage, tt.usage)
			}
			if r.Timing != (api.Timing{}) {
				t.Fatalf("timing = %s", fmtTiming(r.Timing))
			}
		})
	}
}

func TestLastValue(t *testing.T) {
	tests := map[string]string{
		`{"usage":{"a":1}}`:                      `{"a":1}`,
		`{"data":[{"usage":1}],"usage":{"b":2}}`: `{"b":2}`,
		`{"x":"usage","y":1}`:                    ``,
		`{"usage" : null}`:                       `null`,
		`{"usage":{"a":`:                         ``,
	}
	for in, want := range tests {
		if got := lastValue([]byte(in), keyUsage); string(got) != want {
			t.Errorf("lastValue(%s) = %s, want %s", in, got, want)
		}
	}
}

// receiverSink is a sink told of the bytes of a whole answer as they come.
type receiverSink struct {
	sink
	got chan struct{}
}

func (s *receiverSink) Receiving() {
	select {
	case s.got <- struct{}{}:
	default:
	}
}

// TestWholeAnswerTellsItsBytes: a whole answer's bytes are told to a sink
// that asks as they come, before the answer is read whole: a worker
// watches an answer that began to come and stopped as a stall, where one
// not yet begun may be an engine still working it out.
func TestWholeAnswerTellsItsBytes(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"/v1/chat/completions": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "200")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.comp`))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}})
	e := f.engine(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := &receiverSink{got: make(chan struct{}, 1)}
	done := make(chan *api.Result, 1)
	go func() {
		done <- e.Serve(ctx, &engine.Request{Kind: api.KindChat, Model: "m", Body: []byte(`{"model":"m","messages":[]}`)}, s)
	}()
	select {
	case <-s.got:
	case res := <-done:
		t.Fatalf("the engine returned before its answer came whole: %+v", res)
	case <-time.After(10 * time.Second):
		t.Fatal("the answer's first bytes were not told")
	}
	cancel()
	if res := <-done; res.Status != 499 {
		t.Fatalf("a whole answer stopped and cancelled: %+v", res)
	}
}

// Usage whose counts the worker does not believe leaves the whole answer,
// so that the client reads the usage the gateway accounts in its place;
// usage it believes stays as the engine wrote it.
func TestNormaliseCompletionUnbelievedUsage(t *testing.T) {
	const choices = `"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]`
	tests := []struct {
		name, in, want string
		counted        bool
	}{
		{"negative", `{` + choices + `,"usage":{"completion_tokens":-5}}`, `{` + choices + `}`, false},
		{"a string", `{` + choices + `,"usage":"lots"}`, `{` + choices + `}`, false},
		{"not an object", `{` + choices + `,"usage":7}`, `{` + choices + `}`, false},
		{"past any context", `{` + choices + `,"usage":{"prompt_tokens":1e15}}`, `{` + choices + `}`, false},
		{"believed", `{` + choices + `,"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`,
			`{` + choices + `,"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`, true},
		{"null", `{` + choices + `,"usage":null}`, `{` + choices + `,"usage":null}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st stats
			out, res := normaliseCompletion([]byte(tt.in), &st)
			if res != nil {
				t.Fatalf("result %+v", res)
			}
			if !jsonEqual(out, []byte(tt.want)) {
				t.Fatalf("body %s, want %s", out, tt.want)
			}
			if (st.usage != nil) != tt.counted || st.finish != "stop" {
				t.Fatalf("usage %+v, finish %q", st.usage, st.finish)
			}
		})
	}
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(a, b []byte) bool {
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && reflect.DeepEqual(va, vb)
}
