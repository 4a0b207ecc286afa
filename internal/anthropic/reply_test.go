package anthropic

import (
	"strings"
	"testing"
)

// completion is a chat.completion as the gateway answers it, with the
// given choice and extra top-level members.
func completion(choice string, extra ...string) string {
	b := `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"qwen3","choices":[` + choice + `]`
	for _, e := range extra {
		b += "," + e
	}
	return b + "}"
}

const (
	gatewayUsage = `"usage":{"completion_tokens":7,"prompt_tokens":20,"total_tokens":27}`
	gatewaySvc   = `"svc":{"worker":{"id":"wk_1","name":"gpu <1>","version":null},"request_id":"r1","timing":{"ttft_ms":41.2}}`
)

func TestFromChat(t *testing.T) {
	tests := []struct {
		name string
		chat string
		want string
	}{
		{"text", completion(`{"index":0,"message":{"role":"assistant","content":"Hello <there> & you"},"finish_reason":"stop"}`, gatewayUsage, gatewaySvc),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":"Hello <there> & you"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":7},
			"svc":{"worker":{"id":"wk_1","name":"gpu <1>","version":null},"request_id":"r1","timing":{"ttft_ms":41.2}}}`},
		{"reasoning", completion(`{"index":0,"message":{"role":"assistant","content":"42","reasoning_content":"think","reasoning":"think"},"finish_reason":"stop"}`, gatewayUsage),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"thinking","thinking":"think","signature":""},{"type":"text","text":"42"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":7}}`},
		// An engine that names no model: the message names the one asked
		// for, as a stream's message_start does.
		{"no model", `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}]}`,
			`{"id":"msg_r1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"x"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"reasoning field only", completion(`{"index":0,"message":{"role":"assistant","content":"42","reasoning":"think"},"finish_reason":"stop"}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"thinking","thinking":"think","signature":""},{"type":"text","text":"42"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		// Thinking cut off by max_tokens: no empty text block after it,
		// which Anthropic never sends and refuses as input.
		{"thinking alone", completion(`{"index":0,"message":{"role":"assistant","content":"","reasoning_content":"think"},"finish_reason":"length"}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"thinking","thinking":"think","signature":""}],
			"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"nothing at all", completion(`{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"length"}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":""}],
			"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"empty reasoning", completion(`{"index":0,"message":{"role":"assistant","content":"42","reasoning_content":""},"finish_reason":"stop"}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":"42"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"tool calls", completion(`{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[
				{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
				{"id":"call_2","type":"function","function":{"name":"now","arguments":""}},
				{"id":"call_3","type":"function","function":{"name":"bad","arguments":"{\"city\":"}},
				{"id":"call_4","type":"function","function":{"name":"list","arguments":"[1]"}},
				{"type":"function","function":{"name":"obj","arguments":{"a":1}}}]},"finish_reason":"tool_calls"}`, gatewayUsage),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[
				{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}},
				{"type":"tool_use","id":"call_2","name":"now","input":{}},
				{"type":"tool_use","id":"call_3","name":"bad","input":{}},
				{"type":"tool_use","id":"call_4","name":"list","input":{}},
				{"type":"tool_use","id":"toolu_r1_4","name":"obj","input":{"a":1}}],
			"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":7}}`},
		{"text and tool call, finish stop", completion(`{"index":0,"message":{"role":"assistant","content":"Checking.","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"stop"}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"c","name":"f","input":{}}],
			"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"length", completion(`{"index":0,"message":{"role":"assistant","content":"Once upon"},"finish_reason":"length"}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":"Once upon"}],
			"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"content filter", completion(`{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"content_filter"}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":""}],
			"stop_reason":"refusal","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"unknown finish", completion(`{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"abort"}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":"x"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"no finish", completion(`{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":null}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":"x"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"stop sequence (vLLM)", completion(`{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop","stop_reason":"END"}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":"x"}],
			"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":0,"output_tokens":0}}`},
		{"stop sequence (SGLang)", completion(`{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop","matched_stop":"END"}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":"x"}],
			"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":0,"output_tokens":0}}`},
		{"stop token id", completion(`{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop","stop_reason":151645,"matched_stop":151645}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":"x"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"cached tokens", completion(`{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}`,
			`"usage":{"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":2},"prompt_tokens":100,"prompt_tokens_details":{"cached_tokens":64},"total_tokens":105}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":"x"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":36,"output_tokens":5,"cache_read_input_tokens":64}}`},
		{"content parts", completion(`{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},"finish_reason":"stop"}`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":"ab"}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
		{"odd members", completion(`{"index":0,"message":{"role":"assistant","content":5,"reasoning_content":{"x":1},"tool_calls":"no"},"finish_reason":7}`, `"usage":"none"`, `"svc":"x"`),
			`{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[{"type":"text","text":""}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromChat([]byte(tt.chat), "r1", "claude-x")
			if err != nil {
				t.Fatalf("FromChat: %v", err)
			}
			if !jsonEqual(t, got, []byte(tt.want)) {
				t.Fatalf("FromChat =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestFromChatSvcUnchanged: the svc object is the gateway's, byte for byte.
func TestFromChatSvcUnchanged(t *testing.T) {
	got, err := FromChat([]byte(completion(`{"index":0,"message":{"content":"x"},"finish_reason":"stop"}`, gatewaySvc)), "r1", "claude-x")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), gatewaySvc) {
		t.Fatalf("FromChat = %s", got)
	}
}

func TestFromChatErrors(t *testing.T) {
	for _, b := range []string{``, `x`, `[]`, `{"choices":[]}`, `{"model":"m"}`, `{"choices":[1]}`, `{"choices":{}}`, `{"choices":[{}]`} {
		if got, err := FromChat([]byte(b), "r1", "claude-x"); err == nil {
			t.Errorf("FromChat(%s) = %s, want an error", b, got)
		}
	}
}
