package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
)

func TestStreamVLLM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const gap = 3 * time.Millisecond
		f := newMemFake(t, map[string]http.HandlerFunc{
			"/v1/chat/completions": sseHandler(gap, append(frames(vllmRole, vllmReasoning, vllmContent1, vllmContent2, vllmFinish, vllmUsage), done)...),
		})
		var s sink
		r := f.engine(t).Serve(context.Background(), chatReq(true, chatRequest), &s)
		wantStatus(t, r, 200)

		// What the engine was sent: streaming with usage forced, everything
		// else as the client wrote it.
		sent := f.last(t, "/v1/chat/completions")
		body := decode(t, sent.Body)
		if body["stream"] != true {
			t.Errorf("stream = %v", body["stream"])
		}
		if want := map[string]any{"include_usage": true, "continuous_usage_stats": false}; !reflect.DeepEqual(body["stream_options"], want) {
			t.Errorf("stream_options = %v, want %v", body["stream_options"], want)
		}
		if want := map[string]any{"keep": []any{1.0, 2.0, 3.0}}; !reflect.DeepEqual(body["x_custom"], want) {
			t.Errorf("unknown field x_custom = %v", body["x_custom"])
		}
		if !bytes.Contains(sent.Body, []byte(`"hi <there>"`)) {
			t.Errorf("message text re-escaped: %s", sent.Body)
		}
		if got := sent.Header.Get("Accept"); got != "text/event-stream" {
			t.Errorf("Accept = %q", got)
		}

		events := s.got()
		if len(events) != 5 {
			t.Fatalf("got %d events, want 5 (the usage chunk is not forwarded):\n%s", len(events), bytes.Join(events, []byte("\n")))
		}
		// Chunks with nothing to normalise go through byte for byte.
		for i, want := range map[int]string{0: vllmRole, 2: vllmContent1, 3: vllmContent2, 4: vllmFinish} {
			if string(events[i]) != want {
				t.Errorf("event %d changed:\n got %s\nwant %s", i, events[i], want)
			}
		}
		reasoning := decode(t, events[1])
		delta := path(reasoning, "choices", 0, "delta")
		if want := map[string]any{"reasoning": "The user greets.", "reasoning_content": "The user greets."}; !reflect.DeepEqual(delta, want) {
			t.Errorf("delta = %v, want %v", delta, want)
		}
		orig := decode(t, []byte(vllmReasoning))
		orig["choices"].([]any)[0].(map[string]any)["delta"] = delta
		if !reflect.DeepEqual(reasoning, orig) {
			t.Errorf("fields lost in rewrite:\n got %v\nwant %v", reasoning, orig)
		}

		if r.FinishReason != "stop" {
			t.Errorf("finish = %q", r.FinishReason)
		}
		wantUsage := &api.Usage{PromptTokens: 12, CompletionTokens: 9, TotalTokens: 21, ReasoningTokens: ptr(4)}
		if !reflect.DeepEqual(r.Usage, wantUsage) {
			t.Errorf("usage = %+v, want %+v", r.Usage, wantUsage)
		}
		// Measured on the worker: the first token (the reasoning chunk) comes
		// one gap after the role chunk. The arithmetic is checked exactly in
		// TestStatsResult; the clock here depends on scheduling.
		tm := r.Timing
		if tm.TTFTMs == nil || *tm.TTFTMs < ms(gap) {
			t.Errorf("ttft = %v, want >= %v", fmtp(tm.TTFTMs), ms(gap))
		}
		if tm.TokensPerSecond == nil || *tm.TokensPerSecond <= 0 {
			t.Errorf("tokens/s = %v, want measured", fmtp(tm.TokensPerSecond))
		}
		if tm.DraftAcceptanceRate != nil {
			t.Errorf("draft rate = %v, want unmeasured", *tm.DraftAcceptanceRate)
		}
	})
}

