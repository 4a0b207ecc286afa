package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/engine"
)

// fixedConfig is a fast config whose clock never moves, so that even the
// created timestamps of two runs match.
func fixedConfig() Config {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return Config{Now: func() time.Time { return at }, Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
		ID: func() string { return "chatcmpl-fixed" }}
}

// Each request's completion has an id of its own, the same prompt's too.
func TestCompletionIDsAreFresh(t *testing.T) {
	e := New(Config{Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	body := chatBody(t, "sim-chat", "hi", nil)
	seen := map[string]bool{}
	for range 3 {
		_, s := serve(t, e, api.KindChat, false, body)
		var c struct{ ID string }
		if err := json.Unmarshal(s.body, &c); err != nil || !strings.HasPrefix(c.ID, "chatcmpl-") || seen[c.ID] {
			t.Fatalf("completion id %q after %v (%v)", c.ID, seen, err)
		}
		seen[c.ID] = true
	}
}

func TestDeterminism(t *testing.T) {
	body := chatBody(t, "sim-reasoner", "Tell me a story about a lighthouse.", map[string]any{"seed": 7})
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			// Two engines, so that nothing carried between requests can
			// make them agree by accident.
			_, a := serve(t, New(fixedConfig()), api.KindChat, stream, body)
			_, b := serve(t, New(fixedConfig()), api.KindChat, stream, body)
			if !bytes.Equal(a.body, b.body) || len(a.events) != len(b.events) {
				t.Fatalf("replies differ:\n%s\n%s", a.body, b.body)
			}
			for i := range a.events {
				if !bytes.Equal(a.events[i], b.events[i]) {
					t.Fatalf("chunk %d differs:\n%s\n%s", i, a.events[i], b.events[i])
				}
			}
		})
	}

	e := New(fixedConfig())
	text := func(extra map[string]any) string {
		_, s := serve(t, e, api.KindChat, false, chatBody(t, "sim-chat", "Tell me a story.", extra))
		return *decodeCompletion(t, s.body).Choices[0].Message.Content
	}
	base := text(map[string]any{"seed": 1})
	if base == text(map[string]any{"seed": 2}) {
		t.Fatal("a different seed gave the same text")
	}
	if base == text(nil) {
		t.Fatal("no seed gave the same text as seed 1")
	}
	if base != text(map[string]any{"seed": 1, "temperature": 0.2}) {
		t.Fatal("sampling switches the simulator ignores changed the text")
	}
	// A whole number written with a fraction is that number, as engines
	// read an integer field.
	if base != text(map[string]any{"seed": json.RawMessage("1.0"), "reasoning": json.RawMessage(`{"max_tokens":100.0}`),
		"max_tokens": json.RawMessage("4e2")}) {
		t.Fatal("seed 1.0 is not seed 1")
	}

	// Streaming and non-streaming replies to one request agree.
	body = chatBody(t, "sim-reasoner", "Explain tides.", nil)
	res, s := serve(t, e, api.KindChat, false, body)
	_, st := serve(t, e, api.KindChat, true, body)
	c, got := decodeCompletion(t, s.body), assemble(t, st.events)
	if got.content != *c.Choices[0].Message.Content || got.reasoning != *c.Choices[0].Message.ReasoningContent || got.finish != c.Choices[0].FinishReason {
		t.Fatalf("streamed %+v, non-streamed %s", got, s.body)
	}
	if len(st.events) != res.Usage.CompletionTokens {
		t.Fatalf("%d chunks for %d tokens", len(st.events), res.Usage.CompletionTokens)
	}
	if c.ID != got.chunks[0].ID || !strings.HasPrefix(c.ID, "chatcmpl-") {
		t.Fatalf("ids %q and %q", c.ID, got.chunks[0].ID)
	}
}

// A request for several choices (n) gets that many replies, each with its
// index: the first is the reply a request for one gets, the others differ
// from it; usage counts the prompt once and every choice's tokens. A
// stream sends the chunks of every choice in turn, each choice's last
// with its finish reason.
func TestChoices(t *testing.T) {
	e := New(fixedConfig())
	one := chatBody(t, "sim-reasoner", "Tell me a story. sim: tokens=6", nil)
	three := chatBody(t, "sim-reasoner", "Tell me a story. sim: tokens=6", map[string]any{"n": 3})
	res1, s1 := serve(t, e, api.KindChat, false, one)
	res3, s3 := serve(t, e, api.KindChat, false, three)
	single := decodeCompletion(t, s1.body)
	var c completion
	if err := json.Unmarshal(s3.body, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 3 {
		t.Fatalf("%d choices, want 3: %s", len(c.Choices), s3.body)
	}
	contents := map[string]bool{}
	for i, ch := range c.Choices {
		if ch.Index != i || ch.Message.Content == nil || ch.Message.ReasoningContent == nil || ch.FinishReason != "stop" {
			t.Fatalf("choice %d: %+v", i, ch)
		}
		contents[*ch.Message.Content] = true
	}
	if *c.Choices[0].Message.Content != *single.Choices[0].Message.Content {
		t.Errorf("the first choice %q is not the reply to a request for one, %q", *c.Choices[0].Message.Content, *single.Choices[0].Message.Content)
	}
	if len(contents) != 3 {
		t.Errorf("choices alike: %v", contents)
	}
	if c.Usage.PromptTokens != single.Usage.PromptTokens || c.Usage.CompletionTokens <= 2*single.Usage.CompletionTokens ||
		c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens ||
		*res3.Usage.ReasoningTokens <= 2**res1.Usage.ReasoningTokens || res3.Usage.CompletionTokens != c.Usage.CompletionTokens {
		t.Errorf("usage %+v (result %+v), one choice's %+v", c.Usage, res3.Usage, single.Usage)
	}

	_, st := serve(t, e, api.KindChat, true, three)
	texts, finishes := make([]strings.Builder, 3), make([]int, 3)
	for i, ev := range st.events {
		var ch chunkJSON
		if err := json.Unmarshal(ev, &ch); err != nil || len(ch.Choices) != 1 {
			t.Fatalf("chunk %d: %s", i, ev)
		}
		x := ch.Choices[0]
		if x.Index < 0 || x.Index > 2 || i < 3 && x.Index != i {
			t.Fatalf("chunk %d is of choice %d", i, x.Index)
		}
		if x.Delta.Content != nil {
			texts[x.Index].WriteString(*x.Delta.Content)
		}
		if x.FinishReason != nil {
			finishes[x.Index]++
		}
	}
	if len(st.events) != c.Usage.CompletionTokens {
		t.Errorf("%d chunks for %d tokens", len(st.events), c.Usage.CompletionTokens)
	}
	for i := range 3 {
		if texts[i].String() != *c.Choices[i].Message.Content || finishes[i] != 1 {
			t.Errorf("streamed choice %d: %q with %d finish reasons, want %q with one", i, texts[i].String(), finishes[i], *c.Choices[i].Message.Content)
		}
	}
}

func TestTextShape(t *testing.T) {
	e := New(fixedConfig())
	for i := range 20 {
		res, s := serve(t, e, api.KindChat, true, chatBody(t, "sim-chat", fmt.Sprintf("prompt %d", i), nil))
		n := res.Usage.CompletionTokens
		if n < 16 || n > 64 {
			t.Fatalf("default length %d outside 16..64", n)
		}
		got := assemble(t, s.events)
		if strings.HasPrefix(got.content, " ") || !strings.HasSuffix(got.content, ".") {
			t.Fatalf("content %q", got.content)
		}
		for j, ch := range got.chunks[1:] {
			if !strings.HasPrefix(*ch.Choices[0].Delta.Content, " ") {
				t.Fatalf("token %d has no leading space: %q", j+1, *ch.Choices[0].Delta.Content)
			}
		}
		if want := (len(fmt.Sprintf("prompt %d", i)) + 3) / 4; res.Usage.PromptTokens != want { // about 4 characters a token
			t.Fatalf("prompt tokens %d", res.Usage.PromptTokens)
		}
	}
}

func TestMaxTokens(t *testing.T) {
	e := New(fixedConfig())
	_, full := serve(t, e, api.KindChat, false, chatBody(t, "sim-chat", "Describe a river.", nil))
	fullText := *decodeCompletion(t, full.body).Choices[0].Message.Content

	tests := []struct {
		name  string
		extra map[string]any
		want  int
	}{
		{"max_tokens", map[string]any{"max_tokens": 5}, 5},
		{"max_completion_tokens", map[string]any{"max_completion_tokens": 3}, 3},
		{"max_completion_tokens wins", map[string]any{"max_tokens": 10, "max_completion_tokens": 4}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, s := serve(t, e, api.KindChat, false, chatBody(t, "sim-chat", "Describe a river.", tt.extra))
			c := decodeCompletion(t, s.body)
			if res.Usage.CompletionTokens != tt.want || c.Usage.CompletionTokens != tt.want {
				t.Fatalf("completion tokens %d/%d, want %d", res.Usage.CompletionTokens, c.Usage.CompletionTokens, tt.want)
			}
			if res.FinishReason != "length" || c.Choices[0].FinishReason != "length" || res.Notice != nil {
				t.Fatalf("finish %q notice %+v", res.FinishReason, res.Notice)
			}
			if content := *c.Choices[0].Message.Content; !strings.HasPrefix(fullText, content) || content == "" {
				t.Fatalf("capped reply %q is not a prefix of %q", content, fullText)
			}
			if c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens {
				t.Fatalf("usage %+v", c.Usage)
			}
		})
	}
}

