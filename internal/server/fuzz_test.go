package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/engine/openai"
	"github.com/svc-dev/svc/internal/harness"
)

// fuzzRoutes are the inference routes whose JSON bodies
// FuzzInferenceRequests sends, with a valid request for each as a seed.
var fuzzRoutes = []struct{ path, seed string }{
	{"/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`},
	{"/v1/chat/completions", `{"model":"sim-reasoner","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true,"reasoning":{"max_tokens":3},"max_tokens":8}`},
	{"/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto","stream":true,"n":2}`},
	{"/v1/completions", `{"model":"sim-chat","prompt":"once upon","max_tokens":4,"stream":true}`},
	{"/v1/messages", `{"model":"sim-chat","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"stream":true}`},
	{"/v1/responses", `{"model":"sim-chat","input":"hi","max_output_tokens":5}`},
	{"/v1/embeddings", `{"model":"sim-embed","input":["a","b"],"dimensions":8}`},
	{"/v1/rerank", `{"model":"sim-rerank","query":"q","documents":["a","b"],"top_n":1}`},
	{"/v1/moderations", `{"model":"guard-a:1b","input":"hello"}`},
	{"/v1/images/generations", `{"model":"sim-image","prompt":"a cat","size":"256x256"}`},
	{"/v1/audio/speech", `{"model":"sim-tts","input":"hi","voice":"alloy","response_format":"wav"}`},
}

// sealable are the inference routes with a sealed form.
var sealable = map[string]bool{"/v1/chat/completions": true, "/v1/embeddings": true, "/v1/rerank": true,
	"/v1/images/generations": true, "/v1/audio/speech": true}

// fuzzStatuses are the answers a healthy gateway with one instant,
// healthy worker may give a well-keyed request: success or the client's
// fault. A 5xx other than the spec's lasting limitations (501, 507) is
// the gateway's or the worker's own failure.
var fuzzStatuses = map[int]bool{200: true, 400: true, 404: true, 409: true, 413: true, 422: true, 501: true, 507: true}

// Any JSON body sent to an inference route with a valid key is answered
// in time, with a status the spec gives a client's mistake or success, an
// error body of the spec's shape, a request id, and a usage row of that
// status: never a panic, a hang, a 5xx or a lost record. The gateway
// `svc serve` runs and a worker on the simulator, answering at once, run
// in the test's process, so that fuzzing is guided by their code:
//
//	go test ./internal/server -run '^$' -fuzz FuzzInferenceRequests -fuzztime 5m
func FuzzInferenceRequests(f *testing.F) {
	for i, r := range fuzzRoutes {
		f.Add(uint8(i), []byte(r.seed))
	}
	f.Add(uint8(0), []byte(`{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"MAX_TOKENS":5}`))
	f.Add(uint8(0), []byte(`{"model":"sim-chat","messages":[]}`))
	f.Add(uint8(1), []byte(`{"model":"nope","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	f.Add(uint8(3), []byte(`{"model":"sim-chat","prompt":["a",[1,2]],"max_tokens":1e400}`))
	f.Add(uint8(4), []byte(`{"model":"sim-chat","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x"}]}]}`))
	f.Add(uint8(6), []byte(`{"model":"sim-embed","input":[]}`))
	f.Add(uint8(10), []byte(`{"model":"sim-tts","input":"","voice":"alloy"}`))
	f.Add(uint8(2), []byte(`[`))

	g := startInProcess(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		if scripted(body) {
			t.Skip("the simulator's own directives fail or hang a request on purpose")
		}
		g.inference(t, g.hc, fuzzRoutes[int(route)%len(fuzzRoutes)].path, body)
	})
}

// FuzzInferenceFields is FuzzInferenceRequests for one member of a valid
// request set to any JSON value, at a dotted path (messages.0.content):
// it reaches the checks of each field that a mutated body, most often not
// JSON at all, rarely gets past. With sealed, a route with a sealed form
// is sent sealed (FuzzSealedRequests), so that the worker's checks of
// what the gateway cannot read are fuzzed too.
func FuzzInferenceFields(f *testing.F) {
	seeds := []struct {
		route       uint8
		path, value string
	}{
		{0, "max_tokens", "-1"}, {0, "max_tokens", "1e400"}, {0, "max_tokens", `"5"`}, {0, "n", "17"},
		{0, "messages.0.content", `[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]`},
		{0, "messages.0.content", `[{"type":"file","file":{"filename":"a.csv","file_data":"YSxiCg=="}}]`},
		{0, "messages.0.role", `"tool"`}, {0, "response_format", `{"type":"json_schema","json_schema":{"name":"x","schema":{}}}`},
		{0, "stop", `["a","b","c","d","e"]`}, {0, "seed", "18446744073709551616"}, {0, "temperature", "2.5"},
		{1, "reasoning.max_tokens", "-3"}, {1, "reasoning_effort", `"max"`}, {1, "stream_options", `{"include_usage":false}`},
		{2, "tools.0.function.name", `""`}, {2, "tool_choice", `{"type":"function","function":{"name":"g"}}`},
		{3, "prompt", `[[1,2,3]]`}, {3, "echo", "true"}, {3, "logprobs", "5"},
		{4, "system", `[{"type":"text","text":"s"}]`}, {4, "thinking", `{"type":"enabled","budget_tokens":1}`},
		{4, "messages.0.content", `[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"x"}}]`},
		{5, "input", `[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]`}, {5, "tools", `[{"type":"web_search"}]`},
		{6, "encoding_format", `"base64"`}, {6, "input", `[[1,2],[3]]`}, {7, "documents", `[{"text":"a"}]`}, {7, "top_n", "0"},
		{8, "input", `[{"type":"image_url","image_url":{"url":"http://127.0.0.1/x.png"}}]`},
		{9, "n", "0"}, {9, "response_format", `"b64_json"`}, {10, "speed", "4.5"}, {10, "voice", `"nobody"`},
	}
	for _, s := range seeds {
		f.Add(s.route, false, s.path, []byte(s.value))
		if sealable[fuzzRoutes[int(s.route)%len(fuzzRoutes)].path] {
			f.Add(s.route, true, s.path, []byte(s.value))
		}
	}
	g := startInProcess(f)
	sealing := &http.Client{Timeout: 30 * time.Second, Transport: e2ee.NewTransport(nil, nil)}
	f.Fuzz(func(t *testing.T, route uint8, sealed bool, path string, value []byte) {
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		if !json.Valid(value) {
			t.Skip("not JSON: FuzzInferenceRequests sends such bodies")
		}
		body, err := setMember([]byte(r.seed), strings.Split(path, "."), value)
		if err != nil {
			t.Skip("no such element:", err)
		}
		if scripted(body) {
			t.Skip("the simulator's own directives fail or hang a request on purpose")
		}
		hc := g.hc
		if sealed && sealable[r.path] {
			hc = sealing
		}
		g.inference(t, hc, r.path, body)
	})
}

// setMember returns doc with the member or element at path set to value,
// the objects on the way made as needed; numbers elsewhere keep their text.
func setMember(doc []byte, path []string, value []byte) ([]byte, error) {
	if len(path) == 0 {
		return value, nil
	}
	if i, err := strconv.Atoi(path[0]); err == nil {
		var arr []json.RawMessage
		if err := json.Unmarshal(doc, &arr); err == nil {
			if i < 0 || i > len(arr) {
				return nil, errors.New("index out of range")
			}
			if i == len(arr) {
				arr = append(arr, json.RawMessage("{}"))
			}
			v, err := setMember(arr[i], path[1:], value)
			if err != nil {
				return nil, err
			}
			arr[i] = v
			return json.Marshal(arr)
		}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(doc, &obj); err != nil || obj == nil {
		obj = map[string]json.RawMessage{}
	}
	inner := obj[path[0]]
	if inner == nil {
		inner = json.RawMessage("{}")
	}
	v, err := setMember(inner, path[1:], value)
	if err != nil {
		return nil, err
	}
	obj[path[0]] = v
	return json.Marshal(obj)
}

// FuzzSealedRequests is FuzzInferenceRequests for private inference:
// each body is sealed to the worker's key by the client library's
// transport, so that the gateway routes what it cannot read and the
// worker checks the request the gateway could not. Bodies the transport
// refuses to seal (not JSON, no model) are skipped.
func FuzzSealedRequests(f *testing.F) {
	sealed := []int{0, 1, 2, 6, 7, 9, 10} // the routes with a sealed form
	for i, r := range sealed {
		f.Add(uint8(i), []byte(fuzzRoutes[r].seed))
	}
	f.Add(uint8(0), []byte(`{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":-1}`))
	f.Add(uint8(0), []byte(`{"model":"sim-chat","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://127.0.0.1:1/x.png"}}]}]}`))
	f.Add(uint8(1), []byte(`{"model":"sim-reasoner","messages":[{"role":"user","content":"hi"}],"stream":true,"n":3,"MAX_TOKENS":2}`))
	f.Add(uint8(3), []byte(`{"model":"sim-embed","input":[[1,2],"a"],"encoding_format":"base64"}`))
	f.Add(uint8(6), []byte(`{"model":"sim-tts","input":"hi","voice":"nobody"}`))
	g := startInProcess(f)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: e2ee.NewTransport(nil, nil)}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		if scripted(body) {
			t.Skip("the simulator's own directives fail or hang a request on purpose")
		}
		g.inference(t, hc, fuzzRoutes[sealed[int(route)%len(sealed)]].path, body)
	})
}