func TestStreamLlamaCpp(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{
		"/v1/chat/completions": sseHandler(0, append(frames(llamaRole, llamaReasoning, llamaContent, llamaFinish, llamaUsage), done)...),
	})
	var s sink
	r := newEngine(t, f.URL).Serve(context.Background(), chatReq(true, chatRequest), &s)
	wantStatus(t, r, 200)
	events := s.got()
	if len(events) != 4 {
		t.Fatalf("got %d events, want 4:\n%s", len(events), bytes.Join(events, []byte("\n")))
	}
	if string(events[0]) != llamaRole || string(events[2]) != llamaContent {
		t.Errorf("untouched chunks changed:\n%s\n%s", events[0], events[2])
	}
	if delta := path(decode(t, events[1]), "choices", 0, "delta"); !reflect.DeepEqual(delta, map[string]any{"reasoning": "Think", "reasoning_content": "Think"}) {
		t.Errorf("delta = %v", delta)
	}
	finish := decode(t, events[3])
	want := decode(t, []byte(llamaFinish))
	delete(want, "timings")
	if !reflect.DeepEqual(finish, want) {
		t.Errorf("finish chunk:\n got %v\nwant %v", finish, want)
	}
	for i, ev := range events {
		if bytes.Contains(ev, []byte(`"timings"`)) || bytes.Contains(ev, []byte(`"usage"`)) {
			t.Errorf("event %d carries engine stats: %s", i, ev)
		}
	}

	wantUsage := &api.Usage{PromptTokens: 12, CompletionTokens: 6, TotalTokens: 18, CachedTokens: ptr(4)}
	if !reflect.DeepEqual(r.Usage, wantUsage) {
		t.Errorf("usage = %+v, want %+v", r.Usage, wantUsage)
	}
	// llama.cpp's own timings win over the worker's clock.
	wantTiming := api.Timing{TTFTMs: ptr(35.25), TokensPerSecond: ptr(99.8), DraftAcceptanceRate: ptr(0.7)}
	if !reflect.DeepEqual(r.Timing, wantTiming) {
		t.Errorf("timing = %s, want %s", fmtTiming(r.Timing), fmtTiming(wantTiming))
	}
	if r.FinishReason != "stop" {
		t.Errorf("finish = %q", r.FinishReason)
	}
}

func TestStreamTimings(t *testing.T) {
	noDraft := strings.Replace(llamaUsage, `,"draft_n":10,"draft_n_accepted":7`, "", 1)
	zeroDraft := strings.Replace(llamaUsage, `"draft_n":10,"draft_n_accepted":7`, `"draft_n":0,"draft_n_accepted":0`, 1)
	tests := []struct {
		name                  string
		payloads              []string
		ttft, tps, draft      *float64
		measuredTTFT, measTPS bool
	}{
		{name: "llama.cpp without draft", payloads: []string{llamaContent, noDraft}, ttft: ptr(35.25), tps: ptr(99.8)},
		{name: "llama.cpp draft_n 0", payloads: []string{llamaContent, zeroDraft}, ttft: ptr(35.25), tps: ptr(99.8)},
		{name: "vllm spec metrics", payloads: []string{vllmContent1, vllmContent2, vllmFinish, vllmUsageSpec}, draft: ptr(0.75), measuredTTFT: true, measTPS: true},
		{name: "no usage: rate unknown", payloads: []string{genericChunk1, genericChunk2}, measuredTTFT: true},
		{name: "single token: rate unknown", payloads: []string{vllmContent1, strings.Replace(vllmUsage, `"completion_tokens":9`, `"completion_tokens":1`, 1)}, measuredTTFT: true},
		{name: "no token at all", payloads: []string{vllmRole, vllmFinish, vllmUsage}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newMemFake(t, map[string]http.HandlerFunc{
					"/v1/chat/completions": sseHandler(time.Millisecond, append(frames(tt.payloads...), done)...),
				})
				r := f.engine(t).Serve(context.Background(), chatReq(true, chatRequest), &sink{})
				wantStatus(t, r, 200)
				tm := r.Timing
				checkF := func(name string, got, want *float64, measured bool) {
					t.Helper()
					switch {
					case want != nil:
						if got == nil || *got != *want {
							t.Errorf("%s = %v, want %v", name, fmtp(got), *want)
						}
					case measured:
						if got == nil || *got <= 0 {
							t.Errorf("%s = %v, want measured", name, fmtp(got))
						}
					case got != nil:
						t.Errorf("%s = %v, want unmeasured", name, *got)
					}
				}
				checkF("ttft", tm.TTFTMs, tt.ttft, tt.measuredTTFT)
				checkF("tokens/s", tm.TokensPerSecond, tt.tps, tt.measTPS)
				checkF("draft", tm.DraftAcceptanceRate, tt.draft, false)
			})
		})
	}
}

