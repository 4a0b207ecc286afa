package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/svc-dev/svc/internal/harness"
)

// gateway is a server with one simulated worker, ready for inference.
func gateway(t *testing.T, serveArgs ...string) (*server, string) {
	t.Helper()
	s := startServer(t, "", serveArgs...)
	startWorker(t, s.URL, s.tokenFile(), "sim-box", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "8")
	return s, s.adminKey()
}

func sdk(s *server, key, prefix string) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.URL+prefix+"/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// svcOf reads the svc object of a raw reply or chunk.
func svcOf(t *testing.T, raw string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, raw)
	}
	svc, _ := m["svc"].(map[string]any)
	return svc
}

func TestOpenAISDK(t *testing.T) {
	s, key := gateway(t)
	ctx := context.Background()
	for _, prefix := range []string{"/v1", "/api/v1"} {
		t.Run(prefix, func(t *testing.T) {
			client := sdk(s, key, prefix)
			var resp *http.Response
			params := openai.ChatCompletionNewParams{
				Model:    "sim-chat",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello there")},
			}
			comp, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
			if err != nil {
				t.Fatal(err)
			}
			text := comp.Choices[0].Message.Content
			if text == "" || comp.Usage.TotalTokens == 0 || comp.Choices[0].FinishReason != "stop" {
				t.Fatalf("completion %s", comp.RawJSON())
			}
			svc := svcOf(t, comp.RawJSON())
			worker, _ := svc["worker"].(map[string]any)
			if svc["request_id"] != resp.Header.Get("X-Request-Id") || worker["id"] != resp.Header.Get("X-Worker-Id") || worker["name"] != "sim-box" {
				t.Fatalf("svc %v vs headers %v", svc, resp.Header)
			}
			if !strings.Contains(resp.Header.Get("Server-Timing"), "queue;dur=") {
				t.Fatalf("Server-Timing = %q", resp.Header.Get("Server-Timing"))
			}

			stream := client.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			var last openai.ChatCompletionChunk
			for stream.Next() {
				last = stream.Current()
				acc.AddChunk(last)
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if acc.Choices[0].Message.Content != text || acc.Usage.TotalTokens != comp.Usage.TotalTokens {
				t.Fatalf("streamed %q (%d tokens), want %q (%d)", acc.Choices[0].Message.Content, acc.Usage.TotalTokens, text, comp.Usage.TotalTokens)
			}
			if svc := svcOf(t, last.RawJSON()); svc["request_id"] == nil || svc["worker"] == nil {
				t.Fatalf("last chunk %s", last.RawJSON())
			}

			// Tools: a forced call.
			tools := client.Chat.Completions.New
			comp, err = tools(ctx, openai.ChatCompletionNewParams{
				Model:    "sim-chat",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather in Paris?")},
				Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
					Name:       "get_weather",
					Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
				})},
				ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
			})
			if err != nil {
				t.Fatal(err)
			}
			calls := comp.Choices[0].Message.ToolCalls
			if len(calls) != 1 || calls[0].Function.Name != "get_weather" || !json.Valid([]byte(calls[0].Function.Arguments)) || comp.Choices[0].FinishReason != "tool_calls" {
				t.Fatalf("tool call %s", comp.RawJSON())
			}

			// Structured output.
			comp, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:    "sim-chat",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("describe a city")},
				ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
					JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
						Name:   "city",
						Schema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}, "population": map[string]any{"type": "integer"}}},
					},
				}},
			})
			if err != nil {
				t.Fatal(err)
			}
			var city map[string]any
			if err := json.Unmarshal([]byte(comp.Choices[0].Message.Content), &city); err != nil || city["name"] == nil {
				t.Fatalf("structured output %q: %v", comp.Choices[0].Message.Content, err)
			}

			emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
				Model: "sim-embed", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
			})
			if err != nil || len(emb.Data) != 2 || len(emb.Data[0].Embedding) != 256 || emb.Usage.PromptTokens == 0 {
				t.Fatalf("embeddings %v %v", emb, err)
			}

			page, err := client.Models.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, m := range page.Data {
				ids = append(ids, m.ID)
			}
			if !strings.Contains(strings.Join(ids, ","), "sim-reasoner") {
				t.Fatalf("models %v", ids)
			}

			// Errors surface through the SDK with their status.
			_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "no-such-model",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
				t.Fatalf("unknown model through the SDK: %v", err)
			}
		})
	}
}

// rawStream posts a streaming request and returns the reply and its events.
func rawStream(t *testing.T, s *server, key, body string, hs ...header) (reply, []string) {
	t.Helper()
	r := s.do("POST", "/v1/chat/completions", body, append(hs, bearer(key))...)
	return r, sseData(r.Body)
}