func TestNotices(t *testing.T) {
	cfg := fixedConfig()
	cfg.Models = append(DefaultModels(), ModelSpec{Model: api.Model{
		ID: "sim-long", Capabilities: []string{api.CapChat}, ContextWindow: 131072,
	}}, ModelSpec{Model: api.Model{
		ID: "sim-thinker", Capabilities: []string{api.CapChat, api.CapReasoning}, ContextWindow: 65536, DefaultThinking: ptr(true),
	}})
	e := New(cfg)
	longPrompt := strings.Repeat("word ", 800) // 4000 characters: 1000 tokens

	tests := []struct {
		name       string
		model      string
		user       string
		extra      map[string]any
		code       string
		finish     string
		completion int    // expected completion tokens; -1 = don't check
		reasoning  int    // expected reasoning tokens; -1 = don't check
		content    string // "empty", "some", "json", "notjson" or ""
		msgHas     string
	}{
		{"truncated during reasoning", "sim-reasoner", "Think hard.", map[string]any{"max_tokens": 10},
			chat.NoticeTruncatedDuringReasoning, "length", 10, 10, "empty", "10-token"},
		{"reasoning budget reached", "sim-reasoner", "Think.", map[string]any{"reasoning": map[string]any{"max_tokens": 8}},
			chat.NoticeReasoningBudgetReached, "stop", -1, 8, "some", "8-token"},
		{"default thinking budget", "sim-reasoner", "Think.\nsim: reasoning=9000 tokens=5", nil,
			chat.NoticeReasoningBudgetReached, "stop", 8192 + 5, 8192, "some", "8192-token"},
		{"truncated at reasoning budget", "sim-small", "Think.", map[string]any{"enable_thinking": true, "reasoning": map[string]any{"max_tokens": 8}},
			chat.NoticeTruncatedAtReasoningBudget, "length", 8, 8, "empty", "8-token"},
		{"no default budget without thinking_budget", "sim-thinker", "Think.\nsim: reasoning=9000 tokens=2", nil,
			"", "stop", 9002, 9000, "some", ""},
		{"truncated at default max tokens", "sim-long", "Go on.\nsim: tokens=40000", nil,
			chat.NoticeTruncatedAtDefaultMaxTokens, "length", 32768, 0, "some", "32768-token"},
		{"default cap counts thinking", "sim-thinker", "Go on.\nsim: reasoning=20000 tokens=20000", nil,
			chat.NoticeTruncatedAtDefaultMaxTokens, "length", 32768, 20000, "some", "default output limit"},
		{"truncated during structured output", "sim-chat", "JSON please.", map[string]any{"max_tokens": 5, "response_format": map[string]any{"type": "json_object"}},
			chat.NoticeTruncatedDuringStructuredOutput, "length", 5, 0, "notjson", "JSON"},
		{"context window exhausted", "sim-small", longPrompt + "\nsim: tokens=5000", nil,
			chat.NoticeContextWindowExhausted, "length", -1, 0, "some", "4096-token context window"},
		{"context window exhausted with max_tokens", "sim-small", longPrompt + "\nsim: tokens=5000", map[string]any{"max_tokens": 10000},
			chat.NoticeContextWindowExhausted, "length", -1, 0, "some", "prompt"},
		{"context window beats default cap", "sim-reasoner", "Go.\nsim: tokens=40000", nil,
			chat.NoticeContextWindowExhausted, "length", -1, 24, "some", "32768-token context window"},
		{"structured output not json", "sim-chat", "JSON please.\nsim: json=broken", nil,
			chat.NoticeStructuredOutputNotJSON, "stop", -1, 0, "notjson", "not valid JSON"},
		{"strict schema not enforced", "sim-chat", "JSON please.", map[string]any{"response_format": map[string]any{
			"type": "json_schema", "json_schema": map[string]any{"name": "x", "strict": true, "schema": map[string]any{
				"type": "object", "properties": map[string]any{"title": map[string]any{"type": "string"}}}}}},
			chat.NoticeStrictSchemaNotEnforced, "stop", -1, 0, "json", "strict"},
		{"explicit cap has no notice", "sim-chat", "Hi.", map[string]any{"max_tokens": 2},
			"", "length", 2, 0, "some", ""},
		{"natural finish has no notice", "sim-chat", "Hi.\nsim: tokens=7", nil,
			"", "stop", 7, 0, "some", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := chatBody(t, tt.model, tt.user, tt.extra)
			res, s := serve(t, e, api.KindChat, false, body)
			if res.Status != http.StatusOK {
				t.Fatalf("status %d: %+v", res.Status, res.Error)
			}
			if got := noticeCode(res); got != tt.code {
				t.Fatalf("notice %q (%+v), want %q", got, res.Notice, tt.code)
			}
			if res.Notice != nil && !strings.Contains(res.Notice.Message, tt.msgHas) {
				t.Fatalf("notice message %q lacks %q", res.Notice.Message, tt.msgHas)
			}
			c := decodeCompletion(t, s.body)
			if res.FinishReason != tt.finish || c.Choices[0].FinishReason != tt.finish {
				t.Fatalf("finish %q/%q, want %q", res.FinishReason, c.Choices[0].FinishReason, tt.finish)
			}
			if tt.completion >= 0 && res.Usage.CompletionTokens != tt.completion {
				t.Fatalf("completion tokens %d, want %d", res.Usage.CompletionTokens, tt.completion)
			}
			gotReasoning := 0
			if res.Usage.ReasoningTokens != nil {
				gotReasoning = *res.Usage.ReasoningTokens
			}
			if tt.reasoning >= 0 && gotReasoning != tt.reasoning {
				t.Fatalf("reasoning tokens %d, want %d", gotReasoning, tt.reasoning)
			}
			content := ""
			if p := c.Choices[0].Message.Content; p != nil {
				content = *p
			}
			switch tt.content {
			case "empty":
				if c.Choices[0].Message.Content == nil || content != "" {
					t.Fatalf("content %q, want empty", content)
				}
			case "some":
				if content == "" {
					t.Fatal("no content")
				}
			case "json":
				if !json.Valid([]byte(content)) {
					t.Fatalf("content is not JSON: %q", content)
				}
			case "notjson":
				if content == "" || json.Valid([]byte(content)) {
					t.Fatalf("content %q, want non-JSON text", content)
				}
			}
			if tt.code == chat.NoticeContextWindowExhausted {
				window := 4096
				if tt.model == "sim-reasoner" {
					window = 32768
				}
				if total := res.Usage.PromptTokens + res.Usage.CompletionTokens; total != window {
					t.Fatalf("prompt+reply = %d, want the %d window", total, window)
				}
				if !strings.Contains(res.Notice.Message, fmt.Sprint(res.Usage.PromptTokens)) ||
					!strings.Contains(res.Notice.Message, fmt.Sprint(res.Usage.CompletionTokens)) {
					t.Fatalf("message %q lacks the token counts", res.Notice.Message)
				}
			}
			// Streaming reports the same notice and finish. (Only the last
			// chunk is decoded: some of these replies are 32768 chunks.)
			sres, st := serve(t, e, api.KindChat, true, body)
			var last chunkJSON
			if err := json.Unmarshal(st.events[len(st.events)-1], &last); err != nil || last.Choices[0].FinishReason == nil {
				t.Fatalf("last chunk %s: %v", st.events[len(st.events)-1], err)
			}
			if noticeCode(sres) != tt.code || *last.Choices[0].FinishReason != tt.finish || len(st.events) != max(1, res.Usage.CompletionTokens) {
				t.Fatalf("streamed notice %q finish %q in %d chunks", noticeCode(sres), *last.Choices[0].FinishReason, len(st.events))
			}
		})
	}
}

