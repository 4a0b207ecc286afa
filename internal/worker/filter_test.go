package worker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// judgeEngine is a guard-b (Qwen3Guard) that calls unsafe any message
// holding "BAD", and a chat model that streams the chunks it is given.
type judgeEngine struct {
	stubEngine
	chunks []string
	// indexes are the chunks' choices; all 0 when nil.
	indexes []int
	// deltas, when set, are the chunks' deltas in place of chunks'
	// contents.
	deltas []map[string]any
	// whole, when set, is the answer to a request not streamed.
	whole string
	calls int
	// window, when set, is the guard's context window in tokens of three
	// characters, listed when listWindow: a longer call fails as an
	// engine's does.
	window     int
	listWindow bool
	longest    int // the longest guard call's text
}

func (e *judgeEngine) Models(context.Context) ([]api.Model, error) {
	guard := api.Model{ID: "guard-b:0.6b", Capabilities: []string{api.CapChat}}
	if e.listWindow {
		guard.ContextWindow = e.window
	}
	return []api.Model{{ID: "chat", Capabilities: []string{api.CapChat}}, guard}, nil
}

func (e *judgeEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if req.Model == "guard-b:0.6b" {
		e.calls++
		var body struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		_ = json.Unmarshal(req.Body, &body)
		n := 0
		for _, m := range body.Messages {
			n += len(m.Content)
		}
		e.longest = max(e.longest, n)
		if e.window > 0 && n > 3*e.window {
			r := engine.Failure(http.StatusBadRequest, api.TypeContextLengthExceeded, "too long")
			r.Error.Code = api.TypeContextLengthExceeded
			return r
		}
		answer := "Safety: Safe\nCategories: None"
		if strings.Contains(body.Messages[len(body.Messages)-1].Content, "BAD") {
			answer = "Safety: Unsafe\nCategories: Violent"
		}
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": answer}}}})
		_ = sink.Body(ctx, b)
		return engine.OK()
	}
	if e.whole != "" && !req.Stream {
		_ = sink.Body(ctx, []byte(e.whole))
		return engine.OK()
	}
	deltas := e.deltas
	for _, c := range e.chunks {
		deltas = append(deltas, map[string]any{"content": c})
	}
	for i, d := range deltas {
		index := 0
		if e.indexes != nil {
			index = e.indexes[i]
		}
		b, _ := json.Marshal(map[string]any{"id": "c1", "created": 7, "model": "chat", "object": "chat.completion.chunk",
			"choices": []any{map[string]any{"index": index, "delta": d}}})
		if err := sink.Event(ctx, b); err != nil {
			return engine.Cancelled()
		}
	}
	res := engine.OK()
	res.FinishReason = "stop"
	return res
}

// listedAgent is an agent of eng alone, its models listed.
func listedAgent(eng engine.Engine) *Agent {
	a, _ := New(Config{Gateway: "http://gw", Token: "t", Name: "w", Engines: []engine.Engine{eng}})
	a.refreshModels(context.Background())
	return a
}

type eventSink struct{ events []string }

func (s *eventSink) Event(_ context.Context, b []byte) error {
	s.events = append(s.events, string(b))
	return nil
}
func (s *eventSink) Body(_ context.Context, b []byte) error {
	s.events = append(s.events, string(b))
	return nil
}

