package relay

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/usage"
)

// Chunks as engines stream them: a few tokens of content or reasoning, a
// tool call's pieces, and the last one with its finish reason.
var benchChunks = map[string][]byte{
	"content":   []byte(`{"id":"chatcmpl-9f2c1a7e4b","object":"chat.completion.chunk","created":1767225600,"model":"qwen3-32b","system_fingerprint":"b6021-fp8","choices":[{"index":0,"delta":{"content":" the river\nbank"},"logprobs":null,"finish_reason":null}]}`),
	"reasoning": []byte(`{"id":"chatcmpl-9f2c1a7e4b","object":"chat.completion.chunk","created":1767225600,"model":"qwen3-32b","system_fingerprint":"b6021-fp8","choices":[{"index":0,"delta":{"reasoning_content":" so the user wants"},"logprobs":null,"finish_reason":null}]}`),
	"tool_call": []byte(`{"id":"chatcmpl-9f2c1a7e4b","object":"chat.completion.chunk","created":1767225600,"model":"qwen3-32b","system_fingerprint":"b6021-fp8","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Par"}}]},"logprobs":null,"finish_reason":null}]}`),
	"final":     []byte(`{"id":"chatcmpl-9f2c1a7e4b","object":"chat.completion.chunk","created":1767225600,"model":"qwen3-32b","system_fingerprint":"b6021-fp8","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`),
}

// benchCompletion is a non-streaming answer of about 2 KB: reasoning,
// markdown content with escapes, a tool call and the engine's usage.
var benchCompletion = []byte(`{"id":"chatcmpl-4d7e0b2a91","object":"chat.completion","created":1767225600,"model":"qwen3-32b","system_fingerprint":"b6021-fp8","choices":[{"index":0,"message":{"role":"assistant","content":"Here is a short plan for the trip:\n\n1. **Day one** \u2014 arrive in Paris, check in near the Marais and walk along the Seine in the evening.\n2. **Day two** \u2014 the Louvre in the morning (book ahead: the queue at the pyramid is long), then lunch in the Tuileries.\n3. **Day three** \u2014 a train to Versailles; the gardens close at 19:00 in summer.\n\nA few notes:\n- Museum passes pay off from three visits a day.\n- The metro runs until about 01:15, later on Saturdays.\n- Tipping is included in the bill (\"service compris\"), though rounding up is usual.\n\nI have also checked the weather for those days, see the tool result below.","reasoning_content":"The user asks for a three-day plan in Paris. They mentioned museums and a day trip, so the Louvre and Versailles fit. I should keep it short, give practical notes on passes, transport and tipping, and call the weather tool for the dates they gave so the plan can account for rain.","tool_calls":[{"id":"call_7f3a9c","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"days\": 3, \"units\": \"metric\"}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":412,"completion_tokens":318,"total_tokens":730,"completion_tokens_details":{"reasoning_tokens":61},"prompt_tokens_details":{"cached_tokens":256}}}`)

func benchCall() *Call {
	reasoning, cached := 61, 256
	ttft, tps, wq := 182.4, 47.25, 3.5
	// One instant for both, so a derived TTFT is the same in every call built here.
	opened := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &Call{
		req: Request{ID: "req-01JH8Z7Q2M3N4P5R6S7T8V9W0X", Kind: api.KindChat, Model: "qwen3-32b", Stream: true,
			Chat: &chat.Request{PromptChars: 1650}},
		lease:      &fleet.Lease{Worker: fleet.WorkerInfo{ID: "wrk-7c1e2f", Name: "gpu-box-3", Version: "0.14.2"}},
		entry:      &usage.Entry{},
		queueWait:  1200 * time.Microsecond,
		openedAt:   opened,
		firstToken: opened.Add(77 * time.Microsecond),
		res: &api.Result{Status: 200,
			Usage:  &api.Usage{PromptTokens: 412, CompletionTokens: 318, TotalTokens: 730, ReasoningTokens: &reasoning, CachedTokens: &cached},
			Timing: api.Timing{TTFTMs: &ttft, TokensPerSecond: &tps, WorkerQueueWaitMs: &wq}},
	}
}

func BenchmarkInspect(b *testing.B) {
	for _, name := range []string{"content", "reasoning", "tool_call", "final"} {
		msg := benchChunks[name]
		b.Run(name, func(b *testing.B) {
			c := benchCall()
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				c.inspect(msg)
			}
		})
	}
}