func TestContextLengthExceeded(t *testing.T) {
	e := New(fixedConfig())
	res, s := serve(t, e, api.KindChat, true, chatBody(t, "sim-small", strings.Repeat("abcd", 4097), nil))
	if res.Status != http.StatusBadRequest || res.Error.Type != "context_length_exceeded" || res.Retryable {
		t.Fatalf("got %d %+v", res.Status, res.Error)
	}
	if !strings.Contains(res.Error.Message, "4096") || !strings.Contains(res.Error.Message, "4097") {
		t.Fatalf("message %q", res.Error.Message)
	}
	if len(s.events) != 0 {
		t.Fatal("output before a context failure")
	}
}

func TestReasoningControls(t *testing.T) {
	e := New(fixedConfig())
	tests := []struct {
		name  string
		model string
		user  string
		extra map[string]any
		want  int
	}{
		{"reasoner thinks by default", "sim-reasoner", "q", nil, 24},
		{"effort none", "sim-reasoner", "q", map[string]any{"reasoning_effort": "none"}, 0},
		{"effort minimal", "sim-reasoner", "q", map[string]any{"reasoning_effort": "minimal"}, 0},
		{"effort low", "sim-reasoner", "q", map[string]any{"reasoning_effort": "low"}, 12},
		{"effort medium", "sim-reasoner", "q", map[string]any{"reasoning_effort": "medium"}, 24},
		{"effort high", "sim-reasoner", "q", map[string]any{"reasoning_effort": "high"}, 48},
		{"reasoning.effort", "sim-reasoner", "q", map[string]any{"reasoning": map[string]any{"effort": "low"}}, 12},
		{"enable_thinking false", "sim-reasoner", "q", map[string]any{"enable_thinking": false}, 0},
		{"chat_template_kwargs", "sim-reasoner", "q", map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}}, 0},
		{"budget 0 turns thinking off", "sim-reasoner", "q", map[string]any{"reasoning": map[string]any{"max_tokens": 0}}, 0},
		{"budget above the length", "sim-reasoner", "q", map[string]any{"reasoning": map[string]any{"max_tokens": 100}}, 24},
		{"off beats on", "sim-reasoner", "q", map[string]any{"enable_thinking": true, "reasoning_effort": "none"}, 0},
		{"small does not think by default", "sim-small", "q", nil, 0},
		{"small thinks when asked", "sim-small", "q", map[string]any{"enable_thinking": true}, 24},
		{"small at high effort", "sim-small", "q", map[string]any{"reasoning_effort": "high"}, 48},
		{"directive forces thinking", "sim-small", "q\nsim: reasoning=5", nil, 5},
		{"directive respects off", "sim-small", "q\nsim: reasoning=5", map[string]any{"enable_thinking": false}, 0},
		{"directive sets the length", "sim-reasoner", "q\nsim: reasoning=30", map[string]any{"reasoning_effort": "low"}, 30},
		{"chat models do not think", "sim-chat", "q\nsim: reasoning=5", map[string]any{"reasoning_effort": "high"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, s := serve(t, e, api.KindChat, false, chatBody(t, tt.model, tt.user, tt.extra))
			got := 0
			if res.Usage.ReasoningTokens != nil {
				got = *res.Usage.ReasoningTokens
				if got == 0 {
					t.Fatal("reasoning_tokens set to 0")
				}
			}
			if got != tt.want {
				t.Fatalf("reasoning tokens %d, want %d", got, tt.want)
			}
			c := decodeCompletion(t, s.body)
			details := c.Usage.CompletionTokensDetails
			if (details != nil) != (tt.want > 0) || (details != nil && details.ReasoningTokens != tt.want) {
				t.Fatalf("completion_tokens_details %+v", details)
			}
			if (c.Choices[0].Message.ReasoningContent != nil) != (tt.want > 0) {
				t.Fatalf("reasoning_content present = %v", c.Choices[0].Message.ReasoningContent != nil)
			}
		})
	}
}