func TestStreamGeneric(t *testing.T) {
	// A server that ignores include_usage and sends an SSE comment and
	// CRLF line ends.
	f := newFake(t, map[string]http.HandlerFunc{
		"/v1/chat/completions": sseHandler(0, ": keep-alive\r\n\r\n", "data: "+genericChunk1+"\r\n\r\n", "data: "+genericChunk2+"\r\n\r\n", "data: [DONE]\r\n\r\n"),
	})
	var s sink
	r := newEngine(t, f.URL).Serve(context.Background(), chatReq(true, chatRequest), &s)
	wantStatus(t, r, 200)
	if got := s.got(); len(got) != 2 || string(got[0]) != genericChunk1 || string(got[1]) != genericChunk2 {
		t.Fatalf("events = %q", got)
	}
	if r.Usage != nil || r.FinishReason != "length" {
		t.Fatalf("usage = %+v finish = %q", r.Usage, r.FinishReason)
	}
}

func TestStreamMultiLineData(t *testing.T) {
	pretty := "data: {\"id\":\"x\",\ndata:   \"choices\": [{\"index\":0,\"delta\":{\"content\":\"a b\"}}]}\n\n"
	f := newFake(t, map[string]http.HandlerFunc{
		"/v1/chat/completions": sseHandler(0, pretty, "data: {\"broken\":\ndata: }\n\n"),
	})
	var s sink
	r := newEngine(t, f.URL).Serve(context.Background(), chatReq(true, chatRequest), &s)
	got := s.got()
	if len(got) != 1 || string(got[0]) != `{"id":"x","choices":[{"index":0,"delta":{"content":"a b"}}]}` {
		t.Fatalf("events = %q", got)
	}
	wantStatus(t, r, 502)
	if !contains(errMsg(r), "decode chunk") {
		t.Fatalf("got %q", errMsg(r))
	}
}

func TestStreamBody(t *testing.T) {
	tests := []struct {
		name, in string
		opts     map[string]any
		wantErr  bool
	}{
		{name: "no options", in: `{"model":"m","stream":true}`, opts: map[string]any{"include_usage": true}},
		{name: "null options", in: `{"model":"m","stream":true,"stream_options":null}`, opts: map[string]any{"include_usage": true}},
		{name: "usage off, others kept", in: `{"model":"m","stream":false,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`, opts: map[string]any{"include_usage": true, "continuous_usage_stats": true}},
		{name: "options not an object", in: `{"model":"m","stream_options":"x"}`, opts: map[string]any{"include_usage": true}},
		{name: "not an object", in: `[1]`, wantErr: true},
		{name: "null", in: `null`, wantErr: true},
		{name: "not JSON", in: `{`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := streamBody([]byte(tt.in))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %s, want error", out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, plain := streamBodyPlain([]byte(tt.in)); !plain {
				t.Error("not read in one pass")
			}
			m := decode(t, out)
			if m["stream"] != true || !reflect.DeepEqual(m["stream_options"], tt.opts) || m["model"] != "m" {
				t.Fatalf("got %s", out)
			}
		})
	}

	// An invalid request never reaches the engine.
	f := newFake(t, nil)
	wantStatus(t, newEngine(t, f.URL).Serve(context.Background(), chatReq(true, `nope`), &sink{}), 400)
	if n := len(f.requests()); n != 0 {
		t.Fatalf("engine got %d requests", n)
	}
}

