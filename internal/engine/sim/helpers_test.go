package sim

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// fakeClock is a clock that only moves when the simulator sleeps, so that
// tests neither wait nor depend on the machine's speed.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

func (c *fakeClock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// testConfig is DefaultConfig on a fake clock: realistic numbers, no waiting.
func testConfig() (Config, *fakeClock) {
	clk := newFakeClock()
	cfg := DefaultConfig()
	cfg.Now, cfg.Sleep = clk.Now, clk.Sleep
	return cfg, clk
}

// recSink records what an engine sends. failAt makes Event fail on that
// event (1-based); 0 never fails.
type recSink struct {
	mu     sync.Mutex
	events [][]byte
	body   []byte
	bodies int
	failAt int
}

var errSinkGone = errors.New("sink gone")

func (s *recSink) Event(ctx context.Context, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.failAt > 0 && len(s.events)+1 >= s.failAt {
		return errSinkGone
	}
	s.events = append(s.events, append([]byte(nil), data...))
	return nil
}

func (s *recSink) Body(ctx context.Context, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	s.body = append([]byte(nil), data...)
	s.bodies++
	return nil
}

// chatBody builds a chat request body from a user message and extra fields.
func chatBody(t testing.TB, model, user string, extra map[string]any) []byte {
	t.Helper()
	body := map[string]any{
		"model":    model,
		"messages": []any{map[string]any{"role": "user", "content": user}},
	}
	for k, v := range extra {
		body[k] = v
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// serve runs one request against e.
func serve(t testing.TB, e *Engine, kind string, stream bool, body []byte) (*api.Result, *recSink) {
	t.Helper()
	sink := &recSink{}
	res := e.Serve(context.Background(), &engine.Request{Kind: kind, Stream: stream, Body: body}, sink)
	if res == nil {
		t.Fatal("Serve returned nil")
	}
	return res, sink
}

// completion is the decoded non-streaming reply.
type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role             string     `json:"role"`
			Content          *string    `json:"content"`
			ReasoningContent *string    `json:"reasoning_content"`
			Reasoning        *string    `json:"reasoning"`
			ToolCalls        []toolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens            int `json:"prompt_tokens"`
		CompletionTokens        int `json:"completion_tokens"`
		TotalTokens             int `json:"total_tokens"`
		CompletionTokensDetails *struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	} `json:"usage"`
	Timings map[string]float64 `json:"timings"`
}

type toolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func decodeCompletion(t testing.TB, data []byte) completion {
	t.Helper()
	var c completion
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("decode completion %s: %v", data, err)
	}
	if len(c.Choices) != 1 {
		t.Fatalf("want one choice, got %s", data)
	}
	return c
}

// chunkJSON is one decoded chat.completion.chunk.
type chunkJSON struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role             string     `json:"role"`
			Content          *string    `json:"content"`
			ReasoningContent *string    `json:"reasoning_content"`
			Reasoning        *string    `json:"reasoning"`
			ToolCalls        []toolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Timings map[string]float64 `json:"timings"`
	Error   *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

// streamed is a streamed reply put back together.
type streamed struct {
	content, reasoning, reasoningMirror string
	toolCalls                           []toolCall
	finish                              string
	chunks                              []chunkJSON
}

// assemble checks the chunks' shape and joins their deltas.
func assemble(t testing.TB, events [][]byte) (s streamed) {
	t.Helper()
	var content, reasoning, mirror strings.Builder
	defer func() {
		s.content, s.reasoning, s.reasoningMirror = content.String(), reasoning.String(), mirror.String()
	}()
	for i, ev := range events {
		var c chunkJSON
		if err := json.Unmarshal(ev, &c); err != nil {
			t.Fatalf("chunk %d %s: %v", i, ev, err)
		}
		s.chunks = append(s.chunks, c)
		if c.Object != "chat.completion.chunk" || !strings.HasPrefix(c.ID, "chatcmpl-") {
			t.Fatalf("chunk %d has wrong head: %s", i, ev)
		}
		if len(c.Choices) == 0 {
			continue // usage chunk
		}
		ch := c.Choices[0]
		if (i == 0) != (ch.Delta.Role == "assistant") {
			t.Fatalf("chunk %d: role %q", i, ch.Delta.Role)
		}
		if ch.Delta.Content != nil {
			content.WriteString(*ch.Delta.Content)
		}
		if ch.Delta.ReasoningContent != nil {
			reasoning.WriteString(*ch.Delta.ReasoningContent)
		}
		if ch.Delta.Reasoning != nil {
			mirror.WriteString(*ch.Delta.Reasoning)
		}
		for _, tc := range ch.Delta.ToolCalls {
			if tc.Index != 0 {
				t.Fatalf("chunk %d: tool call index %d", i, tc.Index)
			}
			if tc.ID != "" {
				s.toolCalls = append(s.toolCalls, tc)
				continue
			}
			if len(s.toolCalls) == 0 {
				t.Fatalf("chunk %d: arguments before the tool call opened", i)
			}
			s.toolCalls[len(s.toolCalls)-1].Function.Arguments += tc.Function.Arguments
		}
		if ch.FinishReason != nil {
			if s.finish != "" {
				t.Fatalf("chunk %d: second finish_reason", i)
			}
			s.finish = *ch.FinishReason
		}
	}
	return s
}

func noticeCode(r *api.Result) string {
	if r.Notice == nil {
		return ""
	}
	return r.Notice.Code
}