func TestReasoningMirrored(t *testing.T) {
	e := New(fixedConfig())
	body := chatBody(t, "sim-reasoner", "Why is the sky blue?", nil)
	_, s := serve(t, e, api.KindChat, false, body)
	msg := decodeCompletion(t, s.body).Choices[0].Message
	if msg.ReasoningContent == nil || msg.Reasoning == nil || *msg.ReasoningContent == "" || *msg.ReasoningContent != *msg.Reasoning {
		t.Fatalf("message reasoning %v / %v", msg.ReasoningContent, msg.Reasoning)
	}
	_, st := serve(t, e, api.KindChat, true, body)
	got := assemble(t, st.events)
	if got.reasoning != *msg.ReasoningContent || got.reasoningMirror != got.reasoning {
		t.Fatalf("streamed reasoning %q / %q", got.reasoning, got.reasoningMirror)
	}
	for i, ch := range got.chunks {
		d := ch.Choices[0].Delta
		if (d.ReasoningContent == nil) != (d.Reasoning == nil) {
			t.Fatalf("chunk %d mirrors only one field", i)
		}
		if d.ReasoningContent != nil && d.Content != nil {
			t.Fatalf("chunk %d carries reasoning and content", i)
		}
	}
}

var weatherTools = []any{
	map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{
			"city": map[string]any{"type": "string"},
			"unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}},
			"days": map[string]any{"type": "integer"},
		}, "required": []string{"city"}},
	}},
	map[string]any{"type": "function", "function": map[string]any{"name": "search"}},
}

var describedTools = []any{
	map[string]any{"type": "function", "function": map[string]any{"name": "search", "description": "Searches the web"}},
	map[string]any{"type": "function", "function": map[string]any{
		"name": "lookup_city", "description": "Current temperature and how warm it feels in a city",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	}},
}

// afterToolResult is a conversation whose last turn is a tool's result.
func afterToolResult(question string) []any {
	return []any{
		map[string]any{"role": "user", "content": question},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Oslo"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": "call_1", "content": `{"temp_c":3}`},
	}
}

func TestToolCalls(t *testing.T) {
	e := New(fixedConfig())
	tests := []struct {
		name  string
		model string
		user  string
		extra map[string]any
		want  string // tool name; "" = no call
		keys  []string
	}{
		{"required calls the first tool", "sim-chat", "Weather in Oslo?", map[string]any{"tools": weatherTools, "tool_choice": "required"}, "get_weather", []string{"city", "days", "unit"}},
		{"named tool", "sim-chat", "Find it.", map[string]any{"tools": weatherTools, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "search"}}}, "search", []string{"answer", "n"}},
		{"directive", "sim-chat", "Find it.\nsim: tool=search", map[string]any{"tools": weatherTools}, "search", []string{"answer", "n"}},
		{"directive names an unknown tool", "sim-chat", "x\nsim: tool=launch", map[string]any{"tools": weatherTools, "tool_choice": "auto"}, "launch", []string{"answer", "n"}},
		{"reasoner thinks then calls", "sim-reasoner", "Weather?", map[string]any{"tools": weatherTools, "tool_choice": "required"}, "get_weather", []string{"city", "days", "unit"}},
		{"auto answers in text", "sim-chat", "Hello.", map[string]any{"tools": weatherTools}, "", nil},
		{"auto calls the tool the question is about", "sim-chat", "What is the weather in Oslo today?", map[string]any{"tools": weatherTools}, "get_weather", []string{"city", "days", "unit"}},
		{"auto matches a description", "sim-chat", "How warm is it in Lima?", map[string]any{"tools": describedTools}, "lookup_city", []string{"city"}},
		{"auto answers the tool's result in text", "sim-chat", "", map[string]any{"tools": weatherTools, "messages": afterToolResult("What is the weather in Oslo today?")}, "", nil},
		{"the directive too, once the result is in", "sim-chat", "", map[string]any{"tools": weatherTools, "messages": afterToolResult("Oslo?\nsim: tool=get_weather")}, "", nil},
		{"required calls again after a result", "sim-chat", "", map[string]any{"tools": weatherTools, "tool_choice": "required", "messages": afterToolResult("Oslo?")}, "get_weather", []string{"city", "days", "unit"}},
		{"none beats the directive", "sim-chat", "x\nsim: tool=search", map[string]any{"tools": weatherTools, "tool_choice": "none"}, "", nil},
		{"no tools no call", "sim-chat", "x\nsim: tool=search", nil, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := chatBody(t, tt.model, tt.user, tt.extra)
			res, s := serve(t, e, api.KindChat, false, body)
			c := decodeCompletion(t, s.body)
			msg := c.Choices[0].Message
			if tt.want == "" {
				if len(msg.ToolCalls) != 0 || res.FinishReason != "stop" || msg.Content == nil || *msg.Content == "" {
					t.Fatalf("unexpected tool call: %s", s.body)
				}
				return
			}
			if res.FinishReason != "tool_calls" || c.Choices[0].FinishReason != "tool_calls" || msg.Content != nil || len(msg.ToolCalls) != 1 {
				t.Fatalf("reply %s", s.body)
			}
			tc := msg.ToolCalls[0]
			if tc.Function.Name != tt.want || tc.Type != "function" || !strings.HasPrefix(tc.ID, "call_") || len(tc.ID) != 29 {
				t.Fatalf("tool call %+v", tc)
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil {
				t.Fatalf("arguments %q: %v", tc.Function.Arguments, err)
			}
			if keys := slices.Sorted(maps.Keys(args)); !slices.Equal(keys, tt.keys) {
				t.Fatalf("argument keys %v, want %v", keys, tt.keys)
			}
			if u, ok := args["unit"]; ok && u != "celsius" && u != "fahrenheit" {
				t.Fatalf("unit %v is not in the enum", u)
			}
			if d, ok := args["days"].(float64); ok && d != float64(int(d)) {
				t.Fatalf("days %v is not an integer", d)
			}
			if tt.model == "sim-reasoner" && (msg.ReasoningContent == nil || *msg.ReasoningContent == "") {
				t.Fatal("reasoner called without thinking")
			}

			_, st := serve(t, e, api.KindChat, true, body)
			got := assemble(t, st.events)
			if got.finish != "tool_calls" || len(got.toolCalls) != 1 || got.content != "" {
				t.Fatalf("streamed %+v", got)
			}
			g := got.toolCalls[0]
			if g.ID != tc.ID || g.Function.Name != tc.Function.Name || g.Function.Arguments != tc.Function.Arguments || g.Type != "function" {
				t.Fatalf("streamed call %+v, want %+v", g, tc)
			}
			argDeltas := 0
			for _, ch := range got.chunks {
				for _, d := range ch.Choices[0].Delta.ToolCalls {
					if d.ID == "" {
						argDeltas++
					}
				}
			}
			if argDeltas < 2 {
				t.Fatalf("arguments came in %d deltas, want them split", argDeltas)
			}
		})
	}
}