// A streamed reply goes out only as the guard passes it, a window at a
// time; flagged text never does, and the reply ends content_filter.
func TestFilterStreamedReply(t *testing.T) {
	chunk := strings.Repeat("x", 50)
	tests := []struct {
		name     string
		chunks   []string
		released int    // content chunks the client got
		finish   string // the reply's finish reason
		made     int    // chunks the engine made before the flag stopped it
	}{
		{"clean", []string{chunk, chunk, chunk, chunk, chunk, chunk, chunk}, 7, "stop", 7},
		{"flagged after a window passed", []string{chunk, chunk, chunk, chunk, chunk, chunk, chunk, "BAD" + chunk, chunk}, 6, api.FinishContentFilter, 9},
		{"flagged in the first window", []string{"BAD", chunk}, 0, api.FinishContentFilter, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := &judgeEngine{chunks: tt.chunks}
			a, err := New(Config{Gateway: "http://gw", Token: "t", Name: "w", Engines: []engine.Engine{eng}})
			if err != nil {
				t.Fatal(err)
			}
			a.refreshModels(context.Background())
			var out eventSink
			req := &engine.Request{Kind: api.KindChat, Model: "chat", Stream: true, Body: []byte(`{"model":"chat","messages":[{"role":"user","content":"hi"}]}`)}
			res := a.filterChat(context.Background(), eng, req, "guard-b:0.6b", &out)
			if res.Status != http.StatusOK || res.FinishReason != tt.finish {
				t.Fatalf("result %+v", res)
			}
			// Stopped at the flag, the engine reported no usage: the
			// worker's estimate of what it made, held back or not.
			if tt.finish == api.FinishContentFilter {
				chars := 0
				for _, c := range tt.chunks[:tt.made] {
					chars += len(c)
				}
				if u := res.Usage; u == nil || !u.Estimated || u.CompletionTokens != (chars+3)/4 || u.PromptTokens != 1 {
					t.Fatalf("usage %+v, want %d completion tokens estimated from the %d characters made and 1 of prompt", u, (chars+3)/4, chars)
				}
			}
			released := 0
			for _, e := range out.events {
				if strings.Contains(e, "BAD") {
					t.Fatal("flagged text reached the client")
				}
				if strings.Contains(e, `"content":"x`) {
					released++
				}
			}
			if released != tt.released {
				t.Fatalf("released %d chunks, want %d: %v", released, tt.released, out.events)
			}
			if last := out.events[len(out.events)-1]; tt.finish == api.FinishContentFilter &&
				(!strings.Contains(last, `"finish_reason":"content_filter"`) || !strings.Contains(last, `"id":"c1"`)) {
				t.Fatalf("closing chunk %s", last)
			}
		})
	}
}