func TestStreamErrors(t *testing.T) {
	tests := []struct {
		name      string
		pieces    []string
		status    int
		retryable bool
		typ       string
		msg       string
		events    int
	}{
		{
			name:   "vllm flat error before output",
			pieces: frames(vllmStreamErr),
			status: 400, typ: "context_length_exceeded", msg: "maximum context length is 32768",
		},
		{
			name:   "nested error before output",
			pieces: frames(`{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`),
			status: 503, retryable: true, typ: "upstream_error", msg: "Loading model",
		},
		{
			name:   "llama.cpp error field before output",
			pieces: []string{"error: " + llamaStreamErrField + "\n\n", done},
			status: 500, retryable: true, typ: "server_error", msg: "failed to decode the batch",
		},
		{
			name:   "out of memory before output",
			pieces: frames(`{"error":{"message":"CUDA error: out of memory","type":"server_error","code":"oom"}}`),
			status: 507, typ: api.TypeInsufficientMemory, msg: "out of memory",
		},
		{
			name:   "error after output is a cut-off",
			pieces: frames(vllmRole, vllmContent1, `{"error":{"object":"error","message":"engine crashed","type":"InternalServerError","code":500}}`),
			status: 502, typ: api.TypeUpstream, msg: "engine crashed", events: 2,
		},
		{
			// The opening chunk has no output: an engine failing after
			// it has sent the client nothing, and another worker may serve.
			name:   "error after the empty opening chunk is before output",
			pieces: frames(vllmRole, `{"error":{"object":"error","message":"engine crashed","type":"InternalServerError","code":500}}`),
			status: 500, retryable: true, typ: api.TypeUpstream, msg: "engine crashed",
		},
		{
			name:   "llama.cpp error field after output",
			pieces: append(frames(llamaContent), "error: "+llamaStreamErrField+"\n\n", done),
			status: 502, typ: api.TypeUpstream, msg: "failed to decode the batch", events: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"/v1/chat/completions": sseHandler(0, tt.pieces...)})
			var s sink
			r := newEngine(t, f.URL).Serve(context.Background(), chatReq(true, chatRequest), &s)
			wantStatus(t, r, tt.status)
			if r.Retryable != tt.retryable || r.Error.Type != tt.typ || !contains(r.Error.Message, tt.msg) {
				t.Fatalf("got %+v retryable=%v", *r.Error, r.Retryable)
			}
			if n := len(s.got()); n != tt.events {
				t.Fatalf("%d events forwarded, want %d", n, tt.events)
			}
		})
	}
}

// abortAfter streams pieces and then drops the connection without ending
// the chunked body, as a crashed engine does.
func abortAfter(pieces ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sseHandler(0, pieces...)(w, r)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
}

// resetAfter answers with pieces as an event stream's body, then resets
// the connection (a TCP RST, not the orderly close abortAfter makes).
func resetAfter(pieces ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, p := range pieces {
			_, _ = fmt.Fprintf(buf, "%x\r\n%s\r\n", len(p), p)
		}
		// On loopback the pieces are on their way once written, and what
		// reached the client stays readable there after the reset.
		_ = buf.Flush()
		_ = conn.(*net.TCPConn).SetLinger(0)
		_ = conn.Close()
	}
}

func TestStreamCut(t *testing.T) {
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		status    int
		retryable bool
		msg       string
		events    int
	}{
		{name: "connection lost after output", handler: abortAfter(frames(vllmRole, vllmContent1)...), status: 502, msg: "cut off", events: 2},
		{name: "connection lost before output", handler: abortAfter(), status: 502, retryable: true, msg: "unreachable"},
		{name: "connection lost after the empty opening chunk", handler: abortAfter(frames(vllmRole)...), status: 502, retryable: true, msg: "unreachable"},
		{name: "an empty opening chunk goes with the first output", handler: sseHandler(0, frames(vllmRole, vllmContent1, vllmFinish)...), status: 200, events: 3},
		{name: "a chunk that is not JSON after output", handler: sseHandler(0, frames(vllmContent1, `{"id": "x", "choices": [ {not json`)...), status: 502, msg: "not a JSON object", events: 1},
		{name: "a chunk that is not an object before output", handler: sseHandler(0, frames(`[1,2]`)...), status: 502, retryable: true, msg: "not a JSON object"},
		{name: "connection lost mid-event", handler: abortAfter("data: " + vllmContent1[:40]), status: 502, retryable: true, msg: "unreachable"},
		{name: "clean end without [DONE] or finish", handler: sseHandler(0, frames(vllmRole, vllmContent1)...), status: 502, msg: "before [DONE]", events: 2},
		{name: "clean end with nothing sent", handler: sseHandler(0, ": ping\n\n"), status: 502, retryable: true, msg: "before [DONE]"},
		{name: "connection reset after finish and usage is complete", handler: resetAfter(frames(vllmContent1, vllmFinish, vllmUsage)...), status: 200, events: 2},
		{name: "connection reset after finish without usage", handler: resetAfter(frames(vllmContent1, vllmFinish)...), status: 502, msg: "cut off", events: 2},
		{name: "clean end after finish is complete", handler: sseHandler(0, frames(vllmContent1, vllmFinish, vllmUsage)...), status: 200, events: 2},
		{name: "missing final blank line", handler: sseHandler(0, "data: "+vllmContent1+"\n\ndata: [DONE]\n"), status: 200, events: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"/v1/chat/completions": tt.handler})
			var s sink
			r := newEngine(t, f.URL).Serve(context.Background(), chatReq(true, chatRequest), &s)
			wantStatus(t, r, tt.status)
			if r.Retryable != tt.retryable || !contains(errMsg(r), tt.msg) {
				t.Fatalf("got %q retryable=%v", errMsg(r), r.Retryable)
			}
			if n := len(s.got()); n != tt.events {
				t.Fatalf("%d events forwarded, want %d", n, tt.events)
			}
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		want      int
		typ       string
		retryable bool
	}{
		{"vllm model not found", 404, vllmNotFound, 404, api.TypeNotFound, false},
		{"llama.cpp context exceeded", 400, llamaContextErr, 400, "context_length_exceeded", false},
		{"vllm out of memory", 500, vllmOOM, 507, api.TypeInsufficientMemory, false},
		{"loading", 503, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, 503, "upstream_error", true},
		{"proxy text", 502, "Bad Gateway", 502, api.TypeUpstream, true},
		{"invalid request", 422, `{"detail":[{"loc":["body","messages"],"msg":"field required"}]}`, 422, api.TypeInvalidRequest, false},
	}
	for _, tt := range tests {
		for _, stream := range []bool{true, false} {
			name := tt.name + map[bool]string{true: "/stream", false: "/body"}[stream]
			t.Run(name, func(t *testing.T) {
				f := newFake(t, map[string]http.HandlerFunc{"/v1/chat/completions": jsonHandler(tt.status, tt.body)})
				var s sink
				r := newEngine(t, f.URL).Serve(context.Background(), chatReq(stream, chatRequest), &s)
				wantStatus(t, r, tt.want)
				if r.Error.Type != tt.typ || r.Retryable != tt.retryable {
					t.Fatalf("got %+v retryable=%v", *r.Error, r.Retryable)
				}
				if len(s.got()) != 0 || s.body != nil {
					t.Fatal("sink written on error")
				}
			})
		}
	}
}