func TestJSONOutput(t *testing.T) {
	e := New(fixedConfig())
	schema := map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "review", "schema": map[string]any{
		"type": "object",
		"properties": map[string]any{
			"title":  map[string]any{"type": "string"},
			"score":  map[string]any{"type": "number"},
			"tags":   map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			"ok":     map[string]any{"type": "boolean"},
			"author": map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}},
			"grade":  map[string]any{"enum": []any{"A", "B", 3}},
		},
	}}}
	tests := []struct {
		name  string
		user  string
		extra map[string]any
		keys  []string
	}{
		{"json_object", "Give JSON.", map[string]any{"response_format": map[string]any{"type": "json_object"}}, []string{"answer", "n"}},
		{"json_schema", "Review it.", map[string]any{"response_format": schema}, []string{"author", "grade", "ok", "score", "tags", "title"}},
		{"directive", "Give JSON.\nsim: json=1", nil, []string{"answer", "n"}},
		{"long", "Give JSON.\nsim: json=1 tokens=300", nil, []string{"answer", "n"}},
		{"tiny", "Give JSON.\nsim: json=1 tokens=0", nil, []string{"answer", "n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := chatBody(t, "sim-chat", tt.user, tt.extra)
			res, s := serve(t, e, api.KindChat, false, body)
			content := *decodeCompletion(t, s.body).Choices[0].Message.Content
			var obj map[string]any
			if err := json.Unmarshal([]byte(content), &obj); err != nil {
				t.Fatalf("content %q: %v", content, err)
			}
			keys := slices.Sorted(maps.Keys(obj))
			if !slices.Equal(keys, tt.keys) || res.Notice != nil || res.FinishReason != "stop" {
				t.Fatalf("keys %v notice %+v finish %q", keys, res.Notice, res.FinishReason)
			}
			_, st := serve(t, e, api.KindChat, true, body)
			got := assemble(t, st.events)
			if got.content != content || len(st.events) < 3 {
				t.Fatalf("streamed %q in %d chunks, want %q", got.content, len(st.events), content)
			}
		})
	}
}

func TestStopSequences(t *testing.T) {
	e := New(fixedConfig())
	user := "Write a paragraph.\nsim: tokens=40"
	_, full := serve(t, e, api.KindChat, false, chatBody(t, "sim-chat", user, nil))
	text := *decodeCompletion(t, full.body).Choices[0].Message.Content
	stop := " " + strings.Fields(text)[10]
	want := text[:strings.Index(text, stop)]

	for _, tt := range []struct {
		name string
		stop any
	}{
		{"string", stop},
		{"array", []string{"never appears", stop}},
		{"mid-token", stop[:3]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := chatBody(t, "sim-chat", user, map[string]any{"stop": tt.stop})
			res, s := serve(t, e, api.KindChat, false, body)
			got := *decodeCompletion(t, s.body).Choices[0].Message.Content
			w := want
			if tt.name == "mid-token" {
				w = text[:strings.Index(text, stop[:3])]
			}
			if got != w || res.FinishReason != "stop" || res.Usage.CompletionTokens >= 40 {
				t.Fatalf("content %q finish %q tokens %d, want %q", got, res.FinishReason, res.Usage.CompletionTokens, w)
			}
			_, st := serve(t, e, api.KindChat, true, body)
			if a := assemble(t, st.events); a.content != got || a.finish != "stop" {
				t.Fatalf("streamed %q %q", a.content, a.finish)
			}
			// The sequence matched is the choice's stop_reason, as vLLM
			// reports it, streamed and not.
			seq := stop
			if tt.name == "mid-token" {
				seq = stop[:3]
			}
			matched, _ := json.Marshal(map[string]string{"stop_reason": seq})
			field := strings.Trim(string(matched), "{}")
			if !strings.Contains(string(s.body), field) || !strings.Contains(string(st.events[len(st.events)-1]), field) {
				t.Fatalf("no %s in %s / %s", field, s.body, st.events[len(st.events)-1])
			}
		})
	}
	res, _ := serve(t, e, api.KindChat, false, chatBody(t, "sim-chat", user, map[string]any{"stop": 5}))
	if res.Status != http.StatusBadRequest {
		t.Fatalf("bad stop accepted: %d", res.Status)
	}
}

func TestFailDirectives(t *testing.T) {
	e := New(fixedConfig())
	tests := []struct {
		code      int
		typ       string
		retryable bool
		msgHas    string
	}{
		{500, api.TypeServer, true, "internal server error"},
		{502, api.TypeUpstream, true, "Bad Gateway"},
		{503, api.TypeServiceUnavailable, true, "unavailable"},
		{504, api.TypeTimeout, true, "Timeout"},
		{507, api.TypeInsufficientMemory, false, "CUDA out of memory"},
		{501, api.TypeNotSupported, false, "not supported"},
		{400, api.TypeInvalidRequest, false, "invalid request"},
		{429, api.TypeRateLimit, false, "Too Many Requests"},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d stream=%v", tt.code, stream), func(t *testing.T) {
				res, s := serve(t, e, api.KindChat, stream, chatBody(t, "sim-chat", fmt.Sprintf("hi\nsim: fail=%d", tt.code), nil))
				if res.Status != tt.code || res.Error == nil || res.Error.Type != tt.typ || res.Retryable != tt.retryable ||
					!strings.Contains(res.Error.Message, tt.msgHas) {
					t.Fatalf("got %d %+v retryable=%v", res.Status, res.Error, res.Retryable)
				}
				if len(s.events) != 0 || s.bodies != 0 {
					t.Fatal("output before a scripted failure")
				}
				// The HTTP face sends the same failure as an OpenAI error
				// body; the openai adapter must read it back the same.
				body, _ := json.Marshal(errorBody(res))
				back := engine.ErrorResult(tt.code, body)
				if back.Status != res.Status || back.Error.Type != res.Error.Type || back.Retryable != res.Retryable {
					t.Fatalf("ErrorResult read back %d %+v retryable=%v", back.Status, back.Error, back.Retryable)
				}
			})
		}
	}

	t.Run("mid-stream", func(t *testing.T) {
		res, s := serve(t, e, api.KindChat, true, chatBody(t, "sim-chat", "hi\nsim: fail=500 after=2 tokens=10", nil))
		if res.Status != 500 || res.Retryable || len(s.events) != 2 {
			t.Fatalf("got %d retryable=%v after %d events", res.Status, res.Retryable, len(s.events))
		}
		if assemble(t, s.events).finish != "" {
			t.Fatal("a failed stream carried a finish reason")
		}
		// Without a stream nothing was sent, so another worker may retry.
		res, s = serve(t, e, api.KindChat, false, chatBody(t, "sim-chat", "hi\nsim: fail=500 after=2 tokens=10", nil))
		if res.Status != 500 || !res.Retryable || s.bodies != 0 {
			t.Fatalf("non-streaming got %d retryable=%v", res.Status, res.Retryable)
		}
	})
}