func streamBody(model, content string, extra map[string]any) string {
	m := map[string]any{"model": model, "stream": true, "messages": []map[string]any{{"role": "user", "content": content}}}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func TestStreamingRules(t *testing.T) {
	s, key := gateway(t)
	r, data := rawStream(t, s, key, streamBody("sim-chat", "tell me", nil))
	if r.Status != 200 || r.Header.Get("Content-Type") != "text/event-stream" || r.Header.Get("X-Worker-Id") == "" || r.Header.Get("Server-Timing") != "" {
		t.Fatalf("headers %v", r.Header)
	}
	// Rule 1: data lines, each a chunk, ending with [DONE].
	if data[len(data)-1] != "[DONE]" {
		t.Fatalf("no [DONE]: %q", data[len(data)-1])
	}
	// Rule 2: the final chunks have empty choices: usage, then svc with
	// timing, worker and request_id last.
	usageChunk, final := data[len(data)-3], data[len(data)-2]
	var u, f map[string]any
	_ = json.Unmarshal([]byte(usageChunk), &u)
	_ = json.Unmarshal([]byte(final), &f)
	if len(u["choices"].([]any)) != 0 || u["usage"] == nil {
		t.Fatalf("usage chunk %s", usageChunk)
	}
	svc, _ := f["svc"].(map[string]any)
	if len(f["choices"].([]any)) != 0 || svc == nil || svc["worker"] == nil || svc["request_id"] != r.Header.Get("X-Request-Id") || svc["timing"] == nil {
		t.Fatalf("final chunk %s", final)
	}
	if u["id"] != f["id"] {
		t.Fatalf("final chunks have another id: %v vs %v", u["id"], f["id"])
	}
	// Every text chunk is a chat.completion.chunk with the same id.
	for _, d := range data[:len(data)-3] {
		var c map[string]any
		if err := json.Unmarshal([]byte(d), &c); err != nil || c["object"] != "chat.completion.chunk" || c["id"] != u["id"] {
			t.Fatalf("chunk %s", d)
		}
	}

	// Rule 4: what is known up front is a plain HTTP error.
	for _, tc := range []struct {
		body   string
		hs     []header
		status int
	}{
		{streamBody("nope", "x", nil), nil, 404},
		{streamBody("sim-embed", "x", nil), nil, 404},
		{streamBody("sim-chat", "x", nil), []header{{"X-Svc-Worker-Id", "wk_nobody"}}, 404},
		{streamBody("sim-chat", "x\nsim: fail=507", nil), nil, 507},
		{streamBody("sim-chat", "x", map[string]any{"temperature": 3}), nil, 422},
	} {
		r, _ := rawStream(t, s, key, tc.body, tc.hs...)
		if r.Status != tc.status || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s = %d %s", tc.body, r.Status, r.Body)
		}
	}
}

func TestStreamKeepAliveAndLateCapacity(t *testing.T) {
	s := startServer(t, "", "--keepalive-every", "200ms", "--queue-hold", "2500ms")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "one", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "1")

	// Rule 3: comments until the first chunk.
	// The response starts after the first-output wait (1 s); the engine
	// takes longer, so comments fill the gap.
	r, data := rawStream(t, s, key, streamBody("sim-chat", "slow\nsim: ttft=1600ms tokens=3", nil))
	if r.Status != 200 || !strings.Contains(string(r.Body), ": keep-alive\n\n") || data[len(data)-1] != "[DONE]" {
		t.Fatalf("keep-alive stream = %d %q", r.Status, tail(string(r.Body)))
	}

	// Rule 5: the only slot is busy; no worker within a second, so the
	// stream starts without worker headers and the 429 arrives in it.
	busy := s.async("POST", "/v1/chat/completions", streamBody("sim-chat", "hold\nsim: tokens=1000 tps=200", nil), bearer(key))
	s.workerNamed(key, "one", func(w map[string]any) bool { return w["active_tasks"].(float64) == 1 })
	r, data = rawStream(t, s, key, streamBody("sim-chat", "second", nil))
	if r.Status != 200 || r.Header.Get("X-Worker-Id") != "" {
		t.Fatalf("late capacity stream = %d %v", r.Status, r.Header)
	}
	if len(data) < 2 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("stream %q", data)
	}
	var e struct {
		Error struct {
			Type       string `json:"type"`
			Code       string `json:"code"`
			RetryAfter int    `json:"retry_after"`
			QueueDepth *int   `json:"queue_depth"`
			Message    string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(data[len(data)-2]), &e); err != nil || e.Error.Type != "rate_limit_exceeded" || e.Error.RetryAfter < 1 || e.Error.QueueDepth == nil {
		t.Fatalf("error frame %s", data[len(data)-2])
	}
	if r := <-busy; r.Status != 200 {
		t.Fatalf("busy stream = %d", r.Status)
	}
}

