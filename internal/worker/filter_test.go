package worker

import (
	"context"
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
	calls   int
}

func (e *judgeEngine) Models(context.Context) ([]api.Model, error) {
	return []api.Model{{ID: "chat", Capabilities: []string{api.CapChat}}, {ID: "guard-b:0.6b", Capabilities: []string{api.CapChat}}}, nil
}

func (e *judgeEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if req.Model == "guard-b:0.6b" {
		e.calls++
		var body struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		_ = json.Unmarshal(req.Body, &body)
		answer := "Safety: Safe\nCategories: None"
		if strings.Contains(body.Messages[len(body.Messages)-1].Content, "BAD") {
			answer = "Safety: Unsafe\nCategories: Violent"
		}
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": answer}}}})
		_ = sink.Body(ctx, b)
		return engine.OK()
	}
	for i, c := range e.chunks {
		index := 0
		if e.indexes != nil {
			index = e.indexes[i]
		}
		b, _ := json.Marshal(map[string]any{"id": "c1", "created": 7, "model": "chat", "object": "chat.completion.chunk",
			"choices": []any{map[string]any{"index": index, "delta": map[string]any{"content": c}}}})
		if err := sink.Event(ctx, b); err != nil {
			return engine.Cancelled()
		}
	}
	res := engine.OK()
	res.FinishReason = "stop"
	return res
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

// A flagged prompt is refused before the chat model runs.
func TestFilterPrompt(t *testing.T) {
	eng := &judgeEngine{chunks: []string{"never"}}
	a, _ := New(Config{Gateway: "http://gw", Token: "t", Name: "w", Engines: []engine.Engine{eng}})
	a.refreshModels(context.Background())
	var out eventSink
	req := &engine.Request{Kind: api.KindChat, Model: "chat", Stream: true,
		Body: []byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"something BAD"}]}]}`)}
	res := a.filterChat(context.Background(), eng, req, "guard-b:0.6b", &out)
	if res.Status != http.StatusBadRequest || res.Error.Type != api.TypeContentFilter || !res.Final || len(out.events) != 0 || eng.calls != 1 {
		t.Fatalf("result %+v, events %v, guard calls %d", res, out.events, eng.calls)
	}
	// No guard on this worker: another may have it.
	res = a.filterChat(context.Background(), eng, req, "guard-a:8b", &out)
	if res.Status != http.StatusConflict || !res.Retryable {
		t.Fatalf("without the guard: %+v", res)
	}
}