func TestCut(t *testing.T) {
	e := New(fixedConfig())
	tests := []struct {
		name   string
		user   string
		stream bool
		events int
	}{
		{"after three", "hi\nsim: fail=cut after=3 tokens=10", true, 3},
		{"after everything", "hi\nsim: fail=cut after=50 tokens=10", true, 10},
		{"at once", "hi\nsim: fail=cut", true, 0},
		{"non-streaming", "hi\nsim: fail=cut after=3", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, s := serve(t, e, api.KindChat, tt.stream, chatBody(t, "sim-chat", tt.user, nil))
			if res.Status != http.StatusBadGateway || res.Error.Type != api.TypeUpstream || !strings.Contains(res.Error.Message, "cut off") {
				t.Fatalf("got %d %+v", res.Status, res.Error)
			}
			if len(s.events) != tt.events || s.bodies != 0 {
				t.Fatalf("%d events, %d bodies; want %d events", len(s.events), s.bodies, tt.events)
			}
			if assemble(t, s.events).finish != "" {
				t.Fatal("a cut stream carried a finish reason")
			}
		})
	}
}

func TestHangAndCancel(t *testing.T) {
	e := New(fixedConfig())
	for _, kind := range []string{api.KindChat, api.KindEmbeddings} {
		t.Run(kind, func(t *testing.T) {
			model := map[string]string{api.KindChat: "sim-chat", api.KindEmbeddings: "sim-embed"}[kind]
			body := chatBody(t, model, "wait\nsim: hang=1", nil)
			if kind == api.KindEmbeddings {
				body = []byte(`{"model":"sim-embed","input":"wait\nsim: hang=1"}`)
			}
			ctx, cancel := context.WithCancel(t.Context())
			sink := &recSink{}
			done := make(chan *api.Result, 1)
			go func() { done <- e.Serve(ctx, &engine.Request{Kind: kind, Stream: true, Body: body}, sink) }()
			select {
			case <-done:
				t.Fatal("hang returned before the request was cancelled")
			case <-time.After(20 * time.Millisecond):
			}
			cancel()
			select {
			case res := <-done:
				if res.Status != 499 || len(sink.events) != 0 {
					t.Fatalf("got %d with %d events", res.Status, len(sink.events))
				}
			case <-time.After(5 * time.Second):
				t.Fatal("hang did not end on cancel")
			}
		})
	}
}

// cancelSink cancels the request after n events.
type cancelSink struct {
	recSink
	n      int
	cancel context.CancelFunc
}

func (s *cancelSink) Event(ctx context.Context, data []byte) error {
	err := s.recSink.Event(ctx, data)
	if len(s.events) == s.n {
		s.cancel()
	}
	return err
}

func TestStopsWhenTheClientGoes(t *testing.T) {
	e := New(fixedConfig())
	body := chatBody(t, "sim-chat", "long\nsim: tokens=50", nil)

	sink := &recSink{failAt: 3}
	res := e.Serve(t.Context(), &engine.Request{Kind: api.KindChat, Stream: true, Body: body}, sink)
	if res.Status != 499 || len(sink.events) != 2 {
		t.Fatalf("sink error: got %d after %d events", res.Status, len(sink.events))
	}

	ctx, cancel := context.WithCancel(t.Context())
	cs := &cancelSink{n: 4, cancel: cancel}
	res = e.Serve(ctx, &engine.Request{Kind: api.KindChat, Stream: true, Body: body}, cs)
	if res.Status != 499 || len(cs.events) != 4 {
		t.Fatalf("cancel: got %d after %d events", res.Status, len(cs.events))
	}

	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	res = e.Serve(ctx, &engine.Request{Kind: api.KindChat, Body: body}, &recSink{})
	if res.Status != 499 {
		t.Fatalf("cancelled non-streaming request: %d", res.Status)
	}
}

func TestBadRequests(t *testing.T) {
	e := New(fixedConfig())
	tests := []struct {
		name   string
		kind   string
		body   string
		status int
		typ    string
	}{
		{"unknown model", api.KindChat, `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, 404, api.TypeNotFound},
		{"no model", api.KindChat, `{"messages":[{"role":"user","content":"hi"}]}`, 400, api.TypeInvalidRequest},
		{"bad json", api.KindChat, `{"model":`, 400, api.TypeInvalidRequest},
		{"no messages", api.KindChat, `{"model":"sim-chat","messages":[]}`, 400, api.TypeInvalidRequest},
		{"zero max_tokens", api.KindChat, `{"model":"sim-chat","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, 400, api.TypeInvalidRequest},
		{"negative budget", api.KindChat, `{"model":"sim-reasoner","reasoning":{"max_tokens":-1},"messages":[{"role":"user","content":"hi"}]}`, 400, api.TypeInvalidRequest},
		{"bad directive", api.KindChat, `{"model":"sim-chat","messages":[{"role":"user","content":"sim: tokens=many"}]}`, 400, api.TypeInvalidRequest},
		{"chat to an embedding model", api.KindChat, `{"model":"sim-embed","messages":[{"role":"user","content":"hi"}]}`, 400, api.TypeInvalidRequest},
		{"embeddings to a chat model", api.KindEmbeddings, `{"model":"sim-chat","input":"hi"}`, 400, api.TypeInvalidRequest},
		{"unknown kind", "moderation", `{}`, 400, api.TypeInvalidRequest},
		{"seed with a fraction", api.KindChat, `{"model":"sim-chat","seed":5.5,"messages":[{"role":"user","content":"hi"}]}`, 400, api.TypeInvalidRequest},
		{"no choices", api.KindChat, `{"model":"sim-chat","n":0,"messages":[{"role":"user","content":"hi"}]}`, 400, api.TypeInvalidRequest},
		{"part of a choice", api.KindChat, `{"model":"sim-chat","n":1.5,"messages":[{"role":"user","content":"hi"}]}`, 400, api.TypeInvalidRequest},
		{"too many choices", api.KindChat, `{"model":"sim-chat","n":129,"messages":[{"role":"user","content":"hi"}]}`, 400, api.TypeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, s := serve(t, e, tt.kind, false, []byte(tt.body))
			if res.Status != tt.status || res.Error == nil || res.Error.Type != tt.typ || res.Retryable || s.bodies != 0 {
				t.Fatalf("got %d %+v", res.Status, res.Error)
			}
		})
	}
}

func TestContentParts(t *testing.T) {
	e := New(fixedConfig())
	body := []byte(`{"model":"sim-chat","messages":[
		{"role":"system","content":"You are terse."},
		{"role":"user","content":[{"type":"text","text":"Look:"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"text","text":"sim: tokens=4"}]}]}`)
	res, _ := serve(t, e, api.KindChat, false, body)
	if res.Usage.CompletionTokens != 4 {
		t.Fatalf("directive in a text part ignored: %d tokens", res.Usage.CompletionTokens)
	}
	// "You are terse." + "Look:\nsim: tokens=4" = 14 + 19 characters.
	if res.Usage.PromptTokens != 9 {
		t.Fatalf("prompt tokens %d, want 9", res.Usage.PromptTokens)
	}
	// Directives in earlier messages do not count.
	body = []byte(`{"model":"sim-chat","messages":[{"role":"user","content":"sim: tokens=4"},{"role":"assistant","content":"ok"},{"role":"user","content":"again"}]}`)
	if res, _ := serve(t, e, api.KindChat, false, body); res.Usage.CompletionTokens == 4 {
		t.Fatal("a directive outside the last user message applied")
	}
}

func TestTiming(t *testing.T) {
	tests := []struct {
		name    string
		cfg     func(*Config)
		user    string
		ttft    float64
		tps     float64 // 0 = absent
		elapsed time.Duration
	}{
		{"defaults", nil, "hi\nsim: tokens=11", 30, 100, 30*time.Millisecond + 10*10*time.Millisecond},
		{"latency is not ttft", func(c *Config) { c.Latency = 5 * time.Millisecond }, "hi\nsim: tokens=11", 30, 100, 35*time.Millisecond + 100*time.Millisecond},
		{"per-request overrides", nil, "hi\nsim: tokens=11 tps=50 ttft=100ms", 100, 50, 100*time.Millisecond + 10*20*time.Millisecond},
		{"slow", nil, "hi\nsim: tokens=11 slow=10ms", 30, 50, 30*time.Millisecond + 10*20*time.Millisecond},
		{"unpaced on a still clock", func(c *Config) { c.TokensPerSecond, c.TTFT = 0, 0 }, "hi\nsim: tokens=11", 0, 0, 0},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", tt.name, stream), func(t *testing.T) {
				cfg, clk := testConfig()
				if tt.cfg != nil {
					tt.cfg(&cfg)
				}
				e := New(cfg)
				start := clk.Now()
				res, _ := serve(t, e, api.KindChat, stream, chatBody(t, "sim-chat", tt.user, nil))
				if got := clk.Now().Sub(start); got != tt.elapsed {
					t.Fatalf("request took %v, want %v", got, tt.elapsed)
				}
				tm := res.Timing
				if tm.TTFTMs == nil || *tm.TTFTMs != tt.ttft {
					t.Fatalf("ttft %v, want %v", tm.TTFTMs, tt.ttft)
				}
				if (tm.TokensPerSecond == nil) != (tt.tps == 0) || (tm.TokensPerSecond != nil && *tm.TokensPerSecond != tt.tps) {
					t.Fatalf("tps %v, want %v", tm.TokensPerSecond, tt.tps)
				}
				if tm.DraftAcceptanceRate != nil || tm.ColdStart != nil || tm.ModelLoadMs != nil {
					t.Fatalf("unexpected timing %+v", tm)
				}
			})
		}
	}

	// With nothing configured the rate is measured on the real clock.
	e := New(Config{})
	res, _ := serve(t, e, api.KindChat, true, chatBody(t, "sim-chat", "hi\nsim: tokens=200", nil))
	if res.Timing.TokensPerSecond == nil || *res.Timing.TokensPerSecond <= 0 {
		t.Fatalf("measured tps %v", res.Timing.TokensPerSecond)
	}
}