func BenchmarkCompleteBody(b *testing.B) {
	b.SetBytes(int64(len(benchCompletion)))
	b.ReportAllocs()
	for b.Loop() {
		c := benchCall()
		if _, err := c.completeBody(benchCompletion); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFinalChunks(b *testing.B) {
	c := benchCall()
	c.inspect(benchChunks["content"])
	b.ReportAllocs()
	for b.Loop() {
		if len(c.finalChunks()) == 0 {
			b.Fatal("no chunks")
		}
	}
}

// inspectDecoded is inspect as it was, decoding each chunk with
// encoding/json: the baseline for BenchmarkInspect.
func (c *Call) inspectDecoded(msg []byte) {
	var ch refChunk
	if json.Unmarshal(msg, &ch) != nil {
		return
	}
	if c.chunkID == "" {
		c.chunkID = ch.ID
	}
	produced := false
	for _, choice := range ch.Choices {
		d := choice.Delta
		toolCalls := present(d.ToolCalls)
		produced = produced || d.Content != "" || d.ReasoningContent != "" || toolCalls
		c.noteText(&c.first, []byte(d.Content), []byte(d.ReasoningContent), toolCalls)
		if choice.FinishReason != nil && *choice.FinishReason != "" {
			c.first.finish = *choice.FinishReason
		}
	}
	if produced {
		if c.firstToken.IsZero() {
			c.firstToken = time.Now()
		}
		c.entry.AddTokens(1)
	}
}

func BenchmarkInspectDecoded(b *testing.B) {
	for _, name := range []string{"content", "reasoning", "tool_call", "final"} {
		msg := benchChunks[name]
		b.Run(name, func(b *testing.B) {
			c := benchCall()
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				c.inspectDecoded(msg)
			}
		})
	}
}

func BenchmarkCompleteBodyDecoded(b *testing.B) {
	b.SetBytes(int64(len(benchCompletion)))
	b.ReportAllocs()
	for b.Loop() {
		c := benchCall()
		if _, err := c.completeBodyDecoded(benchCompletion); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFinalChunksMarshalled(b *testing.B) {
	c := benchCall()
	c.inspect(benchChunks["content"])
	b.ReportAllocs()
	for b.Loop() {
		if len(c.finalChunksMarshalled(time.Now().Unix())) == 0 {
			b.Fatal("no chunks")
		}
	}
}

// The Server-Timing header is built without fmt: each member must read as
// fmt's %.1f would, joined by ", ", and absent values leave no member. The
// queue's member is always there: the gateway's own wait is always known.
func TestServerTimingMembers(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name      string
		ttft, tps *float64
		wait      time.Duration // the gateway's queue wait
		wq        *float64      // the worker's
	}{
		{"queue only", nil, nil, 40 * time.Microsecond, nil},
		{"all", f(12.345), f(45.66), 0, f(3.25)},
		{"large and negative zero", f(1e9), nil, 0, f(math.Copysign(0, -1))},
		{"not finite", f(math.NaN()), f(math.Inf(1)), time.Millisecond, nil},
		{"worker queue added", nil, nil, 1500 * time.Microsecond, f(0.05)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Call{queueWait: tt.wait, res: &api.Result{Timing: api.Timing{TTFTMs: tt.ttft, TokensPerSecond: tt.tps, WorkerQueueWaitMs: tt.wq}}}
			queue := float64(tt.wait.Microseconds()) / 1000
			if tt.wq != nil {
				queue += *tt.wq
			}
			var want []string
			if tt.ttft != nil {
				want = append(want, fmt.Sprintf("ttft;dur=%.1f", *tt.ttft))
			}
			if tt.tps != nil {
				want = append(want, fmt.Sprintf(`tps;desc="%.1f"`, *tt.tps))
			}
			want = append(want, fmt.Sprintf("queue;dur=%.1f", queue))
			if tt.wq != nil {
				want = append(want, fmt.Sprintf("worker_queue;dur=%.1f", *tt.wq))
			}
			if got := c.serverTiming(); got != strings.Join(want, ", ") {
				t.Errorf("got %q, want %q", got, strings.Join(want, ", "))
			}
		})
	}
}
