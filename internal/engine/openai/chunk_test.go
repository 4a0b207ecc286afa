package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestFastPath(t *testing.T) {
	// The chunks that make up nearly all of a stream must not be decoded.
	for _, c := range []string{vllmRole, vllmContent1, vllmContent2, vllmFinish, llamaRole, llamaContent, genericChunk1, genericChunk2} {
		if needsRewrite([]byte(c)) {
			t.Errorf("needsRewrite(%s) = true", c)
		}
	}
	for _, c := range []string{vllmReasoning, vllmUsage, vllmUsageSpec, llamaReasoning, llamaFinish, llamaUsage} {
		if !needsRewrite([]byte(c)) {
			t.Errorf("needsRewrite(%s) = false", c)
		}
	}
}

func TestRewriteChunk(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		forward  bool
		want     string // compared as JSON; "" means the input unchanged
		captured bool   // usage captured
	}{
		{
			name:    "usage null on a content chunk",
			in:      `{"id":"a","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"usage":null}`,
			forward: true,
			want:    `{"id":"a","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`,
		},
		{
			name: "usage-only chunk", in: vllmUsage, captured: true,
		},
		{
			name: "usage chunk without choices", in: `{"id":"a","object":"chat.completion.chunk","usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`, captured: true,
		},
		{
			name:     "continuous usage on a content chunk",
			in:       `{"id":"a","choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`,
			forward:  true,
			want:     `{"id":"a","choices":[{"index":0,"delta":{"content":"x"}}]}`,
			captured: true,
		},
		{
			name:    "empty choices without usage is not ours to drop",
			in:      `{"id":"a","choices":[],"prompt_filter_results":[{"prompt_index":0}],"usage":null}`,
			forward: true,
			want:    `{"id":"a","choices":[],"prompt_filter_results":[{"prompt_index":0}]}`,
		},
		{
			name:    "reasoning mirrored to reasoning_content",
			in:      `{"id":"a","choices":[{"index":0,"delta":{"reasoning":"r <x>","extra":{"k":[1]}},"logprobs":null}],"system_fingerprint":"fp"}`,
			forward: true,
			want:    `{"id":"a","choices":[{"index":0,"delta":{"reasoning":"r <x>","reasoning_content":"r <x>","extra":{"k":[1]}},"logprobs":null}],"system_fingerprint":"fp"}`,
		},
		{
			name:    "reasoning_content mirrored to reasoning",
			in:      llamaReasoning,
			forward: true,
			want:    strings.Replace(llamaReasoning, `{"reasoning_content":"Think"}`, `{"reasoning_content":"Think","reasoning":"Think"}`, 1),
		},
		{
			name:    "null side takes the text",
			in:      `{"choices":[{"delta":{"reasoning":"r","reasoning_content":null}},{"delta":{"reasoning":null,"reasoning_content":"s"}}]}`,
			forward: true,
			want:    `{"choices":[{"delta":{"reasoning":"r","reasoning_content":"r"}},{"delta":{"reasoning":"s","reasoning_content":"s"}}]}`,
		},
		{
			name:    "sglang nulls",
			in:      `{"choices":[{"index":0,"delta":{"role":null,"content":"x","reasoning_content":null,"tool_calls":null},"finish_reason":null,"matched_stop":null}],"usage":null}`,
			forward: true,
			want:    `{"choices":[{"index":0,"delta":{"role":null,"content":"x","reasoning_content":null,"reasoning":null,"tool_calls":null},"finish_reason":null,"matched_stop":null}]}`,
		},
		{
			name:    "both present: unchanged",
			in:      `{"choices":[{"delta":{"reasoning":"r","reasoning_content":"r"}}]}`,
			forward: true,
		},
		{
			name:    "timings on the finish chunk",
			in:      llamaFinish,
			forward: true,
			want:    strings.Replace(llamaFinish, `,"timings":`+llamaTimingsJS, "", 1),
		},
		{
			name:    "metrics object removed, metrics text kept",
			in:      `{"choices":[{"delta":{"content":"the \"metrics\": x"}}],"metrics":{"speculative_decoding":null}}`,
			forward: true,
			want:    `{"choices":[{"delta":{"content":"the \"metrics\": x"}}]}`,
		},
		{
			name:    "metrics not an object",
			in:      `{"choices":[{"delta":{"content":"x"}}],"metrics":"custom"}`,
			forward: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st stats
			out, forward, err := rewriteChunk([]byte(tt.in), &st)
			if err != nil {
				t.Fatal(err)
			}
			if forward != tt.forward || (st.usage != nil) != tt.captured {
				t.Fatalf("forward = %v (want %v), usage = %+v", forward, tt.forward, st.usage)
			}
			if !forward {
				return
			}
			if tt.want == "" {
				if string(out) != tt.in {
					t.Fatalf("changed: %s", out)
				}
				return
			}
			var got, want any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %s\nwant %s", out, tt.want)
			}
			if strings.Contains(tt.in, "<") && !strings.Contains(string(out), "<") {
				t.Fatalf("HTML re-escaped: %s", out)
			}
		})
	}
	if _, _, err := rewriteChunk([]byte(`{"usage":`), &stats{}); err == nil {
		t.Fatal("invalid JSON accepted")
	}
}

