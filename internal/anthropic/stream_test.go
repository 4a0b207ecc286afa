package anthropic

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// delta is a chat.completion.chunk with the given delta and finish_reason
// (null when "").
func delta(d, finish string) string {
	f := "null"
	if finish != "" {
		f = quote(finish)
	}
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":` + d + `,"finish_reason":` + f + `}]}`
}

// The final chunks as the gateway writes them.
const (
	usageChunk  = `{"choices":[],"created":1,"id":"chatcmpl-1","model":"qwen3","object":"chat.completion.chunk","usage":{"completion_tokens":12,"prompt_tokens":30,"prompt_tokens_details":{"cached_tokens":10},"total_tokens":42}}`
	noticeChunk = `{"choices":[],"created":1,"id":"chatcmpl-1","model":"qwen3","object":"chat.completion.chunk","svc":{"notice":{"code":"truncated_at_default_max_tokens","message":"cut <short>"}}}`
	svcChunk    = `{"choices":[],"created":1,"id":"chatcmpl-1","model":"qwen3","object":"chat.completion.chunk","svc":{"worker":{"id":"wk_1","name":"gpu","version":null},"request_id":"r1","timing":{"ttft_ms":41.2}}}`
)

// stepChunk is a web tool step event as a worker sends it.
func stepChunk(step string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[],"svc":{"web_tool_step":` + step + `}}`
}

const messageStartEvent = `{"type":"message_start","message":{"id":"msg_r1","type":"message","role":"assistant","model":"qwen3","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}`

// run feeds the chunks to a new stream and returns its output.
func run(chunks ...string) []byte {
	s := NewStream("r1", "qwen3", 0)
	var out []byte
	for _, c := range chunks {
		out = s.Chunk(out, []byte(c))
	}
	return out
}

func TestStream(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   []sseEvent
	}{
		{"text then tool calls", []string{
			delta(`{"role":"assistant","content":""}`, ""),
			delta(`{"content":"Let me "}`, ""),
			delta(`{"content":"check."}`, ""),
			delta(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}`, ""),
			delta(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`, ""),
			delta(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`, ""),
			delta(`{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"now","arguments":"{}"}}]}`, ""),
			delta(`{}`, "tool_calls"),
			usageChunk, noticeChunk, svcChunk, "[DONE]",
		}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"check."}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"call_1","name":"get_weather","input":{}}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":1}`},
			{"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"call_2","name":"now","input":{}}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{}"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":2}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":12,"input_tokens":20,"cache_read_input_tokens":10},` +
				`"svc":{"notice":{"code":"truncated_at_default_max_tokens","message":"cut <short>"},"worker":{"id":"wk_1","name":"gpu","version":null},"request_id":"r1","timing":{"ttft_ms":41.2}}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"reasoning then text", []string{
			delta(`{"role":"assistant","reasoning_content":"Hmm, ","reasoning":"Hmm, "}`, ""),
			delta(`{"reasoning_content":"six times seven."}`, ""),
			delta(`{"reasoning":"vLLM style."}`, ""),
			delta(`{"content":"42"}`, "stop"),
			`{"choices":[],"usage":{"completion_tokens":9,"prompt_tokens":5,"total_tokens":14}}`, "[DONE]",
		}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm, "}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"six times seven."}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"vLLM style."}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"42"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":1}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9,"input_tokens":5}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"done without finish or usage", []string{delta(`{"content":"hi"}`, ""), "[DONE]"}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":0}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"only done", []string{"[DONE]"}, []sseEvent{
			{"message_start", messageStartEvent},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":0}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"length and stop sequence", []string{delta(`{"content":"a"}`, "length"), "[DONE]"}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":0}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"stop sequence", []string{`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop","stop_reason":"END"}]}`, "[DONE]"}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"END"},"usage":{"output_tokens":0}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"content filter", []string{delta(`{}`, "content_filter"), "[DONE]"}, []sseEvent{
			{"message_start", messageStartEvent},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null},"usage":{"output_tokens":0}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"tool call named late, finish stop", []string{
			delta(`{"tool_calls":[{"index":0,"id":"call_1","function":{"arguments":"{\"a\""}}]}`, ""),
			delta(`{"tool_calls":[{"index":0,"function":{"name":"f","arguments":":1}"}}]}`, ""),
			delta(`{}`, "stop"), "[DONE]",
		}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"call_1","name":"f","input":{}}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":0}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"tool call never named, arguments object", []string{
			delta(`{"tool_calls":[{"function":{"arguments":{"a":1}}}]}`, ""), "[DONE]",
		}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_r1_0","name":"","input":{}}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":0}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"interleaved calls keep every argument", []string{
			delta(`{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"c\":"}}]}`, ""),
			delta(`{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{"}}]}`, ""),
			delta(`{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}`, ""),
			delta(`{"tool_calls":[{"index":1,"function":{"arguments":"}"}}]}`, "tool_calls"),
			"[DONE]",
		}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"a","name":"f","input":{}}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"c\":"}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"1}"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"b","name":"g","input":{}}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":1}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":0}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"arguments after text began are dropped", []string{
			delta(`{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]}`, ""),
			delta(`{"content":"hm"}`, ""),
			delta(`{"tool_calls":[{"index":0,"function":{"arguments":"x"}}]}`, ""),
			"[DONE]",
		}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"a","name":"f","input":{}}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"hm"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":1}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":0}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"arguments that are not an object", []string{
			delta(`{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"not json"}}]}`, ""),
			delta(`{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{\"c\": 1} and"}}]}`, ""),
			delta(`{"tool_calls":[{"index":1,"function":{"arguments":" more"}}]}`, "tool_calls"),
			"[DONE]",
		}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"a","name":"f","input":{}}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"b","name":"g","input":{}}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"c\": 1} "}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":1}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":0}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"web tool steps as they run, and all of them at the end", []string{
			stepChunk(`{"index":0,"name":"web_search","arguments":"{\"query\":\"otters\"}"}`),
			stepChunk(`{"index":0,"name":"web_search","arguments":"{\"query\":\"otters\"}","ok":true,"result":"1. Otters","result_chars":9}`),
			stepChunk(`{"index":1,"name":"web_fetch","arguments":"{\"url\":\"https://a.example\"}"}`),
			stepChunk(`{"index":1,"name":"web_fetch","arguments":"{\"url\":\"https://a.example\"}","ok":false,"result":"","result_chars":0,"error":"refused"}`),
			delta(`{"content":"Otters."}`, "stop"),
			svcChunk, "[DONE]",
		}, []sseEvent{
			{"message_start", messageStartEvent},
			{StepEvent, `{"type":"svc.web_tool_step","svc":{"web_tool_step":{"index":0,"name":"web_search","arguments":"{\"query\":\"otters\"}"}}}`},
			{StepEvent, `{"type":"svc.web_tool_step","svc":{"web_tool_step":{"index":0,"name":"web_search","arguments":"{\"query\":\"otters\"}","ok":true,"result":"1. Otters","result_chars":9}}}`},
			{StepEvent, `{"type":"svc.web_tool_step","svc":{"web_tool_step":{"index":1,"name":"web_fetch","arguments":"{\"url\":\"https://a.example\"}"}}}`},
			{StepEvent, `{"type":"svc.web_tool_step","svc":{"web_tool_step":{"index":1,"name":"web_fetch","arguments":"{\"url\":\"https://a.example\"}","ok":false,"result":"","result_chars":0,"error":"refused"}}}`},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Otters."}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":0},"svc":{` +
				`"worker":{"id":"wk_1","name":"gpu","version":null},"request_id":"r1","timing":{"ttft_ms":41.2},"web_tool_steps":[` +
				`{"index":0,"name":"web_search","arguments":"{\"query\":\"otters\"}","ok":true,"result":"1. Otters","result_chars":9},` +
				`{"index":1,"name":"web_fetch","arguments":"{\"url\":\"https://a.example\"}","ok":false,"result":"","result_chars":0,"error":"refused"}]}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"junk skipped, nothing after done", []string{"", "not json", `[1]`, `"x"`, `{"choices":"x","usage":[],"svc":1}`,
			`{"choices":[{"index":1,"delta":{"content":"other choice"}}]}`,
			delta(`{"content":"<b>"}`, ""), "[DONE]", delta(`{"content":"late"}`, ""), "[DONE]"}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"<b>"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":0}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}},
		{"error chunk", []string{delta(`{"content":"a"}`, ""), `{"error":{"message":"worker lost","type":"service_unavailable","code":"worker_lost","status":503}}`, "[DONE]"}, []sseEvent{
			{"message_start", messageStartEvent},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`},
			{"error", `{"type":"error","error":{"type":"overloaded_error","message":"worker lost"}}`},
		}},
		{"error chunk first", []string{`{"error":{"message":"busy","status":429}}`, "[DONE]"}, []sseEvent{
			{"error", `{"type":"error","error":{"type":"rate_limit_error","message":"busy"}}`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := run(tt.chunks...)
			got, err := parseEvents(out)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d events, want %d:\n%s", len(got), len(tt.want), out)
			}
			for i := range got {
				if got[i].name != tt.want[i].name || !jsonEqual(t, []byte(got[i].data), []byte(tt.want[i].data)) {
					t.Fatalf("event %d = %s %s\nwant %s %s", i, got[i].name, got[i].data, tt.want[i].name, tt.want[i].data)
				}
			}
			if err := newAccumulator().feed(out); err != nil {
				t.Fatalf("SDK accumulator: %v\n%s", err, out)
			}
		})
	}
}

// TestStreamAccumulates: what the SDKs rebuild from the stream is what
// FromChat makes of the same reply.
func TestStreamAccumulates(t *testing.T) {
	out := run(
		delta(`{"role":"assistant","reasoning_content":"Let me think."}`, ""),
		delta(`{"content":"Checking "}`, ""),
		delta(`{"content":"the weather."}`, ""),
		delta(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":"}}]}`, ""),
		delta(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`, ""),
		delta(`{}`, "tool_calls"),
		usageChunk, noticeChunk, svcChunk, "[DONE]")
	a := newAccumulator()
	if err := a.feed(out); err != nil {
		t.Fatal(err)
	}
	whole, err := FromChat([]byte(completion(`{"index":0,"message":{"role":"assistant","reasoning_content":"Let me think.","content":"Checking the weather.",
		"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}`,
		`"usage":{"completion_tokens":12,"prompt_tokens":30,"prompt_tokens_details":{"cached_tokens":10},"total_tokens":42}`,
		`"svc":{"notice":{"code":"truncated_at_default_max_tokens","message":"cut <short>"},"worker":{"id":"wk_1","name":"gpu","version":null},"request_id":"r1","timing":{"ttft_ms":41.2}}`)), "r1", "claude-x")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.final(t); !jsonEqual(t, got, whole) {
		t.Fatalf("accumulated\n%s\nFromChat\n%s", got, whole)
	}
}

