package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// The fake engines below answer with payloads shaped like the ones the real
// servers send (field order, nulls, separate usage chunks and all), so the
// tests exercise the same bytes the adapter meets in production.

// Recorded-style vLLM (0.11, --reasoning-parser qwen3) answers.
const (
	vllmModels = `{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","created":1736000000,"owned_by":"vllm","root":"Qwen/Qwen3-8B","parent":null,"max_model_len":32768,"permission":[{"id":"modelperm-8f1c","object":"model_permission","created":1736000000,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}]}`

	vllmRole      = `{"id":"chatcmpl-7d1e","object":"chat.completion.chunk","created":1736000000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`
	vllmReasoning = `{"id":"chatcmpl-7d1e","object":"chat.completion.chunk","created":1736000000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"reasoning":"The user greets."},"logprobs":null,"finish_reason":null}]}`
	vllmContent1  = `{"id":"chatcmpl-7d1e","object":"chat.completion.chunk","created":1736000000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}`
	vllmContent2  = `{"id":"chatcmpl-7d1e","object":"chat.completion.chunk","created":1736000000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"content":" there <b>&</b>"},"logprobs":null,"finish_reason":null}]}`
	vllmFinish    = `{"id":"chatcmpl-7d1e","object":"chat.completion.chunk","created":1736000000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}`
	vllmUsage     = `{"id":"chatcmpl-7d1e","object":"chat.completion.chunk","created":1736000000,"model":"Qwen/Qwen3-8B","choices":[],"usage":{"prompt_tokens":12,"total_tokens":21,"completion_tokens":9,"completion_tokens_details":{"reasoning_tokens":4},"prompt_tokens_details":null}}`
	vllmUsageSpec = `{"id":"chatcmpl-7d1e","object":"chat.completion.chunk","created":1736000000,"model":"Qwen/Qwen3-8B","choices":[],"usage":{"prompt_tokens":12,"total_tokens":21,"completion_tokens":9},"metrics":{"speculative_decoding":{"num_spec_steps":4,"num_draft_tokens":12,"num_accepted_draft_tokens":9,"draft_acceptance_rate":0.75,"mean_acceptance_length":3.25}}}`

	vllmCompletion      = `{"id":"chatcmpl-7d1e","object":"chat.completion","created":1736000000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning":"The user greets."},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":12,"total_tokens":21,"completion_tokens":9,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}`
	vllmPlainCompletion = `{"id":"chatcmpl-1","object":"chat.completion","created":1736000000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}`

	vllmNotFound  = `{"object":"error","message":"The model ` + "`nope`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}`
	vllmOOM       = `{"object":"error","message":"CUDA out of memory. Tried to allocate 2.00 GiB","type":"InternalServerError","param":null,"code":500}`
	vllmStreamErr = `{"object":"error","message":"This model's maximum context length is 32768 tokens. However, you requested 40000 tokens.","type":"BadRequestError","param":null,"code":400}`
)