// fuzzHeaders are the request headers the gateway reads, for
// FuzzRequestHeaders to send with any value.
var fuzzHeaders = []string{"Authorization", "X-Api-Key", "Accept", "Content-Type", "X-Svc-Worker-Id",
	"traceparent", "tracestate", "Expect", "Content-Encoding", "anthropic-version", "anthropic-beta",
	"X-Request-Id", "Connection", "Upgrade", "Sec-WebSocket-Protocol"}

// FuzzRequestHeaders is FuzzInferenceRequests for a valid request with
// one header, of the ones the gateway reads or any name, set to any
// value: an Authorization that replaces the key may also be answered
// 401, and a header an HTTP client would not send is skipped.
//
//	go test ./internal/server -run '^$' -fuzz FuzzRequestHeaders -fuzztime 5m
func FuzzRequestHeaders(f *testing.F) {
	seeds := []struct {
		route       uint8
		name, value string
	}{
		{0, "Authorization", "Bearer nope"}, {0, "Authorization", "Basic eDp5"}, {4, "X-Api-Key", "nope"},
		{10, "Accept", "application/json"}, {10, "Accept", "application/json;q=0, audio/wav"}, {0, "Accept", "text/event-stream"},
		{0, "Content-Type", "text/plain"}, {0, "Content-Type", "application/json; charset=latin1"},
		{1, "X-Svc-Worker-Id", "wk_0000000000000000"}, {0, "X-Svc-Worker-Id", "fuzz"},
		{0, "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, {0, "traceparent", "ff-xx"},
		{0, "tracestate", "a=b,c=d"}, {6, "Expect", "100-continue"}, {7, "Content-Encoding", "gzip"},
		{4, "anthropic-version", "1999-01-01"}, {4, "anthropic-beta", "x,y"}, {0, "X-Request-Id", "mine"},
		{2, "Connection", "close"}, {9, "Upgrade", "websocket"}, {0, "Sec-WebSocket-Protocol", "svc-key.nope"},
	}
	for _, s := range seeds {
		f.Add(s.route, s.name, s.value)
	}
	g := startInProcess(f)
	f.Fuzz(func(t *testing.T, route uint8, name, value string) {
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		if i, err := strconv.Atoi(name); err == nil && i >= 0 {
			name = fuzzHeaders[i%len(fuzzHeaders)]
		}
		req, err := http.NewRequest("POST", g.url+r.path, strings.NewReader(r.seed))
		if err != nil {
			t.Skip(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+g.key)
		req.Header.Set(name, value)
		what := fmt.Sprintf("%s with %s: %q", r.path, name, value)
		a, err := roundTrip(g.hc, req)
		if err != nil && (strings.Contains(err.Error(), "invalid header") || strings.Contains(err.Error(), "net/http:")) {
			t.Skip("an HTTP client does not send it:", err)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if a.status == http.StatusUnauthorized && (strings.EqualFold(name, "Authorization") || strings.EqualFold(name, "X-Api-Key")) {
			if err := errorBody(a.body); err != nil {
				t.Fatalf("%s: %v\nstatus %d: %.2000s", what, err, a.status, a.body)
			}
			return
		}
		if err := checkAnswer(a); err != nil {
			t.Fatalf("%s: %v\nstatus %d: %.2000s", what, err, a.status, a.body)
		}
		id := a.header.Get("X-Request-Id")
		row, err := g.usageRow(id)
		if err != nil {
			t.Fatalf("%s (status %d, id %s): %v", what, a.status, id, err)
		}
		if got := row["status_code"]; got != float64(a.status) {
			t.Fatalf("%s: answered %d, logged %v: %v", what, a.status, got, row)
		}
	})
}

// departures are streams long enough (the simulator's 300 tokens at 3,000
// a second) that a client may leave at any point of one, and the text
// that ends each whole.
var departures = []struct{ path, body, end string }{
	{"/v1/chat/completions", `{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"hi\nsim: tokens=300 tps=3000"}]}`, "data: [DONE]"},
	{"/v1/chat/completions", `{"model":"sim-reasoner","stream":true,"n":2,"messages":[{"role":"user","content":"hi\nsim: tokens=150 reasoning=150 tps=3000"}]}`, "data: [DONE]"},
	{"/v1/messages", `{"model":"sim-chat","stream":true,"max_tokens":400,"messages":[{"role":"user","content":"hi\nsim: tokens=300 tps=3000"}]}`, "event: message_stop"},
	{"/v1/responses", `{"model":"sim-chat","stream":true,"input":"hi\nsim: tokens=300 tps=3000"}`, "event: response.completed"},
	{"/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"user","content":"hi\nsim: tokens=300 tps=3000"}]}`, `"finish_reason"`},
}

// A client that leaves a request at any point, after reading any number
// of bytes of its answer, leaves nothing running: the request is off the
// in-flight list at once, and once the client has its request id its
// usage row says 200 or 499, 200 when the client had the whole answer.
func FuzzClientDeparture(f *testing.F) {
	for i := range departures {
		for _, n := range []uint32{0, 40, 400, 1500, 6000, 1 << 20} {
			f.Add(uint8(i), n)
		}
	}
	g := startInProcess(f)
	f.Fuzz(func(t *testing.T, route uint8, n uint32) {
		d := departures[int(route)%len(departures)]
		got, err := g.readThenLeave(d.path, d.body, int(n))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var inflight []any
		if err := harness.Poll(ctx, 2*time.Millisecond, func() bool {
			r, err := g.get(g.hc, "/api/v1/usage/inflight")
			return err == nil && json.Unmarshal(r.body, &inflight) == nil && len(inflight) == 0
		}); err != nil {
			t.Fatalf("%s left after %d bytes: still in flight: %v", d.path, len(got), inflight)
		}
		head, _, whole := bytes.Cut(got, []byte("\r\n\r\n"))
		if !whole {
			return // the client left before it had the id
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(append(head, "\r\n\r\n"...))), nil)
		if err != nil {
			t.Fatalf("%s: %v in %q", d.path, err, head)
		}
		id := resp.Header.Get("X-Request-Id")
		row, err := g.usageRow(id)
		if err != nil {
			t.Fatalf("%s left after %d bytes (id %s): %v", d.path, len(got), id, err)
		}
		status := row["status_code"]
		ended := bytes.Contains(got, []byte(d.end))
		if status != 200.0 && (ended || status != 499.0) {
			t.Fatalf("%s left after %d bytes, the end read: %v; logged %v: %v", d.path, len(got), ended, status, row)
		}
	})
}

// fakeEngine is an OpenAI-compatible server with one model, "fake",
// whose chat completions are answered with what answer holds.
type fakeEngine struct {
	mu                sync.Mutex
	status            int
	contentType, body string
}

func (e *fakeEngine) answer(status int, contentType string, body []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status, e.contentType, e.body = status, contentType, string(body)
}

func (e *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"fake","object":"model","owned_by":"vllm"}]}`)
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	e.mu.Lock()
	status, ct, body := e.status, e.contentType, e.body
	e.mu.Unlock()
	if ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// An engine's answers, as the fuzz targets' seeds build them: a chunk of a
// chat's stream with delta, the stream's closing chunk with usage, and a
// whole chat completion.
func engineChunk(delta string) string {
	return `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"fake","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
}

