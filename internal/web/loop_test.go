package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/netguard"
)

// fakeEngine answers as a tool-using model: while calls are scripted it
// makes the next turn's, and then, or when tools are ruled out, it
// answers in text quoting the last tool result.
type fakeEngine struct {
	mu     sync.Mutex
	calls  [][][2]string // per turn, the (name, arguments) of each call
	always [2]string     // called every turn when set, past the script
	fail   int           // the turn (1-based) that fails with a 500
	// roleWithCall sends a turn's role in its first call's chunk, not in
	// a chunk of its own.
	roleWithCall bool
	// refuseTools refuses a request that offers tools, as vLLM started
	// without tool calling does.
	refuseTools bool
	// ignoreNone calls tools even when tool_choice is "none", as an
	// engine that does not honour it may.
	ignoreNone bool
	bodies     []map[string]json.RawMessage
}

func (e *fakeEngine) Kind() string                                { return "fake" }
func (e *fakeEngine) Models(context.Context) ([]api.Model, error) { return nil, nil }

func (e *fakeEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	var body map[string]json.RawMessage
	if err := json.Unmarshal(req.Body, &body); err != nil {
		return engine.Failure(400, "invalid_request_error", err.Error())
	}
	e.mu.Lock()
	e.bodies = append(e.bodies, body)
	turn := len(e.bodies)
	e.mu.Unlock()
	if e.refuseTools && len(body["tools"]) > 0 {
		return engine.Failure(400, "BadRequestError", `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`)
	}
	if turn == e.fail {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "engine broke")
	}
	var calls [][2]string
	if (e.ignoreNone || string(body["tool_choice"]) != `"none"`) && len(body["tools"]) > 0 {
		switch {
		case turn <= len(e.calls):
			calls = e.calls[turn-1]
		case e.always[0] != "":
			calls = [][2]string{e.always}
		}
	}
	var msgs []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	_ = json.Unmarshal(body["messages"], &msgs)
	answer := "plain answer"
	if last := msgs[len(msgs)-1]; last.Role == "tool" {
		answer = "from the tool: " + strings.SplitN(last.Content, "\n", 2)[0]
	}
	res := &api.Result{Status: 200, Usage: &api.Usage{PromptTokens: 10 * turn, CompletionTokens: 5, TotalTokens: 10*turn + 5},
		Timing: api.Timing{TTFTMs: new(3.0)}}
	head := `"id":"chatcmpl-` + fmt.Sprint(turn) + `","object":"chat.completion.chunk","created":` + fmt.Sprint(1700000000+turn) + `,"model":"m"`
	if req.Stream {
		send := func(s string) error { return sink.Event(ctx, []byte(s)) }
		role := `"role":"assistant",`
		if len(calls) == 0 || !e.roleWithCall {
			if err := send(`{` + head + `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`); err != nil {
				return engine.Cancelled()
			}
			role = ""
		}
		if len(calls) > 0 {
			for i, c := range calls {
				args, _ := json.Marshal(c[1])
				half := len(args) / 2
				send(fmt.Sprintf(`{%s,"choices":[{"index":0,"delta":{%s"tool_calls":[{"index":%d,"id":"call_%d_%d","type":"function","function":{"name":%q,"arguments":%s"}}]}}]}`, head, role, i, turn, i, c[0], args[:half]))
				role = ""
				send(fmt.Sprintf(`{%s,"choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"function":{"arguments":"%s}}]}}]}`, head, i, args[half:]))
			}
			send(`{` + head + `,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)
			res.FinishReason = "tool_calls"
			return res
		}
		for _, w := range strings.SplitAfter(answer, " ") {
			text, _ := json.Marshal(w)
			send(`{` + head + `,"choices":[{"index":0,"delta":{"content":` + string(text) + `},"finish_reason":null}]}`)
		}
		send(`{` + head + `,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		return res
	}
	msg := map[string]any{"role": "assistant", "content": answer}
	finish := "stop"
	if len(calls) > 0 {
		var tcs []any
		for i, c := range calls {
			tcs = append(tcs, map[string]any{"id": fmt.Sprintf("call_%d_%d", turn, i), "type": "function",
				"function": map[string]any{"name": c[0], "arguments": c[1]}})
		}
		msg, finish = map[string]any{"role": "assistant", "content": nil, "tool_calls": tcs}, "tool_calls"
	}
	out, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 10 * turn, "completion_tokens": 5, "total_tokens": 10*turn + 5}})
	if err := sink.Body(ctx, out); err != nil {
		return engine.Cancelled()
	}
	return res
}

