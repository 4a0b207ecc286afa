package chat

import "testing"

// ReadTextChunk takes the chunks a stream is made of and leaves every
// other to its caller's full reading.
func TestReadTextChunk(t *testing.T) {
	for _, tc := range []struct {
		name, data          string
		ok                  bool
		content, rc, r      string
		hasReasoningContent bool
	}{
		{"content", `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" fox"},"logprobs":null,"finish_reason":null}],"usage":null}`, true, " fox", "", "", false},
		{"reasoning", `{"choices":[{"index":0,"delta":{"reasoning_content":"a","reasoning":"b"}}]}`, true, "", "a", "b", true},
		{"escaped", `{"choices":[{"delta":{"role":"assistant","content":"\"q\"\n"}}]}`, true, "\"q\"\n", "", "", false},
		{"null reasoning_content", `{"choices":[{"delta":{"reasoning_content":null}}]}`, true, "", "", "", false},
		{"no choices", `{"id":"c"}`, true, "", "", "", false},
		{"finish", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, false, "", "", "", false},
		{"usage", `{"choices":[],"usage":{"prompt_tokens":1}}`, false, "", "", "", false},
		{"svc", `{"choices":[{"delta":{"content":"x"}}],"svc":{}}`, false, "", "", "", false},
		{"error", `{"error":{"message":"m"}}`, false, "", "", "", false},
		{"tool call", `{"choices":[{"delta":{"tool_calls":[]}}]}`, false, "", "", "", false},
		{"second choice", `{"choices":[{"delta":{"content":"x"}},{"index":1}]}`, false, "", "", "", false},
		{"other index", `{"choices":[{"index":1,"delta":{"content":"x"}}]}`, false, "", "", "", false},
		{"content twice", `{"choices":[{"delta":{"content":"a","content":"b"}}]}`, false, "", "", "", false},
		{"another case", `{"choices":[{"delta":{"content":"a"},"Delta":{}}]}`, false, "", "", "", false},
		{"not text", `{"choices":[{"delta":{"content":["a"]}}]}`, false, "", "", "", false},
		{"not JSON", `{"choices":[{"delta":{"content":"a"}}]`, false, "", "", "", false},
		{"trailing", `{"choices":[]} x`, false, "", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := ReadTextChunk([]byte(tc.data))
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if ok && (string(c.Content) != tc.content || string(c.ReasoningContent) != tc.rc || string(c.Reasoning) != tc.r || c.HasReasoningContent != tc.hasReasoningContent) {
				t.Fatalf("got %q %q %q %v", c.Content, c.ReasoningContent, c.Reasoning, c.HasReasoningContent)
			}
		})
	}
}