// unstreamedNotice sends body, a streaming chat request, without
// streaming, and returns the reply's svc.notice (nil when none) and the
// reply.
func unstreamedNotice(t *testing.T, s *server, key, body string) (map[string]any, string) {
	t.Helper()
	plain := strings.Replace(body, `"stream":true`, `"stream":false`, 1)
	r := s.do("POST", "/v1/chat/completions", plain, bearer(key))
	if r.Status != 200 {
		t.Fatalf("non-streaming = %d %s", r.Status, r.Body)
	}
	notice, _ := svcOf(t, string(r.Body))["notice"].(map[string]any)
	return notice, string(r.Body)
}

func TestNotices(t *testing.T) {
	s, key := gateway(t)
	tests := []struct {
		code  string
		model string
		text  string
		extra map[string]any
	}{
		// On a model without a thinking budget max_tokens covers the thinking.
		{"truncated_during_reasoning", "sim-small", "think\nsim: reasoning=30", map[string]any{"max_tokens": 10, "enable_thinking": true}},
		{"reasoning_budget_reached", "sim-reasoner", "think\nsim: reasoning=40 tokens=5", map[string]any{"reasoning": map[string]any{"max_tokens": 10}}},
		{"truncated_at_reasoning_budget", "sim-small", "think\nsim: reasoning=40 tokens=5", map[string]any{"enable_thinking": true, "reasoning": map[string]any{"max_tokens": 10}}},
		{"truncated_at_default_max_tokens", "sim-long", "go on\nsim: tokens=40000", nil},
		{"truncated_during_structured_output", "sim-chat", "json\nsim: tokens=50", map[string]any{"max_tokens": 5, "response_format": map[string]any{"type": "json_object"}}},
		{"context_window_exhausted", "sim-small", "long\nsim: tokens=6000", nil},
		{"structured_output_not_json", "sim-chat", "json\nsim: json=broken", map[string]any{"response_format": map[string]any{"type": "json_object"}}},
		{"strict_schema_not_enforced", "sim-chat", "json", map[string]any{"response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "x", "strict": true, "schema": map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string"}}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			body := streamBody(tt.model, tt.text, tt.extra)
			if notice, reply := unstreamedNotice(t, s, key, body); notice == nil || notice["code"] != tt.code || notice["message"] == "" {
				t.Fatalf("non-streaming notice = %v in %s", notice, tail(reply))
			}
			_, data := rawStream(t, s, key, body)
			// The notice rides on its own chunk just before the final one.
			if len(data) < 4 {
				t.Fatalf("stream %q", data)
			}
			n, _ := svcOf(t, data[len(data)-3])["notice"].(map[string]any)
			if n == nil || n["code"] != tt.code {
				t.Fatalf("streaming notice chunk %s", data[len(data)-3])
			}
		})
	}
}