func TestCarriesToken(t *testing.T) {
	tests := map[string]bool{
		vllmRole:       false,
		llamaRole:      false,
		vllmFinish:     false,
		llamaFinish:    false,
		vllmUsage:      false,
		vllmContent1:   true,
		vllmReasoning:  true,
		llamaReasoning: true,
		`{"choices":[{"delta": {"content" : "x"}}]}`:                                          true,
		`{"choices":[{"delta":{"content":"\"quoted\""}}]}`:                                    true,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`:  true,
		`{"choices":[{"delta":{"tool_calls":[ ]}}]}`:                                          false,
		`{"choices":[{"delta":{"tool_calls":null,"content":null,"reasoning_content":null}}]}`: false,
		`{"choices":[{"delta":{},"logprobs":{"content":[{"token":"a"}]}}]}`:                   false,
		`{"choices":[{"delta":{"role":"content"}}]}`:                                          false,
		`{"choices":[{"delta":{"refusal":"say \"content\":\"x\""}}]}`:                         false,
	}
	for in, want := range tests {
		if got := carriesToken([]byte(in)); got != want {
			t.Errorf("carriesToken(%s) = %v, want %v", in, got, want)
		}
	}
}

func TestLastFinishReason(t *testing.T) {
	tests := map[string]string{
		vllmContent1: "",
		vllmFinish:   "stop",
		llamaFinish:  "stop",
		`{"choices":[{"finish_reason":"length"},{"finish_reason" : "tool_calls"}]}`: "tool_calls",
		`{"choices":[{"finish_reason":"stop"},{"finish_reason":null}]}`:             "stop",
		`{"choices":[{"finish_reason":"a\u0062c"}]}`:                                "abc",
		`{"choices":[{"finish_reason":""}]}`:                                        "",
		`{"choices":[{"delta":{"content":"finish_reason"}}]}`:                       "",
	}
	for in, want := range tests {
		if got := lastFinishReason([]byte(in)); got != want {
			t.Errorf("lastFinishReason(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestErrorPayload(t *testing.T) {
	tests := []struct {
		in     string
		is     bool
		status int
	}{
		{vllmStreamErr, true, 400},
		{llamaContextErr, true, 400},
		{`{"error":"plain text"}`, true, 500},
		{`{"error":{"message":"x","code":"oops"}}`, true, 500},
		{`{"error":{"message":"x","code":200}}`, true, 500},
		{`{"error":{"message":"x","code":503.0}}`, true, 503},
		{`{"error":null,"choices":[]}`, false, 500},
		{`{"choices":[{"delta":{"content":"\"error\""}}]}`, false, 500},
		{`{"choices":[{"finish_reason":"error"}]}`, false, 500},
	}
	for _, tt := range tests {
		if got := isErrorPayload([]byte(tt.in)); got != tt.is {
			t.Errorf("isErrorPayload(%s) = %v", tt.in, got)
		}
		if got := errorStatus([]byte(tt.in)); got != tt.status {
			t.Errorf("errorStatus(%s) = %d, want %d", tt.in, got, tt.status)
		}
	}
}

func TestCaptureUsage(t *testing.T) {
	tests := map[string]string{
		`{"prompt_tokens":5,"completion_tokens":3}`:                      `{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}`,
		`{"prompt_tokens":5.0,"completion_tokens":"3","total_tokens":8}`: `{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}`,
		`{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"completion_tokens_details":{"reasoning_tokens":2},"prompt_tokens_details":{"cached_tokens":0}}`: `{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"reasoning_tokens":2,"cached_tokens":0}`,
		`{"prompt_tokens":5,"completion_tokens_details":{"reasoning_tokens":null}}`:                                                                                 `{"prompt_tokens":5,"completion_tokens":0,"total_tokens":5}`,
		`null`:   `null`,
		`"junk"`: `null`,
		// Counts no engine could mean are no count: the gateway estimates.
		`{"prompt_tokens":1e30,"completion_tokens":3,"total_tokens":"abc"}`:                             `null`,
		`{"prompt_tokens":-50,"completion_tokens":-7,"total_tokens":-57}`:                               `null`,
		`{"prompt_tokens":5,"completion_tokens":3,"completion_tokens_details":{"reasoning_tokens":-1}}`: `null`,
		`{"prompt_tokens":"abc","completion_tokens":3}`:                                                 `{"prompt_tokens":0,"completion_tokens":3,"total_tokens":3}`,
	}
	for in, want := range tests {
		var st stats
		st.captureUsage(json.RawMessage(in))
		got, _ := json.Marshal(st.usage)
		if string(got) != want {
			t.Errorf("captureUsage(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestCaptureMetrics(t *testing.T) {
	tests := map[string]*float64{
		`{"speculative_decoding":{"num_draft_tokens":12,"num_accepted_draft_tokens":9}}`: ptr(0.75),
		`{"speculative_decoding":{"num_draft_tokens":10,"num_accepted_tokens":4}}`:       ptr(0.4),
		`{"speculative_decoding":{"draft_acceptance_rate":0.5}}`:                         ptr(0.5),
		`{"speculative_decoding":{"num_draft_tokens":0,"acceptance_rate":0.25}}`:         ptr(0.25),
		`{"speculative_decoding":{"draft_acceptance_rate":7}}`:                           nil,
		`{"speculative_decoding":null}`:                                                  nil,
		`{"other":1}`:                                                                    nil,
		`null`:                                                                           nil,
	}
	for in, want := range tests {
		var st stats
		st.captureMetrics(json.RawMessage(in))
		if !reflect.DeepEqual(st.draftRate, want) {
			t.Errorf("captureMetrics(%s) = %v, want %v", in, fmtp(st.draftRate), fmtp(want))
		}
	}
}

// FuzzRewriteChunk checks what the slow path promises for any chunk: the
// output is JSON without usage, timings or a metrics object at the top,
// and every delta that has one reasoning field has both.
func FuzzRewriteChunk(f *testing.F) {
	for _, s := range []string{vllmRole, vllmReasoning, vllmUsage, vllmUsageSpec, llamaReasoning, llamaFinish, llamaUsage,
		`{"choices":[{"delta":{"reasoning":null,"reasoning_content":"s"}}],"usage":null,"timings":null}`,
		`{"choices":{"delta":1},"metrics":[]}`, `{}`, `[]`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var st stats
		out, forward, err := rewriteChunk(in, &st)
		if err != nil || !forward {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			if json.Valid(in) {
				t.Fatalf("invalid output %q from %q", out, in)
			}
			return
		}
		for _, k := range []string{"usage", "timings"} {
			if _, ok := m[k]; ok {
				t.Fatalf("%s left in %s", k, out)
			}
		}
		if raw, ok := m["metrics"]; ok && len(raw) > 0 && raw[0] == '{' {
			t.Fatalf("metrics object left in %s", out)
		}
		var choices []map[string]json.RawMessage
		if json.Unmarshal(m["choices"], &choices) != nil {
			return
		}
		for _, c := range choices {
			var d map[string]json.RawMessage
			if json.Unmarshal(c["delta"], &d) != nil {
				continue
			}
			_, hasR := d["reasoning"]
			_, hasRC := d["reasoning_content"]
			if hasR != hasRC {
				t.Fatalf("reasoning not mirrored in %s", out)
			}
		}
	})
}

func TestMirrorInPlace(t *testing.T) {
	tests := []struct {
		in, want string // want "" means the general path is needed
	}{
		{vllmReasoning, strings.Replace(vllmReasoning, `{"reasoning":"The user greets."}`, `{"reasoning":"The user greets.","reasoning_content":"The user greets."}`, 1)},
		{llamaReasoning, strings.Replace(llamaReasoning, `{"reasoning_content":"Think"}`, `{"reasoning_content":"Think","reasoning":"Think"}`, 1)},
		{`{"choices":[{"delta":{"reasoning" : "a \"q\" \\ b","content":null}},{"delta":{"reasoning":null}}]}`,
			`{"choices":[{"delta":{"reasoning" : "a \"q\" \\ b","reasoning_content":"a \"q\" \\ b","content":null}},{"delta":{"reasoning":null,"reasoning_content":null}}]}`},
		{`{"choices":[{"delta":{"reasoning":{"text":"x"}}}]}`, ""},
		{`{"choices":[{"delta":{"reasoning":"a","reasoning_content":"a"}}]}`, ""},
		{`{"choices":[{"delta":{"reasoning":"unterminated}}]}`, ""},
		{`{"choices":[{"delta":{"content":"no reasoning"}}]}`, ""},
	}
	for _, tt := range tests {
		out, ok := mirrorInPlace([]byte(tt.in))
		if ok != (tt.want != "") || string(out) != tt.want {
			t.Errorf("mirrorInPlace(%s) = %s, %v; want %s", tt.in, out, ok, tt.want)
		}
	}
}

func TestStatsResult(t *testing.T) {
	start := time.Unix(1000, 0)
	first, last := start.Add(100*time.Millisecond), start.Add(500*time.Millisecond)
	usage := func(completion int) *api.Usage {
		return &api.Usage{PromptTokens: 5, CompletionTokens: completion, TotalTokens: 5 + completion}
	}
	llama := &llamaTimings{PromptMs: ptr(12.5), PredictedPerSecond: ptr(50.0), DraftN: ptr(8.0), DraftNAccepted: ptr(6.0)}
	tests := []struct {
		name string
		st   stats
		want api.Timing
	}{
		{name: "measured", st: stats{start: start, firstTok: first, lastTok: last, usage: usage(9)},
			want: api.Timing{TTFTMs: ptr(100.0), TokensPerSecond: ptr(20.0)}},
		{name: "one token", st: stats{start: start, firstTok: first, lastTok: first, usage: usage(1)},
			want: api.Timing{TTFTMs: ptr(100.0)}},
		{name: "no interval", st: stats{start: start, firstTok: first, lastTok: first, usage: usage(5)},
			want: api.Timing{TTFTMs: ptr(100.0)}},
		{name: "no usage", st: stats{start: start, firstTok: first, lastTok: last},
			want: api.Timing{TTFTMs: ptr(100.0)}},
		{name: "engine timings win", st: stats{start: start, firstTok: first, lastTok: last, usage: usage(9), timings: llama, draftRate: ptr(0.1)},
			want: api.Timing{TTFTMs: ptr(12.5), TokensPerSecond: ptr(50.0), DraftAcceptanceRate: ptr(0.75)}},
		{name: "partial timings", st: stats{start: start, firstTok: first, lastTok: last, usage: usage(9), timings: &llamaTimings{PromptMs: ptr(12.5)}, draftRate: ptr(0.5)},
			want: api.Timing{TTFTMs: ptr(12.5), TokensPerSecond: ptr(20.0), DraftAcceptanceRate: ptr(0.5)}},
		{name: "nothing measured", st: stats{usage: usage(9)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.st.result()
			if r.Status != 200 || !reflect.DeepEqual(r.Timing, tt.want) {
				t.Fatalf("timing = %s, want %s", fmtTiming(r.Timing), fmtTiming(tt.want))
			}
		})
	}
}
