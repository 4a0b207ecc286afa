package relay

import (
	"encoding/json"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
)

// A reply of several choices (n) is judged choice by choice: their texts
// are not run together, and the notice is the first choice's that has
// one, on its share of the tokens.
func TestChoicesAreJudgedApart(t *testing.T) {
	chunk := func(index int, content, finish string) []byte {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		c, _ := json.Marshal(content)
		return []byte(`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":` + string(rune('0'+index)) +
			`,"delta":{"content":` + string(c) + `},"finish_reason":` + f + `}]}`)
	}
	tests := []struct {
		name    string
		n       int
		stream  [][]byte
		answer  string
		want    string // the notice's code, "" for none
		finishs []string
	}{
		{
			name: "streamed, each choice JSON though interleaved",
			n:    2,
			stream: [][]byte{
				chunk(0, `{"a":`, ""), chunk(1, `{"b":`, ""), chunk(1, `2}`, "stop"), chunk(0, `1}`, "stop"),
			},
			finishs: []string{"stop", "stop"},
		},
		{
			name: "streamed, the second choice not JSON",
			n:    2,
			stream: [][]byte{
				chunk(0, `{"a":1}`, "stop"), chunk(1, `no JSON here`, "stop"),
			},
			want:    chat.NoticeStructuredOutputNotJSON,
			finishs: []string{"stop", "stop"},
		},
		{
			name: "streamed, the second choice cut short",
			n:    3,
			stream: [][]byte{
				chunk(0, `{"a":1}`, "stop"), chunk(1, `{"a":`, "length"), chunk(2, `{}`, "stop"),
			},
			want:    chat.NoticeTruncatedDuringStructuredOutput,
			finishs: []string{"stop", "length", "stop"},
		},
		{
			name: "one choice asked for: an index beyond it counts as the first",
			n:    1,
			stream: [][]byte{
				chunk(0, `{"a":`, ""), chunk(1, `1}`, "stop"),
			},
			finishs: []string{"stop"},
		},
		{
			name:    "answered whole, each choice JSON",
			n:       2,
			answer:  `{"id":"c1","choices":[{"index":0,"message":{"content":"{\"a\":1}"},"finish_reason":"stop"},{"index":1,"message":{"content":"[2]"},"finish_reason":"stop"}]}`,
			finishs: []string{"stop", "stop"},
		},
		{
			name:    "answered whole, in another order, the first not JSON",
			n:       2,
			answer:  `{"id":"c1","choices":[{"index":1,"message":{"content":"[2]"},"finish_reason":"stop"},{"index":0,"message":{"content":"nope"},"finish_reason":"stop"}]}`,
			want:    chat.NoticeStructuredOutputNotJSON,
			finishs: []string{"stop", "stop"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := benchCall()
			c.res.Notice = nil
			c.req.Chat = &chat.Request{PromptChars: 100, JSONMode: "json_object", Choices: tt.n}
			if tt.answer != "" {
				c.req.Stream = false
				if _, err := c.completeBody([]byte(tt.answer)); err != nil {
					t.Fatal(err)
				}
			}
			for _, ch := range tt.stream {
				c.inspect(ch)
			}
			got := ""
			if n := c.replyNotice(); n != nil {
				got = n.Code
			}
			if got != tt.want {
				t.Errorf("notice %q, want %q", got, tt.want)
			}
			var finishes []string
			c.eachChoice(func(o *choiceOutcome) { finishes = append(finishes, o.finish) })
			if len(finishes) != len(tt.finishs) {
				t.Fatalf("finishes %q, want %q", finishes, tt.finishs)
			}
			for i := range finishes {
				if finishes[i] != tt.finishs[i] {
					t.Errorf("finishes %q, want %q", finishes, tt.finishs)
				}
			}
		})
	}
}

// A reply's tokens are shared among its choices when each is judged: two
// choices that together fill more than the context window are not each
// said to have filled it.
func TestChoicesShareTheTokens(t *testing.T) {
	c := benchCall()
	c.res.Notice = nil
	c.res.Usage.PromptTokens, c.res.Usage.CompletionTokens = 100, 200
	c.req.ModelInfo = &api.Model{ID: "m", ContextWindow: 256}
	c.req.Chat = &chat.Request{PromptChars: 400, Choices: 2, UserMaxTokens: 100, EngineMaxTokens: 100}
	c.inspect([]byte(`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}]}`))
	c.inspect([]byte(`{"choices":[{"index":1,"delta":{"content":"b"},"finish_reason":"length"}]}`))
	if n := c.replyNotice(); n != nil {
		t.Errorf("notice %+v for two choices of 100 tokens each in a window of 256", n)
	}
	c.req.Chat.Choices = 1
	c.first, c.others = choiceOutcome{finish: "length", hadContent: true}, nil
	if n := c.replyNotice(); n == nil || n.Code != chat.NoticeContextWindowExhausted {
		t.Errorf("notice %+v for one choice of 200 tokens in a window of 256, want %s", n, chat.NoticeContextWindowExhausted)
	}
}

func TestChoiceIndex(t *testing.T) {
	for raw, want := range map[string]int{
		"0": 0, "12": 12, "-1": -1, "1.0": -1, `"1"`: -1, "null": -1, "": -1, "1234567": -1, "1e2": -1,
	} {
		if got := choiceIndex([]byte(raw)); got != want {
			t.Errorf("choiceIndex(%q) = %d, want %d", raw, got, want)
		}
	}
	// An index the relay cannot read leaves the chunk read as before.
	var s chunkScan
	if !s.read([]byte(`{"choices":[{"index":"1","delta":{"content":"a"}},{"index":2,"delta":{"content":"b"}}]}`)) {
		t.Fatal("chunk with a string index not read")
	}
	if len(s.choices) != 2 || s.choices[0].index != -1 || string(s.choices[0].content) != "a" || s.choices[1].index != 2 {
		t.Errorf("choices %+v", s.choices)
	}
}