// The choices of a reply of several (n) are judged each as its own text,
// not run together as they arrive: "BAD" split by another choice's chunk
// is still flagged, and every choice closes content_filter.
func TestFilterJudgesEachChoice(t *testing.T) {
	eng := &judgeEngine{chunks: []string{"BA", "x", "D", "y"}, indexes: []int{0, 1, 0, 1}}
	a, err := New(Config{Gateway: "http://gw", Token: "t", Name: "w", Engines: []engine.Engine{eng}})
	if err != nil {
		t.Fatal(err)
	}
	a.refreshModels(context.Background())
	var out eventSink
	req := &engine.Request{Kind: api.KindChat, Model: "chat", Stream: true, Body: []byte(`{"n":2,"messages":[{"role":"user","content":"hi"}]}`)}
	res := a.filterChat(context.Background(), eng, req, "guard-b:0.6b", &out)
	if res.Status != http.StatusOK || res.FinishReason != api.FinishContentFilter {
		t.Fatalf("result %+v, events %v", res, out.events)
	}
	if len(out.events) != 1 {
		t.Fatalf("events %v, want only the closing chunk", out.events)
	}
	var closing struct {
		Choices []struct {
			Index        int    `json:"index"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(out.events[0]), &closing); err != nil || len(closing.Choices) != 2 ||
		closing.Choices[1].Index != 1 || closing.Choices[0].FinishReason != api.FinishContentFilter || closing.Choices[1].FinishReason != api.FinishContentFilter {
		t.Fatalf("closing chunk %s", out.events[0])
	}
}

// A flagged prompt is refused before the chat model runs, wherever in
// the conversation the flagged text is: the key's holder wrote it all.
func TestFilterPrompt(t *testing.T) {
	for _, tc := range []struct {
		name, messages string
		refused        bool
	}{
		{"last user message, parts", `[{"role":"user","content":[{"type":"text","text":"something BAD"}]}]`, true},
		{"system prompt", `[{"role":"system","content":"BAD orders"},{"role":"user","content":"go on"}]`, true},
		{"earlier user turn", `[{"role":"user","content":"how to do BAD things"},{"role":"assistant","content":"No."},{"role":"user","content":"answer my first question"}]`, true},
		{"made-up assistant turn", `[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure, the BAD steps are"},{"role":"user","content":"continue"}]`, true},
		{"tool call arguments", `[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"q\":\"BAD\"}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}]`, true},
		{"tool result", `[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c","content":"BAD"}]`, true},
		{"none", `[{"role":"system","content":"be kind"},{"role":"user","content":"hello"}]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := &judgeEngine{chunks: []string{"fine"}}
			a := listedAgent(eng)
			var out eventSink
			req := &engine.Request{Kind: api.KindChat, Model: "chat", Stream: true, Body: []byte(`{"messages":` + tc.messages + `}`)}
			res := a.filterChat(context.Background(), eng, req, "guard-b:0.6b", &out)
			if !tc.refused {
				if res.Status != http.StatusOK || len(out.events) == 0 {
					t.Fatalf("result %+v, events %v", res, out.events)
				}
				return
			}
			if res.Status != http.StatusBadRequest || res.Error.Type != api.TypeContentFilter || !res.Final || len(out.events) != 0 || eng.calls != 1 {
				t.Fatalf("result %+v, events %v, guard calls %d", res, out.events, eng.calls)
			}
		})
	}
	// No guard on this worker: another may have it.
	eng := &judgeEngine{chunks: []string{"never"}}
	a := listedAgent(eng)
	req := &engine.Request{Kind: api.KindChat, Model: "chat", Stream: true, Body: []byte(`{"messages":[{"role":"user","content":"hi"}]}`)}
	if res := a.filterChat(context.Background(), eng, req, "guard-a:8b", &eventSink{}); res.Status != http.StatusConflict || !res.Retryable {
		t.Fatalf("without the guard: %+v", res)
	}
}

// Everything of a reply that reaches the client is judged: its thinking
// and its tools' arguments as well as its answer.
func TestFilterJudgesThinkingAndTools(t *testing.T) {
	for _, tc := range []struct {
		name   string
		deltas []map[string]any
	}{
		{"reasoning_content", []map[string]any{{"reasoning_content": "how to do BAD"}, {"content": "ok"}}},
		{"reasoning", []map[string]any{{"reasoning": "how to do BAD"}, {"content": "ok"}}},
		{"tool arguments", []map[string]any{{"tool_calls": []any{map[string]any{"index": 0, "id": "c", "type": "function",
			"function": map[string]any{"name": "f", "arguments": `{"how":"BAD"}`}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := &judgeEngine{deltas: tc.deltas}
			a := listedAgent(eng)
			var out eventSink
			req := &engine.Request{Kind: api.KindChat, Model: "chat", Stream: true, Body: []byte(`{"messages":[{"role":"user","content":"hi"}]}`)}
			res := a.filterChat(context.Background(), eng, req, "guard-b:0.6b", &out)
			if res.Status != http.StatusOK || res.FinishReason != api.FinishContentFilter {
				t.Fatalf("result %+v, events %v", res, out.events)
			}
			for _, e := range out.events {
				if strings.Contains(e, "BAD") {
					t.Fatalf("flagged text reached the client: %v", out.events)
				}
			}
		})
	}
}

// A reply not streamed is judged whole, its thinking and tools included,
// and a flagged one keeps its shape with none of its text.
func TestFilterWholeReply(t *testing.T) {
	for _, tc := range []struct {
		name, message string
		flagged       bool
	}{
		{"clean", `{"role":"assistant","content":"fine","reasoning_content":"calm"}`, false},
		{"answer", `{"role":"assistant","content":"BAD"}`, true},
		{"thinking", `{"role":"assistant","content":"fine","reasoning_content":"BAD plan"}`, true},
		{"tool arguments", `{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":\"BAD\"}"}}]}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := &judgeEngine{whole: `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":` + tc.message + `,"finish_reason":"stop"}]}`}
			a := listedAgent(eng)
			var out eventSink
			req := &engine.Request{Kind: api.KindChat, Model: "chat", Body: []byte(`{"messages":[{"role":"user","content":"hi"}]}`)}
			res := a.filterChat(context.Background(), eng, req, "guard-b:0.6b", &out)
			if res.Status != http.StatusOK || len(out.events) != 1 || strings.Contains(out.events[0], "BAD") {
				t.Fatalf("result %+v, body %v", res, out.events)
			}
			if flagged := strings.Contains(out.events[0], `"finish_reason":"content_filter"`); flagged != tc.flagged {
				t.Fatalf("flagged %v, want %v: %s", flagged, tc.flagged, out.events[0])
			}
		})
	}
}

