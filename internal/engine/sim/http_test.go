package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, srv *httptest.Server, path string, body []byte) *http.Response {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// frames splits an SSE body into its data payloads, checking the framing.
func frames(t *testing.T, body []byte) []string {
	t.Helper()
	if len(body) > 0 && !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", body[max(0, len(body)-40):])
	}
	var out []string
	for _, f := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		if f == "" {
			continue
		}
		data, ok := strings.CutPrefix(f, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("bad frame %q", f)
		}
		out = append(out, data)
	}
	return out
}

func TestHTTPModelsAndHealth(t *testing.T) {
	srv := newServer(t, NewHandler(fixedConfig()))
	resp, err := srv.Client().Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			Object      string `json:"object"`
			Created     int64  `json:"created"`
			OwnedBy     string `json:"owned_by"`
			MaxModelLen int    `json:"max_model_len"`
			Meta        struct {
				NCtxTrain int `json:"n_ctx_train"`
			} `json:"meta"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if list.Object != "list" || len(list.Data) != len(DefaultModels()) {
		t.Fatalf("list %+v", list)
	}
	for _, m := range list.Data {
		// Audio and image models have no context window to report.
		audio := m.ID == "sim-stt" || m.ID == "sim-tts" || m.ID == "sim-image"
		if m.Object != "model" || m.OwnedBy != "svc-sim" || (m.MaxModelLen == 0) != audio || m.MaxModelLen != m.Meta.NCtxTrain || m.Created == 0 {
			t.Fatalf("model %+v", m)
		}
	}

	resp, err = srv.Client().Get(srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("health %d", resp.StatusCode)
	}
}

func TestHTTPErrors(t *testing.T) {
	srv := newServer(t, NewHandler(fixedConfig()))
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		typ    string // after engine.ErrorResult
		code   string
	}{
		{"bad json", "/v1/chat/completions", `{"model":`, 400, api.TypeInvalidRequest, ""},
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, api.TypeNotFound, "model_not_found"},
		{"context too long", "/v1/chat/completions", `{"model":"sim-small","messages":[{"role":"user","content":"` + strings.Repeat("abcd", 5000) + `"}]}`, 400, "context_length_exceeded", "context_length_exceeded"},
		{"out of memory", "/v1/chat/completions", `{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"x\nsim: fail=507"}]}`, 507, api.TypeInsufficientMemory, ""},
		{"unavailable", "/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"user","content":"x\nsim: fail=503"}]}`, 503, api.TypeServiceUnavailable, ""},
		{"not supported", "/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"user","content":"x\nsim: fail=501"}]}`, 501, api.TypeNotSupported, ""},
		{"embeddings bad dims", "/v1/embeddings", `{"model":"sim-embed","input":"x","dimensions":9999}`, 400, api.TypeInvalidRequest, ""},
		{"unknown route", "/v1/responses", `{}`, 404, api.TypeNotFound, ""},
		{"completion prompt not a string", "/v1/completions", `{"model":"sim-chat","prompt":["a","b"]}`, 400, api.TypeInvalidRequest, ""},
		{"streamed completion, no prompt", "/v1/completions", `{"model":"sim-chat","stream":true}`, 400, api.TypeInvalidRequest, ""},
		{"completion unknown model", "/v1/completions", `{"model":"nope","prompt":"x"}`, 404, api.TypeNotFound, "model_not_found"},
		{"completion on embeddings model", "/v1/completions", `{"model":"sim-embed","prompt":"x"}`, 400, api.TypeInvalidRequest, ""},
		{"guard fails by directive", "/v1/completions", `{"model":"guard-a:1b","prompt":"x\nsim: fail=503"}`, 503, api.TypeServiceUnavailable, ""},
		{"bad verdict", "/v1/chat/completions", `{"model":"guard-b:4b","messages":[{"role":"user","content":"x\nsim: verdict=maybe"}]}`, 400, api.TypeInvalidRequest, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, srv, tt.path, []byte(tt.body))
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			var env struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &env); err != nil || env.Error.Message == "" || env.Error.Type == "" {
				t.Fatalf("envelope %s: %v", body, err)
			}
			if (tt.code == "") != (env.Error.Code == nil) || (env.Error.Code != nil && *env.Error.Code != tt.code) {
				t.Fatalf("code %v, want %q", env.Error.Code, tt.code)
			}
			if r := engine.ErrorResult(resp.StatusCode, body); r.Status != tt.status || r.Error.Type != tt.typ {
				t.Fatalf("ErrorResult %d %+v", r.Status, r.Error)
			}
		})
	}
}