// Recorded-style llama.cpp llama-server (b6xxx, --reasoning-format
// deepseek, with a draft model) answers.
const (
	llamaModels = `{"models":[{"name":"qwen3-8b-q4_k_m.gguf","model":"qwen3-8b-q4_k_m.gguf","modified_at":"","size":"","digest":"","type":"model","description":"","tags":[""],"capabilities":["completion"],"parameters":"","details":{"parent_model":"","format":"gguf","family":"","families":[""],"parameter_size":"","quantization_level":""}}],"object":"list","data":[{"id":"qwen3-8b-q4_k_m.gguf","object":"model","created":1736000000,"owned_by":"llamacpp","meta":{"vocab_type":2,"n_vocab":151936,"n_ctx_train":40960,"n_embd":4096,"n_params":8190735360,"size":5027783488}}]}`
	llamaProps  = `{"default_generation_settings":{"id":0,"id_task":-1,"n_ctx":8192,"speculative":true,"is_processing":false,"params":{"n_predict":-1,"seed":4294967295,"temperature":0.8}},"total_slots":4,"model_path":"/models/qwen3-8b-q4_k_m.gguf","modalities":{"vision":false,"audio":false},"chat_template":"{%- for message in messages %}...","build_info":"b6123-8e186ef0"}`

	llamaRole      = `{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1736000000,"id":"chatcmpl-Kq2","model":"qwen3-8b-q4_k_m.gguf","system_fingerprint":"b6123-8e186ef0","object":"chat.completion.chunk"}`
	llamaReasoning = `{"choices":[{"finish_reason":null,"index":0,"delta":{"reasoning_content":"Think"}}],"created":1736000000,"id":"chatcmpl-Kq2","model":"qwen3-8b-q4_k_m.gguf","system_fingerprint":"b6123-8e186ef0","object":"chat.completion.chunk"}`
	llamaContent   = `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hi"}}],"created":1736000000,"id":"chatcmpl-Kq2","model":"qwen3-8b-q4_k_m.gguf","system_fingerprint":"b6123-8e186ef0","object":"chat.completion.chunk"}`
	llamaTimingsJS = `{"cache_n":4,"prompt_n":8,"prompt_ms":35.25,"prompt_per_token_ms":4.4,"prompt_per_second":226.9,"predicted_n":6,"predicted_ms":60.1,"predicted_per_token_ms":10.0,"predicted_per_second":99.8,"draft_n":10,"draft_n_accepted":7}`
	llamaFinish    = `{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1736000000,"id":"chatcmpl-Kq2","model":"qwen3-8b-q4_k_m.gguf","system_fingerprint":"b6123-8e186ef0","object":"chat.completion.chunk","timings":` + llamaTimingsJS + `}`
	llamaUsage     = `{"choices":[],"created":1736000000,"id":"chatcmpl-Kq2","model":"qwen3-8b-q4_k_m.gguf","system_fingerprint":"b6123-8e186ef0","object":"chat.completion.chunk","usage":{"completion_tokens":6,"prompt_tokens":12,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":4}},"timings":` + llamaTimingsJS + `}`

	llamaCompletion = `{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":"Hi","reasoning_content":"Think"}}],"created":1736000000,"model":"qwen3-8b-q4_k_m.gguf","system_fingerprint":"b6123-8e186ef0","object":"chat.completion","usage":{"completion_tokens":6,"prompt_tokens":12,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":4}},"id":"chatcmpl-Kq2","timings":{"cache_n":4,"prompt_n":8,"prompt_ms":35.25,"prompt_per_token_ms":4.4,"prompt_per_second":226.9,"predicted_n":6,"predicted_ms":60.1,"predicted_per_token_ms":10.0,"predicted_per_second":99.8}}`

	llamaContextErr = `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}`
	// Older builds send a streaming error as a non-standard "error:" field.
	llamaStreamErrField = `{"code":500,"message":"failed to decode the batch","type":"server_error"}`
)

// A generic OpenAI-compatible server: no reasoning, ignores
// stream_options, lists an embedding model.
const (
	genericModels = `{"object":"list","data":[{"id":"my-chat-model","object":"model","created":0,"owned_by":"system","context_length":16384},{"id":"BAAI/bge-m3","object":"model","created":0,"owned_by":"system","context_window":8192},{"id":"","object":"model"},{"id":"odd","context_length":"4096","owned_by":"system"}]}`
	genericChunk1 = `{"id":"x","object":"chat.completion.chunk","created":1,"model":"my-chat-model","choices":[{"index":0,"delta":{"role":"assistant","content":"A"},"finish_reason":null}]}`
	genericChunk2 = `{"id":"x","object":"chat.completion.chunk","created":1,"model":"my-chat-model","choices":[{"index":0,"delta":{"content":"B"},"finish_reason":"length"}]}`

	ollamaModels = `{"object":"list","data":[{"id":"qwen3:8b","object":"model","created":1736000000,"owned_by":"library"},{"id":"nomic-embed-text:latest","object":"model","created":1736000000,"owned_by":"library"}]}`
	sglangModels = `{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","created":1736000000,"owned_by":"sglang","root":"Qwen/Qwen3-8B","max_model_len":40960}]}`

	embeddingsBody = `{"object":"list","data":[{"object":"embedding","embedding":[0.0123,-0.0456,0.0789],"index":0},{"object":"embedding","embedding":[0.1,0.2,0.3],"index":1}],"model":"BAAI/bge-m3","usage":{"prompt_tokens":7,"total_tokens":7,"completion_tokens":0,"prompt_tokens_details":null}}`
)

// chatRequest is a client request with a field no engine knows, to check
// that unknown fields travel unchanged.
const chatRequest = `{"model":"m","messages":[{"role":"user","content":"hi <there>"}],"stream":true,"stream_options":{"continuous_usage_stats":false},"x_custom":{"keep":[1,2,3]}}`

// received is a request a fake engine got.
type received struct {
	Method, Path string
	RemoteAddr   string // tells connections apart
	Header       http.Header
	Body         []byte
}

// fake is a test server with a recorder. Handlers are keyed by path.
type fake struct {
	*httptest.Server
	// dial reaches the server; nil for one on loopback.
	dial DialFunc
	mu   sync.Mutex
	reqs []received
}

func newFake(t *testing.T, routes map[string]http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{}
	f.Server = httptest.NewServer(f.handler(routes))
	t.Cleanup(f.Close)
	return f
}

