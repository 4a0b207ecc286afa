package sim

import (
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// webTools are the tools a worker with web tools offers.
var webTools = []any{
	map[string]any{"type": "function", "function": map[string]any{"name": "web_fetch",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"url": map[string]any{"type": "string"}}}}},
	map[string]any{"type": "function", "function": map[string]any{"name": "web_search",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}}},
}

func TestWebToolCalls(t *testing.T) {
	e := New(fixedConfig())
	fetchOnly := webTools[:1]
	tests := []struct {
		name, user string
		tools      []any
		want, args string // "" want: a text answer
	}{
		{"a URL is fetched", "Summarise https://example.org/otters, please.", webTools, "web_fetch", `{"url":"https://example.org/otters"}`},
		{"a URL in brackets", "What is on (http://127.0.0.1:8080/page)?", webTools, "web_fetch", `{"url":"http://127.0.0.1:8080/page"}`},
		{"the URL before a search", "Search https://a.example/x", webTools, "web_fetch", `{"url":"https://a.example/x"}`},
		{"search for", "Please search for sea otter diet.", webTools, "web_search", `{"query":"sea otter diet"}`},
		{"look up", "Look up the tallest tree\nsim: tps=1000", webTools, "web_search", `{"query":"the tallest tree"}`},
		{"search alone", "search", webTools, "web_search", `{"query":"search"}`},
		{"no web tool asked for", "Hello there.", webTools, "", ""},
		{"search not offered", "Search for otters", fetchOnly, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := chatBody(t, "sim-chat", tt.user, map[string]any{"tools": tt.tools})
			res, s := serve(t, e, api.KindChat, false, body)
			msg := decodeCompletion(t, s.body).Choices[0].Message
			if tt.want == "" {
				if len(msg.ToolCalls) != 0 || res.FinishReason != "stop" {
					t.Fatalf("reply %s", s.body)
				}
				return
			}
			if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != tt.want || msg.ToolCalls[0].Function.Arguments != tt.args {
				t.Fatalf("reply %s, want %s(%s)", s.body, tt.want, tt.args)
			}
			_, st := serve(t, e, api.KindChat, true, body)
			if got := assemble(t, st.events); len(got.toolCalls) != 1 || got.toolCalls[0].Function.Arguments != tt.args {
				t.Fatalf("streamed %+v", got)
			}
		})
	}
	// Once the result is in, the answer is text.
	msgs := []any{
		map[string]any{"role": "user", "content": "Search for otters"},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": "call_1", "type": "function", "function": map[string]any{"name": "web_search", "arguments": `{"query":"otters"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "1. Otters\nhttps://example.org/otters"},
	}
	res, s := serve(t, e, api.KindChat, false, chatBody(t, "sim-chat", "", map[string]any{"tools": webTools, "messages": msgs}))
	if msg := decodeCompletion(t, s.body).Choices[0].Message; len(msg.ToolCalls) != 0 || res.FinishReason != "stop" || msg.Content == nil || *msg.Content == "" {
		t.Fatalf("after the result: %s", s.body)
	}
}