type fakeSearch struct{}

func (fakeSearch) Search(_ context.Context, q string) ([]SearchResult, error) {
	if q == "fail" {
		return nil, fmt.Errorf("the search backend answered 503 Service Unavailable")
	}
	return []SearchResult{{Title: "About " + q, URL: "https://example.org/" + q, Snippet: "all about it"}}, nil
}

type recordSink struct {
	events [][]byte
	body   []byte
}

func (s *recordSink) Event(_ context.Context, d []byte) error {
	s.events = append(s.events, append([]byte(nil), d...))
	return nil
}
func (s *recordSink) Body(_ context.Context, d []byte) error { s.body = d; return nil }

func newLoop(t *testing.T) (*Loop, string) {
	srv, addr := site(t)
	return &Loop{Tools: &Tools{
		Fetcher:  &Fetcher{Guard: netguard.Guard{Allow: []netip.AddrPort{addr}}},
		Searcher: fakeSearch{},
	}}, srv.URL
}

func chatRequest(stream bool, extra string) *engine.Request {
	return &engine.Request{Kind: api.KindChat, Model: "m", Stream: stream,
		Body: []byte(`{"model":"m","stream":` + fmt.Sprint(stream) + `,"messages":[{"role":"user","content":"tell me about otters"}]` + extra + `}`)}
}

func TestLoopUnary(t *testing.T) {
	loop, base := newLoop(t)
	eng := &fakeEngine{calls: [][][2]string{
		{{"web_search", `{"query":"otters"}`}},
		{{"web_fetch", `{"url":"` + base + `/page"}`}, {"web_fetch", `{"url":"http://10.0.0.1/"}`}},
	}}
	var out recordSink
	res := loop.Serve(context.Background(), eng, chatRequest(false, ""), &out)
	if res.Status != 200 {
		t.Fatalf("result %+v", res)
	}
	var reply struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage json.RawMessage `json:"usage"`
		Steps []Step          `json:"web_tool_steps"`
	}
	if err := json.Unmarshal(out.body, &reply); err != nil {
		t.Fatal(err)
	}
	if reply.Choices[0].Message.Content != "from the tool: Error: 10.0.0.1 is a private address" {
		t.Errorf("answer %q", reply.Choices[0].Message.Content)
	}
	if reply.Usage != nil {
		t.Errorf("the last turn's usage was left in the reply: %s", reply.Usage)
	}
	if u := res.Usage; u == nil || u.PromptTokens != 60 || u.CompletionTokens != 15 || u.TotalTokens != 75 {
		t.Errorf("usage %+v, want every turn's", res.Usage)
	}
	if res.Timing.TTFTMs == nil || *res.Timing.TTFTMs < 3 {
		t.Errorf("ttft %v", res.Timing.TTFTMs)
	}
	s := reply.Steps
	if len(s) != 3 {
		t.Fatalf("steps %+v", s)
	}
	if s[0].Index != 0 || s[0].Name != "web_search" || s[0].Arguments != `{"query":"otters"}` || s[0].OK == nil || !*s[0].OK ||
		!strings.HasPrefix(s[0].Result, "1. About otters\nhttps://example.org/otters") || *s[0].ResultChars != len(s[0].Result) {
		t.Errorf("step 0 %+v", s[0])
	}
	if s[1].Index != 1 || s[1].Name != "web_fetch" || !*s[1].OK || !strings.Contains(s[1].Result, "Otters hold hands") {
		t.Errorf("step 1 %+v", s[1])
	}
	if s[2].Index != 2 || *s[2].OK || s[2].Error != "10.0.0.1 is a private address" || s[2].Result != "" || *s[2].ResultChars != 0 {
		t.Errorf("step 2 %+v", s[2])
	}

	// The conversation each turn was given.
	if len(eng.bodies) != 3 {
		t.Fatalf("%d turns", len(eng.bodies))
	}
	var tools []struct {
		Function struct{ Name string } `json:"function"`
	}
	json.Unmarshal(eng.bodies[0]["tools"], &tools)
	if len(tools) != 2 || tools[0].Function.Name != "web_fetch" || tools[1].Function.Name != "web_search" {
		t.Errorf("tools offered %s", eng.bodies[0]["tools"])
	}
	var msgs []map[string]any
	json.Unmarshal(eng.bodies[2]["messages"], &msgs)
	roles := []string{}
	for _, m := range msgs {
		roles = append(roles, m["role"].(string))
	}
	if strings.Join(roles, ",") != "user,assistant,tool,assistant,tool,tool" {
		t.Errorf("roles %v", roles)
	}
	if msgs[2]["tool_call_id"] != "call_1_0" || msgs[5]["tool_call_id"] != "call_2_1" {
		t.Errorf("tool messages %v", msgs)
	}
}