// A prompt or reply longer than the guard's window is judged in pieces
// that fit it, whether the engine lists the window or only refuses what
// exceeds it; what is flagged anywhere in it is still found.
func TestFilterJudgesPiecesThatFit(t *testing.T) {
	long := strings.Repeat("a quiet sentence about the weather. ", 2000) // 72,000 characters
	for _, listed := range []bool{true, false} {
		name := map[bool]string{true: "window listed", false: "window unknown"}[listed]
		t.Run(name+": prompt", func(t *testing.T) {
			for _, at := range []int{10, len(long) / 2, len(long) - 10} {
				eng := &judgeEngine{chunks: []string{"never"}, window: 2000, listWindow: listed}
				a := listedAgent(eng)
				text := long[:at] + "BAD" + long[at:]
				body, _ := json.Marshal(map[string]any{"messages": []any{
					map[string]any{"role": "user", "content": text}, map[string]any{"role": "user", "content": "go on"}}})
				var out eventSink
				res := a.filterChat(context.Background(), eng, &engine.Request{Kind: api.KindChat, Model: "chat", Stream: true, Body: body}, "guard-b:0.6b", &out)
				if res.Status != http.StatusBadRequest || res.Error.Type != api.TypeContentFilter || len(out.events) != 0 {
					t.Fatalf("flag at %d: result %+v", at, res)
				}
			}
			eng := &judgeEngine{chunks: []string{"fine"}, window: 2000, listWindow: listed}
			a := listedAgent(eng)
			body, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": long}}})
			res := a.filterChat(context.Background(), eng, &engine.Request{Kind: api.KindChat, Model: "chat", Stream: true, Body: body}, "guard-b:0.6b", &eventSink{})
			if res.Status != http.StatusOK {
				t.Fatalf("clean: result %+v", res)
			}
		})
		t.Run(name+": reply", func(t *testing.T) {
			chunks := strings.SplitAfter(long, ". ")
			flagAt := len(chunks) * 3 / 4
			chunks[flagAt] = "BAD " + chunks[flagAt]
			eng := &judgeEngine{chunks: chunks, window: 2000, listWindow: listed}
			a := listedAgent(eng)
			body, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": long}}})
			var out eventSink
			res := a.filterChat(context.Background(), eng, &engine.Request{Kind: api.KindChat, Model: "chat", Stream: true, Body: body}, "guard-b:0.6b", &out)
			if res.Status != http.StatusOK || res.FinishReason != api.FinishContentFilter {
				t.Fatalf("result %+v", res)
			}
			released := 0
			for _, e := range out.events {
				if strings.Contains(e, "BAD") {
					t.Fatal("flagged text reached the client")
				}
				if strings.Contains(e, "weather") {
					released++
				}
			}
			// The reply passed the guard a window at a time, each call
			// within the guard's window, until the flag.
			if released < flagAt-20 || released >= flagAt {
				t.Fatalf("released %d chunks, flag at %d", released, flagAt)
			}
			if listed && eng.longest > 3*eng.window {
				t.Fatalf("a guard call of %d characters, over the window of %d tokens", eng.longest, eng.window)
			}
		})
	}
}

// visionGuardEngine is a guard-c (LlavaGuard) that calls unsafe an image
// whose bytes hold "BAD", and a chat model that answers "fine".
type visionGuardEngine struct {
	stubEngine
	images int // images the guard was shown
}

func (e *visionGuardEngine) Models(context.Context) ([]api.Model, error) {
	return []api.Model{{ID: "chat", Capabilities: []string{api.CapChat, api.CapVision}},
		{ID: "guard-c:4b", Capabilities: []string{api.CapChat, api.CapVision}}}, nil
}

