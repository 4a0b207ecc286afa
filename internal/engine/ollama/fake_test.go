package ollama

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/engine"
)

// fakeOllama is an httptest Ollama speaking the native API. Chat answers
// are scripted by model name (see chatScript); every request body is
// recorded so tests can assert the translation.
type fakeOllama struct {
	srv *httptest.Server
	// cancelled receives the model of a "hang" chat once its client went
	// away.
	cancelled chan string

	mu     sync.Mutex
	tags   []fakeModel
	ps     []string
	psFail bool
	// psContexts are the context_length /api/ps reports of a model
	// loaded; absent (older Ollama) when not given.
	psContexts map[string]int
	showHits   map[string]int
	received   map[string][]map[string]any // by path
}

type fakeModel struct {
	name, digest string
	show         string // /api/show answer; "" fails with 500
}

func newFake(t *testing.T) *fakeOllama {
	t.Helper()
	f := &fakeOllama{
		cancelled: make(chan string, 1),
		showHits:  make(map[string]int),
		received:  make(map[string][]map[string]any),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/tags", f.handleTags)
	mux.HandleFunc("POST /api/show", f.handleShow)
	mux.HandleFunc("GET /api/ps", f.handlePS)
	mux.HandleFunc("POST /api/chat", f.handleChat)
	mux.HandleFunc("POST /api/generate", f.handleGenerate)
	mux.HandleFunc("POST /api/embed", f.handleEmbed)
	mux.HandleFunc("POST /api/pull", f.handlePull)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// engine returns an adapter for the fake with a fixed clock.
func (f *fakeOllama) engine(t *testing.T) *Engine {
	t.Helper()
	e, err := New(Config{BaseURL: f.srv.URL + "/", Now: func() time.Time { return time.Unix(1700000000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// record stores and returns the decoded request body.
func (f *fakeOllama) record(r *http.Request) map[string]any {
	var m map[string]any
	_ = json.NewDecoder(r.Body).Decode(&m)
	f.mu.Lock()
	f.received[r.URL.Path] = append(f.received[r.URL.Path], m)
	f.mu.Unlock()
	return m
}

// last returns the last body received on path.
func (f *fakeOllama) last(t *testing.T, path string) map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	got := f.received[path]
	if len(got) == 0 {
		t.Fatalf("fake received nothing on %s", path)
	}
	return got[len(got)-1]
}

func (f *fakeOllama) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.received[path])
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func (f *fakeOllama) handleTags(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var models []map[string]any
	for _, m := range f.tags {
		models = append(models, map[string]any{"name": m.name, "model": m.name, "digest": m.digest, "size": 1})
	}
	b, _ := json.Marshal(map[string]any{"models": models})
	writeJSON(w, 200, string(b))
}

func (f *fakeOllama) handleShow(w http.ResponseWriter, r *http.Request) {
	name, _ := f.record(r)["model"].(string)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.showHits[name]++
	for _, m := range f.tags {
		if m.name == name && m.show != "" {
			writeJSON(w, 200, m.show)
			return
		}
	}
	writeJSON(w, 500, `{"error":"show failed"}`)
}

func (f *fakeOllama) handlePS(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.psFail {
		writeJSON(w, 500, `{"error":"ps failed"}`)
		return
	}
	var models []map[string]any
	for _, n := range f.ps {
		m := map[string]any{"name": n, "model": n, "size": 10, "size_vram": 10}
		if c, ok := f.psContexts[n]; ok {
			m["context_length"] = c
		}
		models = append(models, m)
	}
	b, _ := json.Marshal(map[string]any{"models": models})
	writeJSON(w, 200, string(b))
}

// Timing counters of the scripted final lines: 120 ms of prompt
// processing, 5 tokens in 250 ms (20 tokens/s).
const doneStats = `"total_duration":500000000,"prompt_eval_count":10,"prompt_eval_duration":120000000,"eval_count":5,"eval_duration":250000000`

// chatScript is the NDJSON a model answers with.
func chatScript(model string) []string {
	msg := func(fields string) string {
		return `{"model":"` + model + `","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant",` + fields + `},"done":false}`
	}
	done := func(reason string, loadNs string) string {
		return `{"model":"` + model + `","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"` + reason + `","load_duration":` + loadNs + `,` + doneStats + `}`
	}
	switch model {
	case "thinker":
		return []string{
			msg(`"content":"","thinking":"Let me"`),
			msg(`"content":"","thinking":" think."`),
			msg(`"content":"42"`),
			done("stop", "3000000"),
		}
	case "tooler":
		return []string{
			msg(`"content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris","days":2}}}]`),
			msg(`"content":"","tool_calls":[{"function":{"name":"get_time","arguments":{"tz":"CET"}}}]`),
			done("stop", "3000000"),
		}
	case "long":
		return []string{msg(`"content":"abc"`), done("length", "3000000")}
	case "cold":
		return []string{msg(`"content":"hi"`), done("stop", "2500000000")}
	case "midfail":
		return []string{msg(`"content":"partial"`), `{"error":"an error was encountered while running the model: unexpected EOF"}`}
	case "earlyfail":
		return []string{`{"error":"llama runner process has terminated: cudaMalloc failed: out of memory"}`}
	case "truncated":
		return []string{msg(`"content":"partial"`)}
	case "truncated-early":
		return nil
	case "garbage":
		return []string{`{not json`}
	case "html":
		return []string{msg(`"content":"<b>&</b>"`), done("stop", "3000000")}
	case "blank":
		return []string{msg(`"content":""`), msg(`"content":"Hi"`), done("stop", "3000000")}
	}
	return []string{msg(`"content":"Hel"`), msg(`"content":"lo"`), done("stop", "3000000")}
}

// aggregate builds the non-streamed answer from a script, as Ollama does.
func aggregate(lines []string) (string, int) {
	var content, thinking strings.Builder
	var calls []any
	final := map[string]any{}
	for _, l := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			return l, 200
		}
		if _, ok := m["error"]; ok {
			return l, 500
		}
		msg, _ := m["message"].(map[string]any)
		c, _ := msg["content"].(string)
		th, _ := msg["thinking"].(string)
		content.WriteString(c)
		thinking.WriteString(th)
		if tc, ok := msg["tool_calls"].([]any); ok {
			calls = append(calls, tc...)
		}
		if m["done"] == true {
			final = m
		}
	}
	out := map[string]any{"role": "assistant", "content": content.String()}
	if thinking.Len() > 0 {
		out["thinking"] = thinking.String()
	}
	if len(calls) > 0 {
		out["tool_calls"] = calls
	}
	final["message"] = out
	b, _ := json.Marshal(final)
	return string(b), 200
}

// overContext answers a request over the model's context as Ollama does
// when told not to truncate, and reports whether it did; told nothing, it
// truncates and answers.
func overContext(w http.ResponseWriter, req map[string]any) bool {
	if req["model"] != "toolong" || req["truncate"] != false {
		return false
	}
	writeJSON(w, 400, `{"error":"{\"error\":{\"code\":400,\"message\":\"request (9000 tokens) exceeds the available context size (4096 tokens), try increasing it\",\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":9000,\"n_ctx\":4096}}"}`)
	return true
}

func (f *fakeOllama) handleChat(w http.ResponseWriter, r *http.Request) {
	req := f.record(r)
	model, _ := req["model"].(string)
	stream := req["stream"] != false
	if overContext(w, req) {
		return
	}
	switch model {
	case "missing":
		writeJSON(w, 404, `{"error":"model \"missing\" not found, try pulling it first"}`)
		return
	case "oom":
		writeJSON(w, 500, `{"error":"model requires more system memory (12.3 GiB) than is available (4.0 GiB)"}`)
		return
	case "hang":
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, `{"model":"hang","message":{"role":"assistant","content":"tick"},"done":false}`+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			select {
			case f.cancelled <- model:
			default:
			}
		case <-time.After(10 * time.Second):
		}
		return
	}
	script := chatScript(model)
	if !stream {
		body, status := aggregate(script)
		writeJSON(w, status, body)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	for _, l := range script {
		_, _ = io.WriteString(w, l+"\n")
		w.(http.Flusher).Flush()
	}
}

// handleGenerate answers a non-streamed /api/generate as a Llama Guard
// does to a raw prompt, scripted by model name like chat.
func (f *fakeOllama) handleGenerate(w http.ResponseWriter, r *http.Request) {
	req := f.record(r)
	model, _ := req["model"].(string)
	if overContext(w, req) {
		return
	}
	answer := func(response, reason string) string {
		// Ollama's encoder escapes <, > and & as encoding/json does.
		quoted, _ := json.Marshal(response)
		return `{"model":"` + model + `","created_at":"2025-01-01T00:00:00Z","response":` + string(quoted) +
			`,"done":true,"done_reason":"` + reason + `","context":[128006,882,128007],"load_duration":3000000,` + doneStats + `}`
	}
	switch model {
	case "loadonly":
		// As Ollama answers a load without a prompt: no timings.
		writeJSON(w, 200, `{"model":"loadonly","created_at":"2025-01-01T00:00:00Z","response":"","done":true,"done_reason":"load"}`)
	case "missing":
		writeJSON(w, 404, `{"error":"model \"missing\" not found, try pulling it first"}`)
	case "oom":
		writeJSON(w, 500, `{"error":"model requires more system memory (12.3 GiB) than is available (4.0 GiB)"}`)
	case "embedder":
		writeJSON(w, 400, `{"error":"\"embedder\" does not support generate"}`)
	case "errorline":
		writeJSON(w, 200, `{"error":"an error was encountered while running the model"}`)
	case "garbage":
		writeJSON(w, 200, `{not json`)
	case "long":
		writeJSON(w, 200, answer("uns", "length"))
	default:
		writeJSON(w, 200, answer("<b>unsafe</b>\nS1", "stop"))
	}
}

func (f *fakeOllama) handleEmbed(w http.ResponseWriter, r *http.Request) {
	req := f.record(r)
	switch req["model"] {
	case "missing":
		writeJSON(w, 404, `{"error":"model \"missing\" not found, try pulling it first"}`)
		return
	case "toolong":
		// As Ollama does: the start of the input embedded, unless told
		// not to truncate.
		if req["truncate"] == false {
			writeJSON(w, 400, `{"error":"the input length exceeds the context length"}`)
			return
		}
	case "toolong-runner":
		writeJSON(w, 500, `{"error":"the input length exceeds the context length"}`)
		return
	}
	n := 1
	if in, ok := req["input"].([]any); ok {
		n = len(in)
	}
	vecs := make([][]float64, n)
	for i := range vecs {
		vecs[i] = []float64{0.5, -0.25, float64(i)}
	}
	b, _ := json.Marshal(map[string]any{
		"model": req["model"], "embeddings": vecs,
		"total_duration": 1000000, "load_duration": 500000, "prompt_eval_count": 7,
	})
	writeJSON(w, 200, string(b))
}

func (f *fakeOllama) handlePull(w http.ResponseWriter, r *http.Request) {
	req := f.record(r)
	var lines []string
	switch req["model"] {
	case "denied":
		writeJSON(w, 500, `{"error":"pull model manifest: 401 unauthorized"}`)
		return
	case "good":
		lines = []string{
			`{"status":"pulling manifest"}`,
			`{"status":"pulling sha256:abc","digest":"sha256:abc","total":100}`,
			`{"status":"pulling sha256:abc","digest":"sha256:abc","total":100,"completed":50}`,
			`{"status":"pulling sha256:abc","digest":"sha256:abc","total":100,"completed":100}`,
			`{"status":"verifying sha256 digest"}`,
			`{"status":"writing manifest"}`,
			`{"status":"success"}`,
		}
	case "bad":
		lines = []string{`{"status":"pulling manifest"}`, `{"error":"pull model manifest: file does not exist"}`}
	default: // ends early
		lines = []string{`{"status":"pulling manifest"}`}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	for _, l := range lines {
		_, _ = io.WriteString(w, l+"\n")
		w.(http.Flusher).Flush()
	}
}

// recordSink records what the adapter writes. With failAt > 0, Event
// fails from that event (1-based) on, as when the gateway's client has
// gone.
type recordSink struct {
	mu     sync.Mutex
	events []map[string]any
	raw    []string
	body   map[string]any
	failAt int
	first  chan struct{} // closed at the first event, if set
}

func (s *recordSink) Event(ctx context.Context, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAt > 0 && len(s.events)+1 >= s.failAt {
		return context.Canceled
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	s.events = append(s.events, m)
	s.raw = append(s.raw, string(data))
	if s.first != nil && len(s.events) == 1 {
		close(s.first)
	}
	return nil
}

func (s *recordSink) Body(ctx context.Context, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return json.Unmarshal(data, &s.body)
}

// chatReq builds a chat request for model from an OpenAI body.
func chatReq(model string, stream bool, body string) *engine.Request {
	if body == "" {
		body = `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
	}
	return &engine.Request{Kind: "chat", Model: model, Stream: stream, Body: []byte(body)}
}

// jsonOf re-encodes v compactly, for comparisons with expected JSON.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// canon re-encodes a JSON text so key order does not matter.
func canon(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON %q: %v", s, err)
	}
	return jsonOf(t, v)
}