func TestHTTPStreaming(t *testing.T) {
	cfg := fixedConfig()
	srv := newServer(t, NewHandler(cfg))
	for _, model := range []string{"sim-chat", "sim-reasoner", "sim-spec"} {
		t.Run(model, func(t *testing.T) {
			body := chatBody(t, model, "Tell me about rivers.", map[string]any{"stream": true})
			resp := post(t, srv, "/v1/chat/completions", body)
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			fs := frames(t, raw)
			if fs[len(fs)-1] != "[DONE]" {
				t.Fatalf("last frame %q", fs[len(fs)-1])
			}
			events := make([][]byte, 0, len(fs)-1)
			for _, f := range fs[:len(fs)-1] {
				events = append(events, []byte(f))
			}
			got := assemble(t, events)
			for _, c := range got.chunks {
				if c.Usage != nil || c.Timings != nil || len(c.Choices) == 0 {
					t.Fatalf("usage, timings or empty choices without asking: %+v", c)
				}
			}

			// The in-process engine streams the same reply.
			_, s := serve(t, New(cfg), api.KindChat, true, body)
			want := assemble(t, s.events)
			if got.content != want.content || got.reasoning != want.reasoning || got.finish != want.finish || len(events) != len(s.events) {
				t.Fatalf("HTTP %+v\nengine %+v", got, want)
			}
			// Only the configured reasoning field, as a real engine.
			if got.reasoningMirror != "" {
				t.Fatal("HTTP face mirrored reasoning onto a second field")
			}
			if model == "sim-chat" {
				for i := range events {
					if !bytes.Equal(events[i], s.events[i]) {
						t.Fatalf("chunk %d differs:\n%s\n%s", i, events[i], s.events[i])
					}
				}
			}
		})
	}
}

func TestHTTPIncludeUsageAndTimings(t *testing.T) {
	tests := []struct {
		name    string
		model   string
		usage   bool
		timings bool
	}{
		{"usage", "sim-chat", true, false},
		{"timings on the finish chunk", "sim-chat", false, true},
		{"timings on the usage chunk", "sim-reasoner", true, true},
		{"speculative", "sim-spec", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := testConfig()
			cfg.LlamaTimings = tt.timings
			srv := newServer(t, NewHandler(cfg))
			extra := map[string]any{"stream": true}
			if tt.usage {
				extra["stream_options"] = map[string]any{"include_usage": true}
			}
			resp := post(t, srv, "/v1/chat/completions", chatBody(t, tt.model, "Hello.\nsim: tokens=9", extra))
			raw, _ := io.ReadAll(resp.Body)
			fs := frames(t, raw)
			if fs[len(fs)-1] != "[DONE]" {
				t.Fatal("no [DONE]")
			}
			var chunks []chunkJSON
			for _, f := range fs[:len(fs)-1] {
				var c chunkJSON
				if err := json.Unmarshal([]byte(f), &c); err != nil {
					t.Fatal(err)
				}
				chunks = append(chunks, c)
			}
			last := chunks[len(chunks)-1]
			if tt.usage {
				if len(last.Choices) != 0 || last.Usage == nil || last.Usage.TotalTokens != last.Usage.PromptTokens+last.Usage.CompletionTokens {
					t.Fatalf("usage chunk %+v", last)
				}
				if !strings.Contains(fs[len(fs)-2], `"choices":[]`) {
					t.Fatalf("usage chunk choices not an empty array: %s", fs[len(fs)-2])
				}
				if n := last.Usage.CompletionTokens; n != len(chunks)-1 {
					t.Fatalf("usage says %d tokens for %d chunks", n, len(chunks)-1)
				}
			} else if last.Usage != nil || len(last.Choices) == 0 || last.Choices[0].FinishReason == nil {
				t.Fatalf("last chunk %+v", last)
			}
			for _, c := range chunks[:len(chunks)-1] {
				if c.Timings != nil {
					t.Fatal("timings before the last chunk")
				}
			}
			if !tt.timings {
				if last.Timings != nil {
					t.Fatal("timings without LlamaTimings")
				}
				return
			}
			tm := last.Timings
			n := 9.0
			if tt.model == "sim-reasoner" {
				n += 24
			}
			if tm["predicted_n"] != n || tm["prompt_n"] != 5 || tm["prompt_ms"] != 30 || tm["predicted_per_second"] != 100 || tm["predicted_ms"] != n*10 {
				t.Fatalf("timings %v", tm)
			}
			_, hasDraft := tm["draft_n"]
			if hasDraft != (tt.model == "sim-spec") {
				t.Fatalf("draft_n present = %v on %s", hasDraft, tt.model)
			}
			if hasDraft {
				rate := tm["draft_n_accepted"] / tm["draft_n"]
				res, _ := serve(t, New(cfg), api.KindChat, true, chatBody(t, tt.model, "Hello.\nsim: tokens=9", nil))
				if rate < 0.6 || rate > 0.85 || rate != *res.Timing.DraftAcceptanceRate {
					t.Fatalf("HTTP acceptance %v, engine %v", rate, *res.Timing.DraftAcceptanceRate)
				}
			}
		})
	}
}