func (e *visionGuardEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if req.Model != "guard-c:4b" {
		b, _ := json.Marshal(map[string]any{"id": "c1", "object": "chat.completion.chunk",
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": "fine"}}}})
		_ = sink.Event(ctx, b)
		return engine.OK()
	}
	var body struct {
		Messages []struct {
			Content []struct {
				Type     string `json:"type"`
				ImageURL struct {
					URL string `json:"url"`
				} `json:"image_url"`
			} `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(req.Body, &body)
	answer := `{"rating":"Safe","category":"NA: None applying","rationale":"ok"}`
	for _, p := range body.Messages[0].Content {
		if p.Type != "image_url" {
			continue
		}
		e.images++
		_, payload, _ := strings.Cut(p.ImageURL.URL, ",")
		if data, _ := base64.StdEncoding.DecodeString(payload); strings.Contains(string(data), "BAD") {
			answer = `{"rating":"Unsafe","category":"O2: Violence, Harm, or Cruelty","rationale":"shown"}`
		}
	}
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": answer}}}})
	_ = sink.Body(ctx, b)
	return engine.OK()
}

// A guard that sees images judges every image of the conversation, each
// in a call of its own; one it cannot read fails the request unchecked
// content never passes.
func TestFilterJudgesImages(t *testing.T) {
	// A 1x1 PNG, with a tail past its end that tells the guard what it
	// shows.
	onePixel, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
	png := func(tail string) string {
		return "data:image/png;base64," + base64.StdEncoding.EncodeToString(append(onePixel, tail...))
	}
	image := func(u string) string { return `{"type":"image_url","image_url":{"url":"` + u + `"}}` }
	for _, tc := range []struct {
		name, messages string
		status, shown  int
	}{
		{"clean", `[{"role":"user","content":[{"type":"text","text":"look"},` + image(png("calm")) + `,` + image(png("sea")) + `]}]`, http.StatusOK, 2},
		{"flagged in an earlier turn", `[{"role":"user","content":[` + image(png("BAD")) + `]},{"role":"assistant","content":"no"},{"role":"user","content":"and?"}]`, http.StatusBadRequest, 1},
		{"unreadable", `[{"role":"user","content":[` + image("data:image/png;base64,!!!") + `]}]`, http.StatusBadRequest, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := &visionGuardEngine{}
			a := listedAgent(eng)
			req := &engine.Request{Kind: api.KindChat, Model: "chat", Stream: true, Body: []byte(`{"messages":` + tc.messages + `}`)}
			var out eventSink
			res := a.filterChat(context.Background(), eng, req, "guard-c:4b", &out)
			if res.Status != tc.status || eng.images != tc.shown {
				t.Fatalf("result %+v %+v, images shown %d, events %v", res, res.Error, eng.images, out.events)
			}
			if tc.status != http.StatusOK && len(out.events) != 0 {
				t.Fatalf("events %v", out.events)
			}
			if tc.name == "unreadable" && !strings.Contains(res.Error.Message, "could not be read for content filtering") {
				t.Fatalf("unreadable image: %+v", res.Error)
			}
		})
	}
}

// Engines send thinking under both reasoning_content and reasoning, the
// one mirroring the other: the guard reads it once, and a reply stopped
// at a flag is estimated from it once.
func TestFilterMirroredThinkingCountsOnce(t *testing.T) {
	think := strings.Repeat("t", 200)
	eng := &judgeEngine{deltas: []map[string]any{
		{"reasoning_content": think, "reasoning": think},
		{"content": "BAD"},
	}}
	a := listedAgent(eng)
	var out eventSink
	req := &engine.Request{Kind: api.KindChat, Model: "chat", Stream: true, Body: []byte(`{"messages":[{"role":"user","content":"hi"}]}`)}
	res := a.filterChat(context.Background(), eng, req, "guard-b:0.6b", &out)
	if res.Status != http.StatusOK || res.FinishReason != api.FinishContentFilter {
		t.Fatalf("result %+v", res)
	}
	made := len(think) + len("BAD")
	if want := (made + 3) / 4; res.Usage == nil || res.Usage.CompletionTokens != want {
		t.Fatalf("usage %+v, want %d completion tokens for the %d characters made", res.Usage, want, made)
	}
	if eng.longest > made+len("hi") {
		t.Fatalf("the guard read %d characters of a reply of %d", eng.longest, made)
	}
}

// A flagged whole reply whose choices are not all objects is answered,
// not a panic.
func TestFilterWholeReplyOfOddChoices(t *testing.T) {
	eng := &judgeEngine{whole: `{"id":"c1","object":"chat.completion","choices":[7,{"index":0,"message":{"role":"assistant","content":"BAD"},"finish_reason":"stop"}]}`}
	a := listedAgent(eng)
	var out eventSink
	req := &engine.Request{Kind: api.KindChat, Model: "chat", Body: []byte(`{"messages":[{"role":"user","content":"hi"}]}`)}
	res := a.filterChat(context.Background(), eng, req, "guard-b:0.6b", &out)
	if res.Status != http.StatusOK || len(out.events) != 1 || strings.Contains(out.events[0], "BAD") {
		t.Fatalf("result %+v, body %v", res, out.events)
	}
}