// TestNoticesFromTheGateway: an engine such as vLLM reports no notices, so
// the gateway settles them from the reply it relays, whose answer text it
// does not keep outside structured output.
func TestNoticesFromTheGateway(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	engine := startSim(t, "tps=0,ttft=0")
	meta := filepath.Join(t.TempDir(), "meta.json")
	if err := os.WriteFile(meta, []byte(`{"sim-reasoner":{"capabilities":["chat","reasoning","thinking_budget"],"context_window":32768,"default_thinking":true}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	startWorker(t, s.URL, s.tokenFile(), "plain-engine", "--engine", "openai="+engine, "--model-meta", meta)
	tests := []struct {
		name, model, text string
		extra             map[string]any
		code              string // "" for none
	}{
		{"thinking ended at its budget, then an answer", "sim-reasoner", "think\nsim: reasoning=40 tokens=5",
			map[string]any{"max_tokens": 100, "reasoning": map[string]any{"max_tokens": 10}}, "reasoning_budget_reached"},
		{"an answer cut by the client's own max_tokens", "sim-reasoner", "think\nsim: reasoning=40 tokens=50",
			map[string]any{"max_tokens": 5, "reasoning": map[string]any{"max_tokens": 10}}, ""},
		// A model without a thinking budget spends max_tokens on thinking.
		{"thinking took the whole limit", "sim-small", "think\nsim: reasoning=30",
			map[string]any{"max_tokens": 10, "enable_thinking": true}, "truncated_during_reasoning"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := streamBody(tt.model, tt.text, tt.extra)
			notice, reply := unstreamedNotice(t, s, key, body)
			if code, _ := notice["code"].(string); code != tt.code {
				t.Fatalf("non-streaming notice = %v, want %q, in %s", notice, tt.code, tail(reply))
			}
			_, data := rawStream(t, s, key, body)
			var got string
			for _, d := range data {
				if strings.Contains(d, `"notice"`) {
					n, _ := svcOf(t, d)["notice"].(map[string]any)
					got, _ = n["code"].(string)
				}
			}
			if got != tt.code {
				t.Fatalf("streaming notice %q, want %q, in %q", got, tt.code, data)
			}
		})
	}
}

func TestCancelMidStreamIsRecorded(t *testing.T) {
	s, key := gateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/chat/completions",
		strings.NewReader(streamBody("sim-chat", "a long one please\nsim: tokens=100000 tps=100", nil)))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Header.Get("X-Request-Id")
	br := bufio.NewReader(resp.Body)
	events := 0
	for events < 10 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			events++
		}
	}
	var inflight []map[string]any
	_ = json.Unmarshal(s.do("GET", "/api/v1/usage/inflight", "", bearer(key)).Body, &inflight)
	if len(inflight) != 1 || inflight[0]["task_id"] != id || inflight[0]["tokens_generated"].(float64) < 1 || inflight[0]["worker_name"] != "sim-box" {
		t.Fatalf("in flight %v", inflight)
	}
	cancel()
	resp.Body.Close()
	gone := time.Now()
	s.workerNamed(key, "sim-box", func(w map[string]any) bool { return w["active_tasks"].(float64) == 0 })
	if d := time.Since(gone); d > 2*time.Second {
		t.Fatalf("slot freed %v after the cancel", d)
	}
	row := waitRow(t, s, key, id)
	if row["status_code"].(float64) != 499 || row["error_message"] != "Client disconnected" || row["tokens_estimated"] != true ||
		row["prompt_tokens"].(float64) < 1 || row["completion_tokens"].(float64) < 1 || row["worker_name"] != "sim-box" {
		t.Fatalf("row %v", row)
	}
	_ = json.Unmarshal(s.do("GET", "/api/v1/usage/inflight", "", bearer(key)).Body, &inflight)
	if len(inflight) != 0 {
		t.Fatalf("still in flight: %v", inflight)
	}
}

// waitRow waits for the usage row of request id.
func waitRow(t *testing.T, s *server, key, id string) map[string]any {
	t.Helper()
	var rows []map[string]any
	var row map[string]any
	if !harness.Eventually(10*time.Second, func() bool {
		rows = nil
		_ = json.Unmarshal(s.do("GET", "/api/v1/usage/logs?limit=1000", "", bearer(key)).Body, &rows)
		for _, r := range rows {
			if r["id"] == id {
				row = r
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no usage row for %s in %v", id, rows)
	}
	return row
}

func TestNonStreamingKeepAlive(t *testing.T) {
	s := startServer(t, "", "--keepalive-after", "300ms", "--keepalive-every", "100ms")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "slow", "--engine", "sim=tps=0,ttft=0")
	body := strings.Replace(streamBody("sim-chat", "slow\nsim: ttft=1200ms tokens=5", nil), `"stream":true`, `"stream":false`, 1)
	req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The whitespace the body starts with below shows the reply began
	// before the answer existed; no clock is read on a busy machine.
	if resp.StatusCode != 200 || resp.Header.Get("X-Worker-Name") != "slow" || resp.Header.Get("Server-Timing") != "" {
		t.Fatalf("kept-alive reply: %d %v", resp.StatusCode, resp.Header)
	}
	b, _ := io.ReadAll(resp.Body)
	if !strings.HasPrefix(string(b), "\n") {
		t.Fatalf("no keep-alive whitespace before the answer: %q", b[:min(len(b), 40)])
	}
	var comp map[string]any
	if err := json.Unmarshal(b, &comp); err != nil || comp["object"] != "chat.completion" || comp["svc"] == nil {
		t.Fatalf("late answer %q: %v", b, err)
	}

	// A late failure is a 200 whose body is the error object.
	body = strings.Replace(streamBody("sim-chat", "fail late\nsim: ttft=800ms fail=500 after=1", nil), `"stream":true`, `"stream":false`, 1)
	r := s.do("POST", "/v1/chat/completions", body, bearer(key))
	var e map[string]any
	if err := json.Unmarshal(r.Body, &e); err != nil || r.Status != 200 || e["error"] == nil || e["choices"] != nil {
		t.Fatalf("late failure = %d %q", r.Status, r.Body)
	}

	// On the Messages API it is Anthropic's error envelope, as a stream's
	// error event; on the Responses API a response with status failed, as
	// a stream's response.failed.
	const prompt = `fail late\nsim: ttft=800ms fail=503 after=1`
	r = s.do("POST", "/v1/messages", `{"model":"sim-chat","max_tokens":16,"messages":[{"role":"user","content":"`+prompt+`"}]}`, bearer(key))
	var m struct {
		Type  string
		Error struct{ Type, Message, Code string }
	}
	if err := json.Unmarshal(r.Body, &m); err != nil || r.Status != 200 || m.Type != "error" || m.Error.Type != "overloaded_error" ||
		m.Error.Code != "503" || m.Error.Message == "" {
		t.Fatalf("late failure on the Messages API = %d %q", r.Status, r.Body)
	}
	r = s.do("POST", "/v1/responses", `{"model":"sim-chat","input":"`+prompt+`"}`, bearer(key))
	var res struct {
		Object, Status string
		Error          struct{ Code, Message string }
		Output         []any
	}
	if err := json.Unmarshal(r.Body, &res); err != nil || r.Status != 200 || res.Object != "response" || res.Status != "failed" ||
		res.Error.Code == "" || res.Error.Message == "" || res.Output == nil {
		t.Fatalf("late failure on the Responses API = %d %q", r.Status, r.Body)
	}
}

func TestValidationAndPromptSize(t *testing.T) {
	s, key := gateway(t)
	tests := []struct {
		body   string
		status int
		field  string
	}{
		{`{"model":"sim-chat","messages":[{"role":"robot","content":"hi"}]}`, 422, "messages.0.role"},
		{`{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"temperature":2.5}`, 422, "temperature"},
		{`{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"reasoning":{"max_tokens":-1}}`, 422, "reasoning.max_tokens"},
		{`{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"reasoning_effort":"max"}`, 422, "reasoning_effort"},
		{`{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"mirostat":3}`, 422, "mirostat"},
		{`{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"n":17}`, 422, "n"},
		{`{"model":"sim-chat","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"x.pdf","file_data":"aGk="}}]}]}`, 422, "messages.0.content.0.file.filename"},
		{`{"model":"sim-chat","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`, 422, "messages.0.content.0.image_url.url"},
		{`{"model":"sim-chat","messages":[{"role":"user","content":"hi"}`, 400, ""},
		{`{"model":"sim-small","messages":[{"role":"user","content":"` + strings.Repeat("word ", 6000) + `"}]}`, 400, ""},
	}
	for _, tt := range tests {
		r := s.do("POST", "/v1/chat/completions", tt.body, bearer(key))
		if r.Status != tt.status || (tt.field != "" && !strings.Contains(string(r.Body), `"field":"`+tt.field+`"`)) {
			t.Errorf("%.80s = %d %s", tt.body, r.Status, r.Body)
		}
	}
	// A file part is accepted and reaches the engine as text.
	r := s.do("POST", "/v1/chat/completions",
		`{"model":"sim-chat","unknown_field":{"kept":true},"messages":[{"role":"user","content":[{"type":"text","text":"read"},{"type":"file","file":{"filename":"n.csv","file_data":"YSxiCjEsMgo="}}]}]}`, bearer(key))
	if r.Status != 200 {
		t.Fatalf("file part = %d %s", r.Status, r.Body)
	}
}

// A request for several choices (n) is relayed whole, streamed and not,
// through the gateway and a worker: every choice with its index, the
// usage of them all in the reply and in its row, and a notice judged on
// each choice's text, not on them run together.
func TestSeveralChoices(t *testing.T) {
	s, key := gateway(t)
	client := sdk(s, key, "/v1")
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:          "sim-chat",
		Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("describe a city\nsim: tokens=12")},
		N:              openai.Int(3),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}},
	}
	var resp *http.Response
	comp, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if len(comp.Choices) != 3 {
		t.Fatalf("%d choices: %s", len(comp.Choices), comp.RawJSON())
	}
	for i, c := range comp.Choices {
		if c.Index != int64(i) || !json.Valid([]byte(c.Message.Content)) || c.FinishReason != "stop" {
			t.Fatalf("choice %d: %s", i, c.RawJSON())
		}
	}
	if svc := svcOf(t, comp.RawJSON()); svc["notice"] != nil || svc["worker"] == nil {
		t.Fatalf("svc %v", svc)
	}
	row := waitRow(t, s, key, resp.Header.Get("X-Request-Id"))
	if row["completion_tokens"] != float64(comp.Usage.CompletionTokens) || comp.Usage.CompletionTokens < 3*12 {
		t.Fatalf("row %v, reply usage %+v", row, comp.Usage)
	}

	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 3 || acc.Usage.CompletionTokens != comp.Usage.CompletionTokens {
		t.Fatalf("streamed %d choices, usage %+v", len(acc.Choices), acc.Usage)
	}
	for i := range acc.Choices {
		if acc.Choices[i].Message.Content != comp.Choices[i].Message.Content {
			t.Errorf("streamed choice %d %q, want %q", i, acc.Choices[i].Message.Content, comp.Choices[i].Message.Content)
		}
	}
	_, data := rawStream(t, s, key, streamBody("sim-chat", "describe a city\nsim: tokens=12", map[string]any{"n": 3, "response_format": map[string]any{"type": "json_object"}}))
	if len(data) == 0 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("stream %q", data)
	}
	for _, d := range data[:len(data)-1] {
		if svc := svcOf(t, d); svc["notice"] != nil {
			t.Errorf("streamed notice %v", svc["notice"])
		}
	}
}