func TestLoopStream(t *testing.T) {
	for _, roleWithCall := range []bool{false, true} {
		t.Run(fmt.Sprint("role with the call ", roleWithCall), func(t *testing.T) { testLoopStream(t, roleWithCall) })
	}
}

// testLoopStream runs a stream of one step. The client gets one role
// chunk: the first turn's, or, when that turn's role came with its call,
// which is held back, the last turn's.
func testLoopStream(t *testing.T, roleWithCall bool) {
	loop, base := newLoop(t)
	eng := &fakeEngine{calls: [][][2]string{{{"web_fetch", `{"url":"` + base + `/page"}`}}}, roleWithCall: roleWithCall}
	var out recordSink
	res := loop.Serve(context.Background(), eng, chatRequest(true, ""), &out)
	if res.Status != 200 {
		t.Fatalf("result %+v", res)
	}
	var kinds []string
	var steps []Step
	var text strings.Builder
	for _, ev := range out.events {
		var c struct {
			ID      string `json:"id"`
			Created int64  `json:"created"`
			Choices []struct {
				Delta        map[string]any `json:"delta"`
				FinishReason *string        `json:"finish_reason"`
			} `json:"choices"`
			Svc *struct {
				Step Step `json:"web_tool_step"`
			} `json:"svc"`
		}
		if err := json.Unmarshal(ev, &c); err != nil {
			t.Fatal(err)
		}
		// One completion: every chunk under the first turn's identity.
		if c.ID != "chatcmpl-1" || c.Created != 1700000001 {
			t.Errorf("a chunk of another identity: %s", ev)
		}
		switch {
		case c.Svc != nil:
			if c.Choices == nil || len(c.Choices) != 0 || c.ID != "chatcmpl-1" {
				t.Errorf("step event %s", ev)
			}
			steps = append(steps, c.Svc.Step)
			kinds = append(kinds, "step")
		case c.Choices[0].Delta["tool_calls"] != nil:
			t.Errorf("a tool call reached the client: %s", ev)
		case c.Choices[0].Delta["role"] != nil:
			kinds = append(kinds, "role")
		case c.Choices[0].FinishReason != nil:
			kinds = append(kinds, "finish:"+*c.Choices[0].FinishReason)
		default:
			text.WriteString(c.Choices[0].Delta["content"].(string))
			if kinds[len(kinds)-1] != "text" {
				kinds = append(kinds, "text")
			}
		}
	}
	want := "role,step,step,text,finish:stop"
	if roleWithCall {
		want = "step,step,role,text,finish:stop"
	}
	if got := strings.Join(kinds, ","); got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if len(steps) == 2 {
		call, result := steps[0], steps[1]
		if call.Index != 0 || call.Name != "web_fetch" || call.OK != nil || call.Result != "" || call.ResultChars != nil {
			t.Errorf("call event %+v", call)
		}
		if result.Index != 0 || result.Name != "web_fetch" || result.Arguments != call.Arguments || result.OK == nil || !*result.OK ||
			!strings.Contains(result.Result, "Otters hold hands") || *result.ResultChars == 0 {
			t.Errorf("result event %+v", result)
		}
	}
	if text.String() != "from the tool: Title: Otters" {
		t.Errorf("text %q", text.String())
	}
	if res.Usage == nil || res.Usage.PromptTokens != 30 || res.Usage.TotalTokens != 40 {
		t.Errorf("usage %+v", res.Usage)
	}
	if res.Timing.TTFTMs == nil || *res.Timing.TTFTMs <= 0 {
		t.Errorf("ttft %v", res.Timing.TTFTMs)
	}
}