func TestStreamFail(t *testing.T) {
	s := NewStream("r1", "qwen3", 0)
	out := s.Chunk(nil, []byte(delta(`{"content":"a"}`, "")))
	out = s.Fail(out, Failure{Status: http.StatusBadGateway, Message: "the engine's answer was cut off"})
	out = s.Chunk(out, []byte("[DONE]"))
	evs, err := parseEvents(out)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(evs))
	for i, ev := range evs {
		names[i] = ev.name
	}
	if want := []string{"message_start", "content_block_start", "content_block_delta", "error"}; !slices.Equal(names, want) {
		t.Fatalf("events %v, want %v", names, want)
	}
	if !jsonEqual(t, []byte(evs[3].data), []byte(`{"type":"error","error":{"type":"api_error","message":"the engine's answer was cut off"}}`)) {
		t.Fatalf("error event %s", evs[3].data)
	}
	if !strings.HasPrefix(string(out[strings.LastIndex(string(out), "event: error"):]), "event: error\ndata: {") {
		t.Fatalf("output %q", out)
	}
}

// A capacity refusal after the stream started carries its wait and the
// queue's depth in the error event, from the gateway or from a chat
// stream's error frame.
func TestStreamFailCarriesTheWait(t *testing.T) {
	depth := 4
	for name, fail := range map[string]func(s *Stream, out []byte) []byte{
		"the gateway's": func(s *Stream, out []byte) []byte {
			return s.Fail(out, Failure{Status: http.StatusTooManyRequests, Message: "busy", RetryAfter: 2, QueueDepth: &depth})
		},
		"a chat frame's": func(s *Stream, out []byte) []byte {
			return s.Chunk(out, []byte(`{"error":{"message":"busy","type":"rate_limit_error","code":"capacity_exceeded","status":429,"retry_after":2,"queue_depth":4}}`))
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := NewStream("r1", "qwen3", 0)
			evs, err := parseEvents(fail(s, nil))
			if err != nil {
				t.Fatal(err)
			}
			last := evs[len(evs)-1]
			if last.name != "error" || !jsonEqual(t, []byte(last.data),
				[]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"busy","retry_after":2,"queue_depth":4}}`)) {
				t.Fatalf("error event %s %s", last.name, last.data)
			}
		})
	}
}

// TestStreamAppends: Chunk appends to dst and leaves what was there.
func TestStreamAppends(t *testing.T) {
	s := NewStream("r1", "m", 0)
	out := s.Chunk([]byte("prefix"), []byte(delta(`{"content":"a"}`, "")))
	if !strings.HasPrefix(string(out), "prefix"+"event: message_start\ndata: ") {
		t.Fatalf("out = %q", out)
	}
	if out := s.Chunk([]byte("x"), []byte("not json")); string(out) != "x" {
		t.Fatalf("out = %q", out)
	}
}

func TestErrorType(t *testing.T) {
	for _, tt := range []struct {
		status int
		want   string
	}{
		{400, "invalid_request_error"}, {422, "invalid_request_error"}, {409, "invalid_request_error"}, {499, "invalid_request_error"},
		{401, "authentication_error"}, {402, "billing_error"}, {403, "permission_error"}, {404, "not_found_error"},
		{413, "request_too_large"}, {429, "rate_limit_error"},
		{500, "api_error"}, {502, "api_error"}, {507, "api_error"}, {503, "overloaded_error"}, {529, "overloaded_error"},
		{504, "timeout_error"}, {0, "api_error"}, {200, "api_error"},
	} {
		if got := ErrorType(tt.status); got != tt.want {
			t.Errorf("ErrorType(%d) = %s, want %s", tt.status, got, tt.want)
		}
	}
}

// message_start reports the prompt's tokens as estimated: the engine's
// count comes only with message_delta, and clients that read usage at the
// start would read 0.
func TestMessageStartCarriesTheEstimate(t *testing.T) {
	s := NewStream("r1", "qwen3", 37)
	out := s.Chunk(nil, []byte(`{"choices":[{"index":0,"delta":{"content":"hi"}}]}`))
	want := strings.Replace(messageStartEvent, `"input_tokens":0`, `"input_tokens":37`, 1)
	if !strings.Contains(string(out), want) {
		t.Fatalf("events:\n%s\nwant %s", out, want)
	}
}