func TestStreamCancel(t *testing.T) {
	tests := []struct {
		name string
		// stop ends the request once the first event arrived: by cancelling
		// the context or by failing the sink.
		cancelCtx bool
	}{
		{name: "context cancelled", cancelCtx: true},
		{name: "sink fails"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serverSaw := make(chan struct{})
			f := newFake(t, map[string]http.HandlerFunc{
				"/v1/chat/completions": func(w http.ResponseWriter, r *http.Request) {
					sseHandler(0, frames(vllmContent1)...)(w, r)
					select {
					case <-r.Context().Done():
						close(serverSaw)
					case <-time.After(10 * time.Second):
					}
				},
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := &sink{onEvent: func(int) error {
				if tt.cancelCtx {
					cancel()
					return nil
				}
				return errors.New("client went away")
			}}
			start := time.Now()
			r := newEngine(t, f.URL).Serve(ctx, chatReq(true, chatRequest), s)
			wantStatus(t, r, 499)
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("Serve took %v after cancellation", d)
			}
			select {
			case <-serverSaw:
			case <-time.After(5 * time.Second):
				t.Fatal("the engine did not see the request cancelled")
			}
		})
	}
}

func TestCancelBeforeHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		f := newMemFake(t, map[string]http.HandlerFunc{
			"/v1/chat/completions": func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-release:
				}
			},
		})
		e := f.engine(t)
		for _, stream := range []bool{true, false} {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			r := e.Serve(ctx, chatReq(stream, chatRequest), &sink{})
			cancel()
			wantStatus(t, r, 499)
		}
	})
}

func TestStreamJSONAnswer(t *testing.T) {
	// A server that ignores "stream": true and answers with one completion.
	f := newFake(t, map[string]http.HandlerFunc{"/v1/chat/completions": jsonHandler(200, llamaCompletion)})
	var s sink
	r := newEngine(t, f.URL).Serve(context.Background(), chatReq(true, chatRequest), &s)
	wantStatus(t, r, 200)
	events := s.got()
	if len(events) != 1 {
		t.Fatalf("got %d events", len(events))
	}
	chunk := decode(t, events[0])
	if chunk["object"] != "chat.completion.chunk" || chunk["usage"] != nil || chunk["timings"] != nil {
		t.Fatalf("chunk = %s", events[0])
	}
	want := map[string]any{"role": "assistant", "content": "Hi", "reasoning_content": "Think", "reasoning": "Think"}
	if d := path(chunk, "choices", 0, "delta"); !reflect.DeepEqual(d, want) {
		t.Fatalf("delta = %v", d)
	}
	if r.Usage == nil || r.Usage.TotalTokens != 18 || r.FinishReason != "stop" {
		t.Fatalf("result = %+v", r)
	}
}