// An engine that refuses tools (vLLM without tool calling) serves a chat
// whose client asked for none as it was sent, and the model's later chats
// go to it without tools at once.
func TestLoopEngineRefusingTools(t *testing.T) {
	loop, _ := newLoop(t)
	eng := &fakeEngine{refuseTools: true}
	for _, stream := range []bool{false, true} {
		var out recordSink
		if res := loop.Serve(context.Background(), eng, chatRequest(stream, ""), &out); res.Status != 200 {
			t.Fatalf("stream %v: %+v", stream, res)
		}
		if len(out.events) == 0 && len(out.body) == 0 {
			t.Fatalf("stream %v: no answer", stream)
		}
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	// The first chat tried the tools and then went without; the second
	// went without at once.
	if len(eng.bodies) != 3 || eng.bodies[0]["tools"] == nil || eng.bodies[1]["tools"] != nil || eng.bodies[2]["tools"] != nil {
		t.Fatalf("%d requests reached the engine; want 3, tools only in the first", len(eng.bodies))
	}
}

// A model that keeps calling is stopped at the step limit: its extra
// calls are answered with an error, and the next turn may not call.
func TestLoopStepLimit(t *testing.T) {
	loop, _ := newLoop(t)
	loop.MaxSteps = 2
	eng := &fakeEngine{always: [2]string{"web_search", `{"query":"again"}`},
		calls: [][][2]string{{{"web_search", `{"query":"a"}`}, {"web_search", `{"query":"b"}`}, {"web_search", `{"query":"c"}`}}}}
	var out recordSink
	res := loop.Serve(context.Background(), eng, chatRequest(false, ""), &out)
	if res.Status != 200 {
		t.Fatalf("result %+v", res)
	}
	var reply struct {
		Steps []Step `json:"web_tool_steps"`
	}
	json.Unmarshal(out.body, &reply)
	// Two run, and the third, past the limit, shown as a step that failed.
	if len(reply.Steps) != 3 || len(eng.bodies) != 2 || string(eng.bodies[1]["tool_choice"]) != `"none"` {
		t.Errorf("%d steps over %d turns, last tool_choice %s", len(reply.Steps), len(eng.bodies), eng.bodies[len(eng.bodies)-1]["tool_choice"])
	}
	for i, st := range reply.Steps {
		failed := i == 2
		if st.Index != i || st.OK == nil || *st.OK == failed || (st.Error != "") != failed ||
			failed && (st.Error != "the limit of 2 web tool calls is reached" || st.ResultChars == nil || *st.ResultChars != 0 || st.Arguments != `{"query":"c"}`) {
			t.Errorf("step %d: %+v", i, st)
		}
	}
	if !strings.Contains(string(out.body), "from the tool: Error: the limit of 2 web tool calls is reached") {
		t.Errorf("reply %s", out.body)
	}
}

// A model that goes on calling whatever it is told (an engine that
// ignores tool_choice "none", or calls of a tool not offered) is stopped
// after the turns the step limit allows, with the usage of the turns it
// took, streamed or not.
func TestLoopTurnLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		always [2]string
		stream bool
	}{
		{"past the limit", [2]string{"web_search", `{"query":"again"}`}, false},
		{"past the limit, streamed", [2]string{"web_search", `{"query":"again"}`}, true},
		{"a tool not offered", [2]string{"run_shell", `{"cmd":"ls"}`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loop, _ := newLoop(t)
			loop.MaxSteps = 2
			eng := &fakeEngine{always: tc.always, ignoreNone: true}
			var out recordSink
			res := loop.Serve(context.Background(), eng, chatRequest(tc.stream, ""), &out)
			if res.Status != http.StatusBadGateway || !res.Final || !strings.Contains(res.Error.Message, "went on calling tools") {
				t.Fatalf("result %+v", res)
			}
			if len(eng.bodies) != 4 || res.Usage == nil || res.Usage.CompletionTokens != 4*5 {
				t.Fatalf("%d turns, usage %+v; want 4 turns and their usage", len(eng.bodies), res.Usage)
			}
			// The calls past the limit are shown, up to twice the limit in
			// all; a tool not offered never is.
			if tc.stream {
				var ended int
				for _, ev := range out.events {
					if strings.Contains(string(ev), `"ok":`) {
						ended++
					}
				}
				if ended != 4 {
					t.Fatalf("%d steps ended in the stream, want 4", ended)
				}
			}
		})
	}
}