func TestHTTPNonStreaming(t *testing.T) {
	cfg, _ := testConfig()
	cfg.LlamaTimings = true
	cfg.ReasoningField = "reasoning"
	srv := newServer(t, NewHandler(cfg))
	resp := post(t, srv, "/v1/chat/completions", chatBody(t, "sim-reasoner", "Why?", nil))
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	c := decodeCompletion(t, raw)
	msg := c.Choices[0].Message
	if c.Object != "chat.completion" || msg.Reasoning == nil || *msg.Reasoning == "" || msg.ReasoningContent != nil {
		t.Fatalf("reply %s", raw)
	}
	if c.Timings["predicted_n"] != float64(c.Usage.CompletionTokens) || c.Usage.CompletionTokensDetails == nil {
		t.Fatalf("timings %v usage %+v", c.Timings, c.Usage)
	}

	// Streaming deltas use the configured name too.
	resp = post(t, srv, "/v1/chat/completions", chatBody(t, "sim-reasoner", "Why?", map[string]any{"stream": true}))
	raw, _ = io.ReadAll(resp.Body)
	if !strings.Contains(string(raw), `"reasoning":`) || strings.Contains(string(raw), `"reasoning_content"`) {
		t.Fatalf("stream %s", raw[:200])
	}
}

func TestHTTPFailuresMidStream(t *testing.T) {
	srv := newServer(t, NewHandler(fixedConfig()))

	t.Run("error frame", func(t *testing.T) {
		resp := post(t, srv, "/v1/chat/completions", chatBody(t, "sim-chat", "x\nsim: fail=500 after=2 tokens=9", map[string]any{"stream": true}))
		raw, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		fs := frames(t, raw)
		if len(fs) != 3 || !strings.HasPrefix(fs[2], `{"error":{`) {
			t.Fatalf("frames %q", fs)
		}
		var c chunkJSON
		if err := json.Unmarshal([]byte(fs[2]), &c); err != nil || c.Error == nil || c.Error.Type != api.TypeServer {
			t.Fatalf("error frame %s", fs[2])
		}
	})

	t.Run("cut stream", func(t *testing.T) {
		resp := post(t, srv, "/v1/chat/completions", chatBody(t, "sim-chat", "x\nsim: fail=cut after=3 tokens=9", map[string]any{"stream": true}))
		raw, err := io.ReadAll(resp.Body)
		if err == nil {
			t.Fatal("a cut stream ended cleanly")
		}
		if bytes.Contains(raw, []byte("[DONE]")) {
			t.Fatal("a cut stream sent [DONE]")
		}
		if fs := frames(t, raw); len(fs) != 3 {
			t.Fatalf("%d frames before the cut, want 3", len(fs))
		}
	})

	t.Run("cut body", func(t *testing.T) {
		resp := post(t, srv, "/v1/chat/completions", chatBody(t, "sim-chat", "x\nsim: fail=cut", nil))
		raw, err := io.ReadAll(resp.Body)
		if err == nil && json.Valid(raw) {
			t.Fatalf("a cut body arrived whole: %s", raw)
		}
	})
}