// newMemFake is newFake served over in-memory connections, for tests in
// a synctest bubble; f.engine reaches it.
func newMemFake(t *testing.T, routes map[string]http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{}
	m := newMemServer(t, f.handler(routes))
	f.Server, f.dial = m.Server, m.dial
	return f
}

func (f *fake) handler(routes map[string]http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, received{Method: r.Method, Path: r.URL.Path, RemoteAddr: r.RemoteAddr, Header: r.Header.Clone(), Body: body})
		f.mu.Unlock()
		h, ok := routes[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h(w, r)
	})
}

// engine is an engine of the fake's server.
func (f *fake) engine(t *testing.T) *Engine {
	t.Helper()
	return newEngineWith(t, f.URL, f.dial)
}

// memServer is a test server reached over in-memory connections. In a
// synctest bubble a goroutine reading a socket is not durably blocked, so
// the bubble's clock would stand still while a request is in flight; one
// reading a net.Pipe is.
type memServer struct {
	*httptest.Server
	dial DialFunc
}

func newMemServer(t *testing.T, h http.Handler) *memServer {
	t.Helper()
	ln := &memListener{conns: make(chan net.Conn), closed: make(chan struct{})}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &memServer{Server: srv, dial: ln.dial}
}

// engine is an engine of the server.
func (m *memServer) engine(t *testing.T) *Engine {
	t.Helper()
	return newEngineWith(t, m.URL, m.dial)
}

// memListener accepts the connections its dial makes: each a net.Pipe
// with an address of its own, so a server tells them apart as it would
// sockets.
type memListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
	n      atomic.Int64
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr("fake-server") }

func (l *memListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	c := addrConn{server, memAddr(fmt.Sprintf("pipe-%d", l.n.Add(1)))}
	select {
	case l.conns <- c:
		return client, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

// addrConn is a connection with a remote address of its own.
type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

func (f *fake) requests() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.reqs...)
}

func (f *fake) last(t *testing.T, path string) received {
	t.Helper()
	reqs := f.requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Path == path {
			return reqs[i]
		}
	}
	t.Fatalf("no request to %s; got %v", path, reqs)
	return received{}
}

// jsonHandler answers with status and body.
func jsonHandler(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// sseHandler streams the given raw SSE text pieces, flushing after each,
// each gap after the one before and the first gap after the headers: the
// time to a first token, which on a synctest clock is otherwise none.
func sseHandler(gap time.Duration, pieces ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for _, p := range pieces {
			if gap > 0 {
				time.Sleep(gap)
			}
			io.WriteString(w, p)
			w.(http.Flusher).Flush()
		}
	}
}

// frames turns payloads into SSE data events.
func frames(payloads ...string) []string {
	out := make([]string, len(payloads))
	for i, p := range payloads {
		out[i] = "data: " + p + "\n\n"
	}
	return out
}

const done = "data: [DONE]\n\n"

// sink records what the adapter delivers.
type sink struct {
	mu     sync.Mutex
	events [][]byte
	body   []byte
	// onEvent, when set, runs for each event; an error fails the event.
	onEvent func(n int) error
}

func (s *sink) Event(ctx context.Context, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	s.events = append(s.events, append([]byte(nil), data...))
	n := len(s.events)
	s.mu.Unlock()
	if s.onEvent != nil {
		return s.onEvent(n)
	}
	return nil
}

func (s *sink) Body(ctx context.Context, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.body != nil {
		return errors.New("Body called twice")
	}
	s.body = append([]byte(nil), data...)
	return nil
}

func (s *sink) got() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.events...)
}

func newEngine(t *testing.T, base string) *Engine {
	t.Helper()
	return newEngineWith(t, base, nil)
}

// newEngineWith is an engine whose connections dial opens (net.Dialer's
// when nil). Its kept-alive connections are closed when the test ends.
func newEngineWith(t *testing.T, base string, dial DialFunc) *Engine {
	t.Helper()
	e, err := New(Config{BaseURL: base, Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func chatReq(stream bool, body string) *engine.Request {
	return &engine.Request{Kind: api.KindChat, Model: "m", Stream: stream, Body: []byte(body)}
}

// decode unmarshals a JSON object or fails the test.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, b)
	}
	return m
}

// path walks decoded JSON: path(m, "choices", 0, "delta").
func path(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func wantStatus(t *testing.T, r *api.Result, status int) {
	t.Helper()
	if r == nil {
		t.Fatal("nil result")
	}
	if r.Status != status {
		msg := ""
		if r.Error != nil {
			msg = fmt.Sprintf(" %+v", *r.Error)
		}
		t.Fatalf("status = %d%s, want %d", r.Status, msg, status)
	}
}

func errMsg(r *api.Result) string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Message
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