// A streamed request answered with JSON that is not a completion is the
// engine's bad answer, retryable elsewhere, not an engine out of reach.
func TestStreamJSONAnswerNotACompletion(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"/v1/chat/completions": func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`<html>this is not json</html>`))
	}})
	var s sink
	r := newEngine(t, f.URL).Serve(context.Background(), chatReq(true, chatRequest), &s)
	wantStatus(t, r, 502)
	if !r.Retryable || !strings.Contains(r.Error.Message, "invalid response from the inference engine") || len(s.got()) != 0 {
		t.Fatalf("result %+v: %v", r, r.Error)
	}
}

func TestStreamDrainsForReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// After [DONE] the adapter reads the end of the body, so consecutive
		// requests share one connection.
		f := newMemFake(t, map[string]http.HandlerFunc{
			"/v1/chat/completions": func(w http.ResponseWriter, r *http.Request) {
				sseHandler(0, append(frames(vllmContent1, vllmFinish, vllmUsage), done)...)(w, r)
				// The end of the body comes a moment after [DONE].
				time.Sleep(2 * time.Millisecond)
			},
		})
		e := f.engine(t)
		for range 3 {
			wantStatus(t, e.Serve(context.Background(), chatReq(true, chatRequest), &sink{}), 200)
		}
		conns := map[string]bool{}
		for _, r := range f.requests() {
			conns[r.RemoteAddr] = true
		}
		if len(conns) != 1 {
			t.Fatalf("%d connections for 3 sequential requests", len(conns))
		}
	})
}

func fmtp(p *float64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

func fmtTiming(t api.Timing) string {
	return fmt.Sprintf("ttft=%v tps=%v draft=%v", fmtp(t.TTFTMs), fmtp(t.TokensPerSecond), fmtp(t.DraftAcceptanceRate))
}

// FuzzStreamBody checks that the plain path writes what decoding into
// maps writes, wherever it takes the body.
func FuzzStreamBody(f *testing.F) {
	for _, s := range []string{
		chatRequest,
		`{"model":"m","stream":true}`,
		`{"model":"m","stream":false,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`,
		`{"b":1,"a":[{"x":"}"}],"a":2,"stream_options":"x"}`,
		`{"stream_options":{"z":null,"include_usage":1,"z":{}}, "model" : "m" }`,
		`{"modèle":"m"}`,
		`{"mo\u0064el":"m"}`,
		`{"stream_options":{"\u0061":1}}`,
		`[1]`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		plain, ok := streamBodyPlain(b)
		if !ok {
			return
		}
		want, err := streamBodyDecoded(b)
		if err != nil || !bytes.Equal(plain, want) {
			t.Fatalf("%s:\nplain   %s\ndecoded %s (%v)", b, plain, want, err)
		}
	})
}

// An engine's bytes that are not UTF-8 reach the client as U+FFFD, streamed
// and not: JSON is UTF-8, and clients' decoders refuse anything else.
func TestNotUTF8IsReplaced(t *testing.T) {
	chunk := strings.Replace(vllmContent1, `"content":"`, "\"content\":\"\xff\xfe", 1)
	f := newFake(t, map[string]http.HandlerFunc{"/v1/chat/completions": sseHandler(0, frames(chunk, vllmFinish)...)})
	var s sink
	r := newEngine(t, f.URL).Serve(context.Background(), chatReq(true, chatRequest), &s)
	wantStatus(t, r, 200)
	for _, ev := range s.got() {
		if !utf8.Valid(ev) {
			t.Fatalf("event not UTF-8: %q", ev)
		}
	}
	if got := s.got(); len(got) != 2 || !strings.Contains(string(got[0]), "\uFFFDHello") {
		t.Fatalf("events %q", got)
	}
	body, _ := normaliseCompletion(validUTF8([]byte("{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"a\xffb\"},\"finish_reason\":\"stop\"}]}")), &stats{})
	if !utf8.Valid(body) || !strings.Contains(string(body), "a\uFFFDb") {
		t.Fatalf("body %q", body)
	}
}