const (
	engineUsage = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"fake","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}` + "\n\n"
	engineWhole = `{"id":"c","object":"chat.completion","created":1,"model":"fake","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`
)

// relayed has fake answer status, contentType and body to req sent to
// path, checks the client's answer with check and the usage row against
// it (the status the client was given, or a failed stream's), and
// returns the answer, the row and whether the answer failed.
func (g *inProcess) relayed(t *testing.T, fake *fakeEngine, path string, req []byte, status uint16, contentType string, body []byte,
	check func(answer) (bool, error)) (answer, map[string]any, bool) {
	t.Helper()
	if status < 200 || status > 599 || strings.ContainsAny(contentType, "\r\n") {
		t.Skip("not an HTTP answer")
	}
	what := fmt.Sprintf("%s: engine answered %d %q %q", path, status, contentType, body)
	fake.answer(int(status), contentType, body)
	a, err := g.post(g.hc, path, req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	failed, err := check(a)
	if err != nil {
		t.Fatalf("%s: %v\nstatus %d: %.2000s", what, err, a.status, a.body)
	}
	id := a.header.Get("X-Request-Id")
	row, err := g.usageRow(id)
	if err != nil {
		t.Fatalf("%s (status %d, id %s): %v", what, a.status, id, err)
	}
	logged, _ := row["status_code"].(float64)
	if failed != (logged != 200) || (!failed && int(logged) != a.status) {
		t.Fatalf("%s: client had %d (stream failed: %v), logged %v: %v", what, a.status, failed, logged, row)
	}
	return a, row, failed
}

// Whatever an engine answers a chat with, whole or streamed, the client
// is answered in time with a status the spec gives a worker's answer, an
// error body of the spec's shape, or a stream that ends with [DONE],
// after an error event when it failed; and the usage row has the status
// the client was given, or the error event's, and a stream's tokens. The
// engine is a server over HTTP behind the worker's OpenAI-compatible
// adapter, so its status, content type and body, as sent, are the input.
func FuzzEngineAnswers(f *testing.F) {
	seeds := []struct {
		stream bool
		status uint16
		ct     string
		body   string
	}{
		{false, 200, "application/json", engineWhole},
		{true, 200, "text/event-stream", engineChunk(`{"role":"assistant","content":"h"}`) + engineChunk(`{"content":"i"}`) + engineUsage + "data: [DONE]\n\n"},
		{true, 200, "text/event-stream", engineChunk(`{"content":"h"}`) + "data: {\"choices\":[{\"delta\":{\"content\":1}}]}\n\n"},
		{true, 200, "text/event-stream", engineChunk(`{"tool_calls":[{"index":0,"id":"t","type":"function","function":{"name":"f","arguments":"{"}}]}`) + "data: [DONE]\n\n"},
		{true, 200, "text/event-stream", engineChunk(`{"content":"h"}`) + `data: {"error":{"message":"out of memory","code":507}}` + "\n\n"},
		{true, 200, "application/json", engineWhole},
		{false, 200, "text/event-stream", engineChunk(`{"content":"h"}`) + engineUsage + "data: [DONE]\n\n"},
		{false, 200, "application/json", `{"choices":[]}`},
		{false, 200, "application/json", `{"choices":[{"message":{"content":null,"reasoning_content":"x"}}],"usage":{"completion_tokens":-5}}`},
		{false, 400, "application/json", `{"error":{"message":"bad","type":"invalid_request_error"}}`},
		{false, 429, "application/json", `{"error":"busy"}`},
		{true, 503, "text/plain", "overloaded"},
		{false, 500, "", ""},
		{false, 413, "application/json", `{"detail":"too long"}`},
		{false, 200, "", "not json"},
		{true, 200, "text/event-stream", ": comment\n\nevent: ping\ndata: x\n\n"},
		{true, 200, "text/event-stream", engineChunk(`{"role":"assistant"}`) + "data: [DONE]\n\n"},
	}
	for _, s := range seeds {
		f.Add(s.stream, s.status, s.ct, []byte(s.body))
	}
	g, fake := startWithFakeEngine(f)
	f.Fuzz(func(t *testing.T, stream bool, status uint16, contentType string, body []byte) {
		req := fmt.Appendf(nil, `{"model":"fake","messages":[{"role":"user","content":"hi"}],"stream":%t}`, stream)
		a, row, failed := g.relayed(t, fake, "/v1/chat/completions", req, status, contentType, body, checkRelayed)
		// A stream's usage is the gateway's to write: it is what the row
		// bills.
		if u, ok := streamUsage(a); ok && !failed {
			for _, k := range []string{"prompt_tokens", "completion_tokens", "total_tokens"} {
				if u[k] != row[k] {
					t.Fatalf("engine answered %d %q %q: the stream's usage %v, the row's %v", status, contentType, body, u, row)
				}
			}
		}
	})
}

// streamUsage is the usage a streamed answer's closing chunk states.
func streamUsage(a answer) (map[string]any, bool) {
	if !strings.HasPrefix(a.header.Get("Content-Type"), "text/event-stream") {
		return nil, false
	}
	for ev := range bytes.SplitSeq(a.body, []byte("\n\n")) {
		var chunk struct {
			Choices []any          `json:"choices"`
			Usage   map[string]any `json:"usage"`
		}
		data, ok := bytes.CutPrefix(ev, []byte("data: "))
		if ok && json.Unmarshal(data, &chunk) == nil && chunk.Choices != nil && len(chunk.Choices) == 0 && chunk.Usage != nil {
			return chunk.Usage, true
		}
	}
	return nil, false
}

// startWithFakeEngine is startInProcess with a fakeEngine behind the
// worker's OpenAI-compatible adapter, once its model is listed.
func startWithFakeEngine(tb testing.TB) (*inProcess, *fakeEngine) {
	tb.Helper()
	fake := &fakeEngine{}
	srv := httptest.NewServer(fake)
	tb.Cleanup(srv.Close)
	eng, err := openai.New(openai.Config{BaseURL: srv.URL})
	if err != nil {
		tb.Fatal(err)
	}
	g := startInProcess(tb, eng)
	if !harness.Eventually(30*time.Second, func() bool {
		r, err := g.get(g.hc, "/v1/models")
		return err == nil && bytes.Contains(r.body, []byte(`"fake"`))
	}) {
		tb.Fatal("the fake engine's model was not listed")
	}
	return g, fake
}

// dialects are the routes that answer in another API's shape what an
// engine answers a chat with, and the request each sends.
var dialects = []struct{ path, body string }{
	{"/v1/messages", `{"model":"fake","max_tokens":50,"messages":[{"role":"user","content":"hi"}],"stream":%t}`},
	{"/v1/responses", `{"model":"fake","input":"hi","stream":%t}`},
}

// FuzzEngineAnswersTranslated is FuzzEngineAnswers for the Anthropic
// messages and the responses APIs, whose answers the gateway translates
// from the engine's chat: the same rules, with each API's own ends of a
// stream (message_stop, or an error event; response.completed or
// response.incomplete, or response.failed).
func FuzzEngineAnswersTranslated(f *testing.F) {
	for d := range dialects {
		for _, s := range []struct {
			stream bool
			status uint16
			ct     string
			body   string
		}{
			{false, 200, "application/json", engineWhole},
			{true, 200, "text/event-stream", engineChunk(`{"role":"assistant","content":"h"}`) + engineChunk(`{"content":"i"}`) + engineUsage + "data: [DONE]\n\n"},
			{true, 200, "text/event-stream", engineChunk(`{"content":"h"}`) + `data: {"error":{"message":"out of memory","code":507}}` + "\n\n"},
			{true, 200, "text/event-stream", engineChunk(`{"tool_calls":[{"index":0,"id":"t","type":"function","function":{"name":"f","arguments":"{"}}]}`) + "data: [DONE]\n\n"},
			{true, 200, "text/event-stream", engineChunk(`{"reasoning_content":"think"}`) + engineChunk(`{"content":"x"}`) + "data: [DONE]\n\n"},
			{false, 200, "application/json", `{"choices":[{"message":{"content":null,"tool_calls":[{"id":"t","function":{"name":"f","arguments":"not json"}}]},"finish_reason":"tool_calls"}]}`},
			{false, 400, "application/json", `{"error":{"message":"bad","type":"invalid_request_error"}}`},
			{true, 429, "application/json", `{"error":"busy"}`},
			{false, 200, "", "not json"},
		} {
			f.Add(uint8(d), s.stream, s.status, s.ct, []byte(s.body))
		}
	}
	g, fake := startWithFakeEngine(f)
	f.Fuzz(func(t *testing.T, dialect uint8, stream bool, status uint16, contentType string, body []byte) {
		d := dialects[int(dialect)%len(dialects)]
		g.relayed(t, fake, d.path, fmt.Appendf(nil, d.body, stream), status, contentType, body, checkTranslated)
	})
}

// checkTranslated is checkRelayed for the messages and responses APIs,
// whose whole answers name a model however the engine's did.
func checkTranslated(a answer) (failed bool, _ error) {
	if failed, err := relayedError(a); failed || err != nil {
		return failed, err
	}
	if !strings.HasPrefix(a.header.Get("Content-Type"), "text/event-stream") {
		var whole struct {
			Model *string `json:"model"`
		}
		if err := json.Unmarshal(a.body, &whole); err != nil {
			return false, fmt.Errorf("answer is not a JSON object: %w", err)
		}
		if whole.Model == nil || *whole.Model == "" {
			return false, errors.New("answer names no model")
		}
		return false, nil
	}
	events, err := sseEvents(a.body)
	if err != nil {
		return false, err
	}
	last, _, _ := bytes.Cut(events[len(events)-1], []byte("\n"))
	switch name := string(bytes.TrimPrefix(last, []byte("event: "))); name {
	case "message_stop", "response.completed", "response.incomplete":
		return false, nil
	case "error", "response.failed":
		return true, nil
	default:
		return false, fmt.Errorf("stream ends with event %q", name)
	}
}

// relayedStatuses are the statuses the spec gives an answer relayed from
// a worker, to a client whose key is good.
var relayedStatuses = map[int]bool{200: true, 400: true, 404: true, 409: true, 413: true, 422: true,
	429: true, 501: true, 502: true, 503: true, 504: true, 507: true}

// relayedError checks what every answer relayed from an engine that may
// have answered anything shares: a request id, a status the spec gives a
// worker's answer, and an error body of the spec's shape. failed is
// whether the answer is an error.
func relayedError(a answer) (failed bool, _ error) {
	if a.header.Get("X-Request-Id") == "" {
		return false, errors.New("no X-Request-Id")
	}
	if !relayedStatuses[a.status] {
		return false, fmt.Errorf("status %d", a.status)
	}
	if a.status != http.StatusOK {
		return true, errorBody(a.body)
	}
	return false, nil
}

// checkRelayed checks a chat answer relayed from an engine that may have
// answered anything: a status the spec gives a worker's answer, an error
// body with its detail, a whole answer with no negative count in its
// usage, a stream that ends whole with [DONE]. failed is whether the
// answer is an error, or a stream that ended with one.
func checkRelayed(a answer) (failed bool, _ error) {
	if failed, err := relayedError(a); failed || err != nil {
		return failed, err
	}
	if !strings.HasPrefix(a.header.Get("Content-Type"), "text/event-stream") {
		// The member named usage exactly, as the SDKs read it: a case
		// twin an engine sends (usAge) is its own member, passed on.
		var whole map[string]json.RawMessage
		if err := json.Unmarshal(a.body, &whole); err != nil {
			return false, fmt.Errorf("answer is not a JSON object: %w", err)
		}
		var usage map[string]any
		if u, ok := whole["usage"]; ok && json.Unmarshal(u, &usage) != nil {
			return false, fmt.Errorf("usage is not an object: %s", u)
		}
		for k, v := range usage {
			if n, ok := v.(float64); ok && n < 0 {
				return false, fmt.Errorf("usage has %s %v", k, n)
			}
		}
		return false, nil
	}
	// A stream that fails says so in an error event, followed by [DONE]
	// for the clients that wait for it.
	events, err := sseEvents(a.body)
	if err != nil {
		return false, err
	}
	last := events[len(events)-1]
	if !bytes.Equal(last, []byte("data: [DONE]")) {
		return false, fmt.Errorf("stream ends with %q, not [DONE]", last)
	}
	if len(events) > 1 && bytes.HasPrefix(events[len(events)-2], []byte(`data: {"error":{`)) {
		return true, nil
	}
	return false, nil
}

// mgmtRoutes are the API's and the console's routes other than
// inference: {param} in a path stands for any text.
var mgmtRoutes = []struct {
	method, path string
	console      bool
}{
	{"GET", "/api/v1/usage/inflight", false}, {"GET", "/api/v1/usage/logs", false},
	{"GET", "/api/v1/usage/summary", false}, {"GET", "/api/v1/usage/daily", false},
	{"GET", "/api/v1/usage/breakdown", false}, {"GET", "/api/v1/workers", false},
	{"GET", "/api/v1/workers/events", false}, {"GET", "/api/v1/workers/{param}/power", false},
	{"GET", "/api/v1/compute/catalogue", false}, {"GET", "/api/v1/compute/models", false},
	{"POST", "/api/v1/compute/instances", false}, {"GET", "/api/v1/compute/instances/{param}", false},
	{"DELETE", "/api/v1/compute/instances/{param}", false}, {"GET", "/api/v1/compute/spend", false},
	{"GET", "/v1/models/{param}", false}, {"POST", "/v1/messages/count_tokens", false},
	{"POST", "/api/v1/console/orgs", true}, {"PATCH", "/api/v1/console/orgs/{param}", true},
	{"POST", "/api/v1/console/orgs/{param}/credit", true}, {"PUT", "/api/v1/console/orgs/fuzz/members/{param}", true},
	{"POST", "/api/v1/console/orgs/{param}/keys", true}, {"POST", "/api/v1/console/orgs/fuzz/worker-tokens", true},
	{"POST", "/api/v1/console/orgs/fuzz/workers/approve", true}, {"POST", "/api/v1/console/users", true},
}

// Any request to the API's other routes with a valid key, and to the
// console's, is answered in time with a JSON body, an error body of the
// spec's shape, and never a 500, 502 or 504, whatever its query, its path's
// parameter or its body. The console's requests change only an
// organisation of their own ("fuzz") or ones they create, so that the
// key the API's requests use keeps working.
func FuzzManagementRequests(f *testing.F) {
	seeds := []struct {
		route        uint8
		param, query string
		body         string
	}{
		{1, "", "limit=0", ""}, {1, "", "limit=1001&offset=-1&worker_id=x", ""}, {2, "", "start=2026-13-01", ""},
		{3, "", "days=100000", ""}, {4, "", "group_by=nothing&start=2026-01-01T00:00:00Z", ""},
		{6, "", "since=-1&limit=9999999999999999999", ""}, {7, "00000000-0000-0000-0000-000000000000", "hours=0", ""},
		{10, "", "", `{"gpu_model_id":"h100","tier_id":"eu","models":["sim-chat"]}`}, {11, "x", "", ""},
		{12, "%2e%2e", "", ""}, {14, "sim-chat", "", ""}, {15, "", "", `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}]}`},
		{16, "", "", `{"name":"fuzz-2","plan":"pro"}`}, {17, "fuzz", "", `{"monthly_budget_gbp":-1,"requests_per_minute":1e3}`},
		{18, "fuzz", "", `{"amount_gbp":1.005}`}, {19, "nobody", "", `{"role":"owner"}`},
		{20, "fuzz", "", `{"user":"admin","name":"k","permissions":["inference:write","nope"]}`}, {21, "", "", `{"name":"t"}`},
		{22, "", "", `{"worker":"w/1"}`}, {23, "", "", `{"name":"someone"}`},
	}
	for _, s := range seeds {
		f.Add(s.route, s.param, s.query, []byte(s.body))
	}
	g := startInProcess(f)
	hc := &http.Client{Timeout: 30 * time.Second}
	console := g.consoleClient()
	if r, err := g.consoleDo(console, "POST", "/api/v1/console/orgs", []byte(`{"name":"fuzz"}`)); err != nil || r.status >= 300 {
		f.Fatalf("creating the fuzz organisation: %v %d %s", err, r.status, r.body)
	}
	f.Fuzz(func(t *testing.T, route uint8, param, query string, body []byte) {
		rt := mgmtRoutes[int(route)%len(mgmtRoutes)]
		if rt.console && strings.Contains(rt.path, "/orgs/{param}") && !strings.HasPrefix(param, "fuzz") {
			t.Skip("the console changes only the fuzz organisations")
		}
		if scripted(body) {
			t.Skip("the simulator's own directives fail or hang a request on purpose")
		}
		path := strings.ReplaceAll(rt.path, "{param}", param)
		if query != "" {
			path += "?" + query
		}
		var a answer
		var err error
		if rt.console {
			a, err = g.consoleDo(console, rt.method, path, body)
		} else {
			a, err = g.do(hc, rt.method, path, body)
		}
		var uerr *url.Error
		if errors.As(err, &uerr) && uerr.Op == "parse" {
			t.Skip("not a URL")
		}
		if err != nil {
			t.Fatalf("%s %s %q: %v", rt.method, path, body, err)
		}
		if err := checkManagement(a); err != nil {
			t.Fatalf("%s %s %q: %v\nstatus %d: %.2000s", rt.method, path, body, err, a.status, a.body)
		}
	})
}

// checkManagement checks an answer of the API's other routes: no failure
// of the server's own, and JSON, with the spec's detail when an error.
func checkManagement(a answer) error {
	switch a.status {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		return fmt.Errorf("status %d", a.status)
	case http.StatusNoContent:
		return nil
	}
	if a.status >= 400 {
		return errorBody(a.body)
	}
	if !json.Valid(a.body) {
		return errors.New("answer is not JSON")
	}
	return nil
}

// scripted reports whether body holds a string the simulator reads as a
// directive (or names its cold model, which takes a load's time), escapes
// and all.
func scripted(body []byte) bool {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return bytes.Contains(body, []byte("sim:"))
	}
	found := false
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			found = found || strings.Contains(v, "sim:") || v == "sim-cold"
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				walk(k)
				walk(e)
			}
		}
	}
	walk(v)
	return found
}