func TestUsageMatchesRows(t *testing.T) {
	s, key := gateway(t)
	reader := keyFor(t, s, "viewer", "member", "usage:read")
	inferOnly := keyFor(t, s, "caller", "member", "inference:write")
	for i := range 5 {
		s.do("POST", "/v1/chat/completions", chatBody("sim-chat", fmt.Sprint("q", i), i%2 == 0), bearer(key))
	}
	s.do("POST", "/v1/chat/completions", chatBody("sim-spec", "speculate", false), bearer(key))
	s.do("POST", "/v1/embeddings", `{"model":"sim-embed","input":["a","b","c"]}`, bearer(key))
	s.do("POST", "/v1/chat/completions", chatBody("missing-model", "x", false), bearer(key))
	s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "x\nsim: fail=507", false), bearer(key))

	var rows []map[string]any
	harness.Eventually(10*time.Second, func() bool {
		_ = json.Unmarshal(s.do("GET", "/api/v1/usage/logs", "", bearer(reader)).Body, &rows)
		return len(rows) >= 9
	})
	if len(rows) != 9 {
		t.Fatalf("%d rows: %v", len(rows), rows)
	}
	var sum struct{ requests, prompt, completion, total, failed float64 }
	for i, r := range rows {
		for _, k := range []string{"id", "created_at", "model", "request_type", "status_code", "error_message", "prompt_tokens", "completion_tokens",
			"total_tokens", "request_duration_ms", "time_to_first_token_ms", "tokens_per_second", "worker_id", "worker_name",
			"draft_acceptance_rate", "audio_seconds", "audio_format"} {
			if _, ok := r[k]; !ok {
				t.Fatalf("row lacks %s: %v", k, r)
			}
		}
		if i > 0 && r["created_at"].(string) > rows[i-1]["created_at"].(string) {
			t.Fatal("rows are not newest first")
		}
		if (r["model"] == "sim-spec") != (r["draft_acceptance_rate"] != nil) {
			t.Fatalf("draft_acceptance_rate only with speculative decoding: %v", r)
		}
		sum.requests++
		sum.prompt += r["prompt_tokens"].(float64)
		sum.completion += r["completion_tokens"].(float64)
		sum.total += r["total_tokens"].(float64)
		if r["status_code"].(float64) >= 400 {
			sum.failed++
		}
	}
	var summary map[string]any
	_ = json.Unmarshal(s.do("GET", "/api/v1/usage/summary?days=1", "", bearer(reader)).Body, &summary)
	if summary["requests"].(float64) != sum.requests || summary["prompt_tokens"].(float64) != sum.prompt ||
		summary["completion_tokens"].(float64) != sum.completion || summary["total_tokens"].(float64) != sum.total || summary["failed"].(float64) != sum.failed {
		t.Fatalf("summary %v, rows sum %+v", summary, sum)
	}
	var daily []map[string]any
	_ = json.Unmarshal(s.do("GET", "/api/v1/usage/daily?days=7", "", bearer(reader)).Body, &daily)
	if len(daily) != 7 || daily[6]["requests"].(float64) != sum.requests {
		t.Fatalf("daily %v", daily)
	}
	var br map[string]any
	_ = json.Unmarshal(s.do("GET", "/api/v1/usage/breakdown?sort=requests", "", bearer(reader)).Body, &br)
	models := br["models"].([]any)
	if models[0].(map[string]any)["model"] != "sim-chat" || len(br["workers"].([]any)) != 1 {
		t.Fatalf("breakdown %v", br)
	}
	if r := s.do("GET", "/api/v1/usage/logs", "", bearer(inferOnly)); r.Status != 403 || !strings.Contains(string(r.Body), "usage:read") {
		t.Fatalf("logs without usage:read = %d %s", r.Status, r.Body)
	}
	if r := s.do("GET", "/api/v1/usage/logs?worker_id=wk_nobody", "", bearer(reader)); r.Status != 200 || string(r.Body) != "[]\n" {
		t.Fatalf("filtered logs = %d %q", r.Status, r.Body)
	}
}