// watched wraps a handler and counts the handlers still running.
type watched struct {
	h       http.Handler
	running atomic.Int32
	ended   chan struct{}
}

// busy is a handler of cfg on the real clock, with its requests watched,
// and a channel that gets a value once a request is busy: the simulator
// waits on its work, or, for a request told to hang, the handler has
// started.
func busy(cfg Config, hangs bool) (*watched, <-chan struct{}) {
	c := make(chan struct{}, 1)
	note := func() {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	cfg.Sleep = func(ctx context.Context, d time.Duration) error {
		note()
		return sleep(ctx, d)
	}
	h := NewHandler(cfg)
	if hangs {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			note()
			inner.ServeHTTP(w, r)
		})
	}
	return &watched{h: h, ended: make(chan struct{}, 1)}, c
}

func (w *watched) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w.running.Add(1)
	defer func() {
		w.running.Add(-1)
		w.ended <- struct{}{}
	}()
	w.h.ServeHTTP(rw, r)
}

func TestHTTPClientCancel(t *testing.T) {
	tests := []struct {
		name      string
		user      string
		stream    bool
		readFirst bool
		hangs     bool
	}{
		{"streaming", "x\nsim: tokens=100000", true, true, false},
		{"non-streaming", "x\nsim: tokens=100000", false, false, false},
		{"hang", "x\nsim: hang=1", true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The real clock, slow enough that the reply would take a
			// minute: only cancellation can end the handler in time.
			w, working := busy(Config{TokensPerSecond: 150}, tt.hangs)
			srv := newServer(t, w)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
				bytes.NewReader(chatBody(t, "sim-chat", tt.user, map[string]any{"stream": tt.stream})))
			done := make(chan struct{})
			go func() {
				defer close(done)
				resp, err := srv.Client().Do(req)
				if err != nil {
					return
				}
				defer resp.Body.Close()
				if tt.readFirst {
					line, err := bufio.NewReader(resp.Body).ReadString('\n')
					if err != nil || !strings.HasPrefix(line, "data: ") {
						t.Errorf("first line %q: %v", line, err)
					}
				}
				cancel()
				_, _ = io.Copy(io.Discard, resp.Body)
			}()
			if !tt.readFirst {
				<-working
				cancel()
			}
			<-done
			select {
			case <-w.ended:
			case <-time.After(5 * time.Second):
				t.Fatal("the handler kept generating after the client left")
			}
		})
	}
}

func TestHTTPEmbeddings(t *testing.T) {
	cfg := fixedConfig()
	srv := newServer(t, NewHandler(cfg))
	body := []byte(`{"model":"sim-embed","input":["a","b"],"encoding_format":"base64","dimensions":32}`)
	resp := post(t, srv, "/v1/embeddings", body)
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	_, s := serve(t, New(cfg), api.KindEmbeddings, false, body)
	if !bytes.Equal(bytes.TrimSpace(raw), s.body) {
		t.Fatalf("HTTP and engine differ:\n%s\n%s", raw, s.body)
	}
}

func TestHTTPSharedState(t *testing.T) {
	cfg, _ := testConfig()
	e := New(cfg)
	srv := newServer(t, e.Handler())
	resp := post(t, srv, "/v1/chat/completions", chatBody(t, "sim-cold", "x\nsim: tokens=1", nil))
	io.Copy(io.Discard, resp.Body)
	models, _ := e.Models(t.Context())
	for _, m := range models {
		if m.ID == "sim-cold" && !*m.Loaded {
			t.Fatal("a load through the HTTP face did not reach the engine")
		}
	}
	res, _ := serve(t, e, api.KindChat, false, chatBody(t, "sim-cold", "y", nil))
	if res.Timing.ColdStart != nil {
		t.Fatalf("cold again: %+v", res.Timing)
	}
}