// checkAnswer checks r against the spec: a request id, a status for a
// client's mistake or success, and a body of the status's shape.
func checkAnswer(r answer) error {
	if r.header.Get("X-Request-Id") == "" {
		return errors.New("no X-Request-Id")
	}
	if !fuzzStatuses[r.status] {
		return fmt.Errorf("status %d", r.status)
	}
	ct := r.header.Get("Content-Type")
	switch {
	case r.status != http.StatusOK:
		return errorBody(r.body)
	case strings.HasPrefix(ct, "text/event-stream"):
		if _, err := sseEvents(r.body); err != nil {
			return err
		}
		if bytes.Contains(r.body, []byte("event: error")) || bytes.Contains(r.body, []byte(`"error":{`)) {
			return errors.New("stream failed")
		}
	case strings.HasPrefix(ct, "application/json"):
		if !json.Valid(r.body) {
			return errors.New("answer is not JSON")
		}
	}
	return nil
}

// errorBody checks an error's body against the spec: a JSON object whose
// detail is a message, or the envelope of a private request's error.
func errorBody(b []byte) error {
	var e map[string]any
	if err := json.Unmarshal(b, &e); err != nil {
		return fmt.Errorf("error body is not a JSON object: %w", err)
	}
	switch d := e["detail"].(type) {
	case string:
		if d == "" {
			return errors.New("empty detail")
		}
	case map[string]any:
	default:
		return errors.New("error body without a detail")
	}
	return nil
}

// sseEvents is a stream's events, which must all be whole.
func sseEvents(b []byte) ([][]byte, error) {
	if !bytes.HasSuffix(b, []byte("\n\n")) {
		return nil, errors.New("stream does not end with a whole event")
	}
	return bytes.Split(bytes.TrimSuffix(b, []byte("\n\n")), []byte("\n\n")), nil
}