func TestRealPacing(t *testing.T) {
	// One short run on the real clock, to check that pacing really waits.
	e := New(Config{TokensPerSecond: 500, TTFT: 10 * time.Millisecond})
	start := time.Now()
	res, s := serve(t, e, api.KindChat, true, chatBody(t, "sim-chat", "hi\nsim: tokens=11", nil))
	if took := time.Since(start); took < 25*time.Millisecond || len(s.events) != 11 || res.Status != 200 {
		t.Fatalf("took %v for %d events", took, len(s.events))
	}
}

// isLoaded reports whether e lists model id as loaded.
func isLoaded(t *testing.T, e *Engine, id string) bool {
	t.Helper()
	models, err := e.Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range models {
		if m.ID == id {
			return *m.Loaded
		}
	}
	t.Fatalf("no model %s", id)
	return false
}

func TestColdStart(t *testing.T) {
	cfg, clk := testConfig()
	e := New(cfg)
	loaded := func(id string) bool { return isLoaded(t, e, id) }
	request := func() *api.Result {
		res, _ := serve(t, e, api.KindChat, true, chatBody(t, "sim-cold", "hi\nsim: tokens=3", nil))
		if res.Status != 200 {
			t.Fatalf("status %d", res.Status)
		}
		return res
	}
	isCold := func(res *api.Result) bool {
		if res.Timing.ColdStart == nil {
			if res.Timing.ModelLoadMs != nil {
				t.Fatal("load time without a cold start")
			}
			return false
		}
		if !*res.Timing.ColdStart || res.Timing.ModelLoadMs == nil || *res.Timing.ModelLoadMs != 1500 {
			t.Fatalf("cold timing %+v", res.Timing)
		}
		return true
	}

	if loaded("sim-cold") || !loaded("sim-chat") {
		t.Fatal("sim-cold loaded before use, or sim-chat not loaded")
	}
	start := clk.Now()
	if !isCold(request()) {
		t.Fatal("first request was warm")
	}
	if took := clk.Now().Sub(start); took != 1500*time.Millisecond+30*time.Millisecond+20*time.Millisecond {
		t.Fatalf("cold request took %v", took)
	}
	if !loaded("sim-cold") {
		t.Fatal("not loaded after the first request")
	}
	if isCold(request()) {
		t.Fatal("second request was cold")
	}
	clk.Advance(4 * time.Minute)
	if isCold(request()) {
		t.Fatal("cold after 4 idle minutes")
	}
	clk.Advance(ColdIdle)
	if loaded("sim-cold") {
		t.Fatal("still loaded after 5 idle minutes")
	}
	if !isCold(request()) {
		t.Fatal("warm after 5 idle minutes")
	}
	// Warm models never report a load.
	res, _ := serve(t, e, api.KindChat, false, chatBody(t, "sim-chat", "hi", nil))
	if isCold(res) {
		t.Fatal("sim-chat had a cold start")
	}
}

// TestKeep checks that a kept cold model is loaded at once and never
// unloaded for idleness, and that a pulled model is cold until kept.
func TestKeep(t *testing.T) {
	cfg, clk := testConfig()
	cfg.PullTime = 0
	e := New(cfg)
	loaded := func(id string) bool { return isLoaded(t, e, id) }
	if err := e.Pull(t.Context(), "pulled", nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sim-cold", "pulled"} {
		if loaded(id) {
			t.Fatalf("%s loaded before use", id)
		}
		d, err := e.Keep(t.Context(), id)
		if err != nil || d != DefaultLoadTime {
			t.Fatalf("keep %s: %s, %v; want a load of %s", id, d, err, DefaultLoadTime)
		}
	}
	clk.Advance(10 * ColdIdle)
	for _, id := range []string{"sim-cold", "pulled"} {
		if !loaded(id) {
			t.Errorf("%s unloaded though kept", id)
		}
		if d, err := e.Keep(t.Context(), id); err != nil || d != 0 {
			t.Errorf("keeping %s again: %s, %v; want no load", id, d, err)
		}
		res, _ := serve(t, e, api.KindChat, false, chatBody(t, id, "hi\nsim: tokens=2", nil))
		if res.Status != 200 || res.Timing.ColdStart != nil {
			t.Errorf("%s: status %d, cold start %v", id, res.Status, res.Timing.ColdStart)
		}
	}
	if d, err := e.Keep(t.Context(), "sim-chat"); err != nil || d != 0 {
		t.Errorf("keeping a warm model: %s, %v", d, err)
	}
	if _, err := e.Keep(t.Context(), "nope"); err == nil {
		t.Error("kept a model the simulator does not serve")
	}
}