func TestReasoningMirroredAndDefaults(t *testing.T) {
	s, key := gateway(t)
	r := s.do("POST", "/v1/chat/completions", chatBody("sim-reasoner", "think first", false), bearer(key))
	var comp struct {
		Choices []struct {
			Message map[string]any `json:"message"`
		} `json:"choices"`
		Usage struct {
			CompletionTokensDetails struct {
				ReasoningTokens int `json:"reasoning_tokens"`
			} `json:"completion_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(r.Body, &comp); err != nil || r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	m := comp.Choices[0].Message
	if m["reasoning_content"] == nil || m["reasoning_content"] != m["reasoning"] || comp.Usage.CompletionTokensDetails.ReasoningTokens == 0 {
		t.Fatalf("reasoning not mirrored: %v", m)
	}
	// Thinking off through each control.
	for _, extra := range []string{`"reasoning_effort":"none"`, `"reasoning_effort":"minimal"`, `"reasoning":{"max_tokens":0}`, `"enable_thinking":false`} {
		body := `{"model":"sim-reasoner","messages":[{"role":"user","content":"no thinking"}],` + extra + `}`
		r := s.do("POST", "/v1/chat/completions", body, bearer(key))
		if r.Status != 200 || strings.Contains(string(r.Body), `"reasoning_content"`) {
			t.Fatalf("%s: %d %s", extra, r.Status, tail(string(r.Body)))
		}
	}
}

// TestUsageLogsPaging checks the log's page rules: 50 rows by default,
// at most 1000, offset counted from the newest, and 422 outside them.
func TestUsageLogsPaging(t *testing.T) {
	s, key := gateway(t)
	const n = 55
	for i := range n {
		if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", fmt.Sprint("q", i), false), bearer(key)); r.Status != 200 {
			t.Fatalf("request %d = %d", i, r.Status)
		}
	}
	page := func(query string) []map[string]any {
		t.Helper()
		r := s.do("GET", "/api/v1/usage/logs"+query, "", bearer(key))
		var rows []map[string]any
		if r.Status != 200 || json.Unmarshal(r.Body, &rows) != nil {
			t.Fatalf("logs%s = %d %s", query, r.Status, r.Body)
		}
		return rows
	}
	if !harness.Eventually(5*time.Second, func() bool { return len(page("?limit=1000")) >= n }) {
		t.Fatal("rows were not written")
	}
	all := page("?limit=1000")
	if got := len(page("")); got != 50 {
		t.Errorf("default page has %d rows, want 50", got)
	}
	rest := page("?offset=50")
	if len(rest) != n-50 || rest[0]["id"] != all[50]["id"] {
		t.Errorf("offset 50: %d rows starting at %v, want %d from %v", len(rest), rest[0]["id"], n-50, all[50]["id"])
	}
	// Filters by status and model come before the page. An engine's 500
	// is the client's 502, naming the worker it came from.
	for i := range 3 {
		body := chatBody("sim-small", fmt.Sprint("failing ", i, "\nsim: fail=500"), false)
		if r := s.do("POST", "/v1/chat/completions", body, bearer(key)); r.Status != 502 || r.Header.Get("X-Worker-Id") == "" || r.Header.Get("X-Worker-Name") == "" {
			t.Fatalf("failing request = %d %v %s", r.Status, r.Header, r.Body)
		}
	}
	if !harness.Eventually(5*time.Second, func() bool { return len(page("?status=502")) == 3 }) {
		t.Fatalf("status=502: %d rows", len(page("?status=502")))
	}
	if got := page("?status=502&model=sim-small&limit=2&offset=1"); len(got) != 2 || got[0]["status_code"] != 502.0 || got[1]["model"] != "sim-small" {
		t.Errorf("status and model filter, paged: %v", got)
	}
	if got := page("?status=200&model=sim-small"); len(got) != 0 {
		t.Errorf("status=200&model=sim-small: %d rows", len(got))
	}
	if got := page("?model=sim-chat&limit=1000"); len(got) != n {
		t.Errorf("model=sim-chat: %d rows, want %d", len(got), n)
	}
	for _, q := range []string{"?limit=1001", "?limit=0", "?offset=-1", "?status=42", "?status=x"} {
		if r := s.do("GET", "/api/v1/usage/logs"+q, "", bearer(key)); r.Status != 422 {
			t.Errorf("logs%s = %d, want 422", q, r.Status)
		}
	}
}

// A model is retrieved by id under both prefixes, as the SDKs' models
// retrieve does; one no worker has is a 404 naming it.
func TestRetrieveModel(t *testing.T) {
	s, key := gateway(t)
	ctx := context.Background()
	for _, prefix := range []string{"/v1", "/api/v1"} {
		client := sdk(s, key, prefix)
		m, err := client.Models.Get(ctx, "sim-chat")
		if err != nil {
			t.Fatalf("%s: %v", prefix, err)
		}
		if m.ID != "sim-chat" || m.Object != "model" || !strings.Contains(m.RawJSON(), `"simulated":true`) {
			t.Fatalf("%s: %s", prefix, m.RawJSON())
		}
		r := s.do("GET", prefix+"/models/org/no-such-model", "", bearer(key))
		body := r.JSON(t)
		e, _ := body["error"].(map[string]any)
		if r.Status != 404 || e["code"] != "model_not_found" || !strings.Contains(e["message"].(string), "org/no-such-model") {
			t.Fatalf("%s: unknown model: %d %s", prefix, r.Status, r.Body)
		}
	}
}

// The client's max_tokens caps the answer alone on a model with a thinking
// budget, also when thinking ends before its budget and so leaves the
// engine's cap (the two together) room for more: the answer ends at the
// cap with finish_reason length, streamed or not.
func TestAnswerCappedApartFromThinking(t *testing.T) {
	s, key := gateway(t)
	const text = "hi\nsim: tokens=40 reasoning=10"
	type reply struct {
		Choices []struct {
			Message struct {
				Content   string `json:"content"`
				Reasoning string `json:"reasoning_content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
			Details          struct {
				ReasoningTokens int `json:"reasoning_tokens"`
			} `json:"completion_tokens_details"`
		} `json:"usage"`
	}
	whole := func(maxTokens int) reply {
		t.Helper()
		body := streamBody("sim-reasoner", text, map[string]any{"stream": false, "max_tokens": maxTokens})
		r := s.do("POST", "/v1/chat/completions", body, bearer(key))
		var out reply
		if err := json.Unmarshal(r.Body, &out); r.Status != 200 || err != nil || len(out.Choices) != 1 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		return out
	}
	full := whole(1000)
	if c := full.Choices[0]; c.FinishReason != "stop" || len(strings.Fields(c.Message.Content)) < 30 || full.Usage.CompletionTokens != 50 {
		t.Fatalf("within the cap: %+v, usage %+v", c, full.Usage)
	}
	capped := whole(5)
	c := capped.Choices[0]
	if words := len(strings.Fields(c.Message.Content)); c.FinishReason != "length" || words == 0 || words > 7 || c.Message.Reasoning == "" {
		t.Errorf("capped at 5: %d words, %+v", words, c)
	}
	if capped.Usage.CompletionTokens != 15 || capped.Usage.Details.ReasoningTokens != 10 {
		t.Errorf("capped usage %+v, want 10 of thinking and 5 of answer", capped.Usage)
	}

	sr, data := rawStream(t, s, key, streamBody("sim-reasoner", text, map[string]any{"max_tokens": 5}))
	answers, finish := 0, ""
	for _, d := range data {
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(d), &chunk) != nil {
			continue
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != "" {
				answers++
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	if answers != 5 || finish != "length" || data[len(data)-1] != "[DONE]" {
		t.Errorf("streamed: %d answer chunks, finish_reason %q, last event %q", answers, finish, data[len(data)-1])
	}
	// The engine, stopped at the cap, reported no usage: the worker's
	// count is the whole answer's, an estimate in the usage row.
	var streamed reply
	for _, d := range data {
		if strings.Contains(d, `"usage":{`) {
			_ = json.Unmarshal([]byte(d), &streamed)
		}
	}
	if streamed.Usage.CompletionTokens != 15 || streamed.Usage.Details.ReasoningTokens != 10 {
		t.Errorf("streamed usage %+v, want 10 of thinking and 5 of answer as the whole answer's", streamed.Usage)
	}
	row := s.usageRow(key, sr.Header.Get("X-Request-Id"))
	if row["tokens_estimated"] != true || row["completion_tokens"] != 15.0 || row["reasoning_tokens"] != 10.0 {
		t.Errorf("streamed row %v, want the worker's count, estimated", row)
	}
}