func TestLoopNotOffered(t *testing.T) {
	loop, _ := newLoop(t)
	for _, extra := range []string{
		`,"tools":[{"type":"function","function":{"name":"get_weather"}}]`,
		`,"tool_choice":"none"`,
		`,"tool_choice":"required"`,
		`,"n":2`,
	} {
		eng := &fakeEngine{}
		req := chatRequest(false, extra)
		var out recordSink
		loop.Serve(context.Background(), eng, req, &out)
		var sent map[string]json.RawMessage
		json.Unmarshal(req.Body, &sent)
		if len(eng.bodies) != 1 || string(eng.bodies[0]["tools"]) != string(sent["tools"]) || strings.Contains(string(out.body), "web_tool_steps") {
			t.Errorf("with %s the engine got tools %s", extra, eng.bodies[0]["tools"])
		}
	}
	if !Offered(chatRequest(false, `,"tool_choice":"auto","tools":[]`).Body) {
		t.Error("tool_choice auto with no tools is not offered")
	}
	for _, n := range []string{`,"n":1`, `,"n":null`} {
		if !Offered(chatRequest(false, n).Body) {
			t.Errorf("a request with %s is not offered", n)
		}
	}
}

// A turn that fails fails the request, and a plain answer is passed on
// as the engine made it.
func TestLoopFailureAndPlainAnswer(t *testing.T) {
	loop, _ := newLoop(t)
	eng := &fakeEngine{calls: [][][2]string{{{"web_search", `{"query":"fail"}`}}}, fail: 2}
	var out recordSink
	if res := loop.Serve(context.Background(), eng, chatRequest(true, ""), &out); res.Status != 500 {
		t.Errorf("result %+v", res)
	}
	eng = &fakeEngine{}
	out = recordSink{}
	res := loop.Serve(context.Background(), eng, chatRequest(false, ""), &out)
	if res.Status != 200 || strings.Contains(string(out.body), "web_tool_steps") || !strings.Contains(string(out.body), `"usage"`) || *res.Timing.TTFTMs != 3 {
		t.Errorf("plain answer %s, %+v", out.body, res)
	}
}

// hugeSearch answers with one hit of megabytes, as a broken or hostile
// search backend may.
type hugeSearch struct{}

func (hugeSearch) Search(context.Context, string) ([]SearchResult, error) {
	return []SearchResult{{Title: strings.Repeat("t", 1<<20), URL: "https://example.com/" + strings.Repeat("u", 1<<20),
		Snippet: strings.Repeat("s", 1<<20)}}, nil
}

// What the model is given of a search hit is cut: one huge hit does not
// fill its context and fail the chat.
func TestSearchHitsAreCut(t *testing.T) {
	tools := &Tools{Searcher: hugeSearch{}}
	out, err := tools.run(context.Background(), ToolSearch, `{"query":"huge"}`)
	if err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCountInString(out); n > maxTitleChars+maxURLChars+maxSnippetChars+16 {
		t.Fatalf("the model is given %d characters of one hit", n)
	}
}