func TestColdLoadSharedAndCancellable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		loads := 0
		release := make(chan struct{})
		cfg := fixedConfig()
		cfg.LoadTime = 777 * time.Millisecond
		cfg.Sleep = func(ctx context.Context, d time.Duration) error {
			if d != cfg.LoadTime {
				return ctx.Err()
			}
			mu.Lock()
			loads++
			mu.Unlock()
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		e := New(cfg)
		body := chatBody(t, "sim-cold", "hi\nsim: tokens=2", nil)

		// A load cancelled part-way leaves the model unloaded.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		res := e.Serve(ctx, &engine.Request{Kind: api.KindChat, Body: body}, &recSink{})
		cancel()
		if res.Status != 499 {
			t.Fatalf("cancelled load: %d", res.Status)
		}
		if models, _ := e.Models(t.Context()); *models[4].Loaded {
			t.Fatal("loaded after a cancelled load")
		}

		// Concurrent requests share one load.
		var wg sync.WaitGroup
		results := make([]*api.Result, 6)
		for i := range results {
			wg.Go(func() { results[i] = e.Serve(t.Context(), &engine.Request{Kind: api.KindChat, Body: body}, &recSink{}) })
		}
		synctest.Wait() // one loads, the others queue behind the load
		mu.Lock()
		if loads != 2 {
			t.Fatalf("%d loads started, want the cancelled one and one shared", loads)
		}
		mu.Unlock()
		close(release)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if loads != 2 {
			t.Fatalf("%d loads, want the cancelled one and one shared", loads)
		}
		cold := 0
		for _, r := range results {
			if r.Status != 200 {
				t.Fatalf("status %d", r.Status)
			}
			if r.Timing.ColdStart != nil {
				cold++
			}
		}
		if cold == 0 {
			t.Fatal("no request reported the cold start")
		}
	})
}

func TestSpeculative(t *testing.T) {
	e := New(fixedConfig())
	for i := range 30 {
		user := fmt.Sprintf("question %d\nsim: tokens=%d", i, i%7+1)
		res, _ := serve(t, e, api.KindChat, i%2 == 0, chatBody(t, "sim-spec", user, nil))
		r := res.Timing.DraftAcceptanceRate
		if r == nil || *r < 0.6 || *r > 0.85 {
			t.Fatalf("acceptance %v", r)
		}
		again, _ := serve(t, e, api.KindChat, i%2 != 0, chatBody(t, "sim-spec", user, nil))
		if *again.Timing.DraftAcceptanceRate != *r {
			t.Fatal("acceptance rate is not deterministic")
		}
	}
	res, _ := serve(t, e, api.KindChat, false, chatBody(t, "sim-chat", "q", nil))
	if res.Timing.DraftAcceptanceRate != nil {
		t.Fatal("acceptance rate on a model without speculative decoding")
	}
	res, _ = serve(t, e, api.KindChat, false, chatBody(t, "sim-spec", "q\nsim: tokens=0", nil))
	if res.Timing.DraftAcceptanceRate != nil {
		t.Fatal("acceptance rate without any tokens")
	}
}

func TestConcurrentServe(t *testing.T) {
	type request struct {
		kind   string
		stream bool
		body   []byte
	}
	var bodies []request
	for i, model := range []string{"sim-chat", "sim-reasoner", "sim-small", "sim-spec", "sim-cold"} {
		for _, stream := range []bool{false, true} {
			bodies = append(bodies, request{api.KindChat, stream, chatBody(t, model, fmt.Sprintf("request %d", i), map[string]any{"tools": weatherTools})})
		}
	}
	bodies = append(bodies, request{api.KindEmbeddings, false, []byte(`{"model":"sim-embed","input":["a","b"]}`)})

	type reply struct {
		events [][]byte
		body   []byte
	}
	want := make([]reply, len(bodies))
	serial := New(fixedConfig())
	for i, b := range bodies {
		_, s := serve(t, serial, b.kind, b.stream, b.body)
		want[i] = reply{s.events, s.body}
	}

	e := New(fixedConfig())
	var wg sync.WaitGroup
	for range 8 {
		for i, b := range bodies {
			wg.Go(func() {
				sink := &recSink{}
				res := e.Serve(t.Context(), &engine.Request{Kind: b.kind, Stream: b.stream, Body: b.body}, sink)
				if res.Status != 200 {
					t.Errorf("request %d: status %d", i, res.Status)
					return
				}
				if !bytes.Equal(sink.body, want[i].body) || len(sink.events) != len(want[i].events) {
					t.Errorf("request %d: reply differs under concurrency", i)
					return
				}
				for k := range sink.events {
					if !bytes.Equal(sink.events[k], want[i].events[k]) {
						t.Errorf("request %d: chunk %d differs", i, k)
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

func FuzzPlanChat(f *testing.F) {
	for _, s := range []string{
		`{"model":"sim-chat","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"sim-reasoner","max_tokens":7,"reasoning":{"max_tokens":3},"messages":[{"role":"user","content":"hi\nsim: reasoning=9 tokens=4"}]}`,
		`{"model":"sim-small","enable_thinking":true,"stop":["e"," a"],"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`,
		`{"model":"sim-chat","response_format":{"type":"json_schema","json_schema":{"strict":true,"schema":{"type":"object","properties":{"a":{"type":["array","null"],"items":{"const":1}}}}}},"messages":[{"role":"user","content":"q\nsim: json=1 tokens=3"}]}`,
		`{"model":"sim-chat","tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{"x":{"anyOf":[{"type":"number"}]}}}}}],"tool_choice":"required","messages":[{"role":"user","content":"q"}]}`,
	} {
		f.Add([]byte(s))
	}
	s := newSimulator(fixedConfig())
	f.Fuzz(func(t *testing.T, body []byte) {
		j, fail := s.prepareChat("", body, inProcessReasoning)
		if fail != nil {
			if fail.Status < 400 || fail.Error == nil || fail.Error.Message == "" {
				t.Fatalf("bad failure %+v", fail)
			}
			return
		}
		p := j.plan
		if p.promptTokens < 1 || p.reasoningTokens > p.completionTokens() {
			t.Fatalf("usage %+v", p.usage())
		}
		if w := j.model.spec.ContextWindow; p.promptTokens+p.completionTokens() > w {
			t.Fatalf("reply overruns the %d window: %+v", w, p.usage())
		}
		switch p.finish {
		case finishStop, finishLength, finishToolCalls:
		default:
			t.Fatalf("finish %q", p.finish)
		}
		for i := range chunkCount(p) {
			data, err := j.render.chunk(p, 0, i, i == chunkCount(p)-1)
			if err != nil || !json.Valid(data) {
				t.Fatalf("chunk %d %s: %v", i, data, err)
			}
		}
		if _, err := json.Marshal(j.render.completion([]*plan{p})); err != nil {
			t.Fatal(err)
		}
	})
}
