package responses_test

import (
	"net/http"
	"testing"

	"github.com/svc-dev/svc/internal/responses"
)

// completion builds a chat.completion body around one choice.
func completion(message, finish string, extra ...string) string {
	b := `{"id":"chatcmpl-1","object":"chat.completion","created":5,"model":"engine-model","choices":[{"index":0,"message":` + message + `,"finish_reason":` + finish + `}]`
	for _, e := range extra {
		b += "," + e
	}
	return b + "}"
}

const (
	chatUsage = `"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}`
	svcMember = `"svc":{"worker":{"id":"w1","name":"box","version":"1.2"},"request_id":"r1","timing":{"total_ms":12}}`
)

func TestFromChat(t *testing.T) {
	tests := []struct {
		name, chat string
		want       map[string]string // top-level members of the response
	}{{
		name: "text, usage and svc",
		chat: completion(`{"role":"assistant","content":"Hello!"}`, `"stop"`, chatUsage, svcMember),
		want: map[string]string{
			"id": `"resp_r1"`, "object": `"response"`, "created_at": `1700`, "status": `"completed"`,
			"error": `null`, "incomplete_details": `null`, "model": `"engine-model"`,
			"output": `[{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello!","annotations":[]}]}]`,
			"usage":  `{"input_tokens":11,"input_tokens_details":{"cached_tokens":0},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":18}`,
			"svc":    `{"worker":{"id":"w1","name":"box","version":"1.2"},"request_id":"r1","timing":{"total_ms":12}}`,
		},
	}, {
		name: "reasoning comes first",
		chat: completion(`{"role":"assistant","content":"4","reasoning_content":"2+2 is 4"}`, `"stop"`,
			`"usage":{"prompt_tokens":3,"completion_tokens":9,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":6}}`),
		want: map[string]string{
			"output": `[{"type":"reasoning","id":"rs_r1","summary":[{"type":"summary_text","text":"2+2 is 4"}]},
				{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"4","annotations":[]}]}]`,
			"usage": `{"input_tokens":3,"input_tokens_details":{"cached_tokens":2},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":6},"total_tokens":12}`,
		},
	}, {
		name: "reasoning under its other name",
		chat: completion(`{"role":"assistant","content":"4","reasoning":"sum"}`, `"stop"`),
		want: map[string]string{
			"output": `[{"type":"reasoning","id":"rs_r1","summary":[{"type":"summary_text","text":"sum"}]},
				{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"4","annotations":[]}]}]`,
		},
	}, {
		name: "calls alone have no message",
		chat: completion(`{"role":"assistant","content":null,"tool_calls":[
			{"id":"call_a","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"call_b","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Rome\"}"}}]}`, `"tool_calls"`),
		want: map[string]string{
			"status": `"completed"`,
			"output": `[{"type":"function_call","id":"fc_r1_0","status":"completed","call_id":"call_a","name":"weather","arguments":"{\"city\":\"Paris\"}"},
				{"type":"function_call","id":"fc_r1_1","status":"completed","call_id":"call_b","name":"weather","arguments":"{\"city\":\"Rome\"}"}]`,
			"usage": `null`,
		},
	}, {
		name: "text before calls",
		chat: completion(`{"role":"assistant","content":"Checking.","tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":{"x":1}}}]}`, `"tool_calls"`),
		want: map[string]string{
			"output": `[{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Checking.","annotations":[]}]},
				{"type":"function_call","id":"fc_r1_0","status":"completed","call_id":"call_a","name":"f","arguments":"{\"x\":1}"}]`,
		},
	}, {
		name: "calls without ids, or with one id twice",
		chat: completion(`{"role":"assistant","tool_calls":[
			{"type":"function","function":{"name":"f","arguments":"{}"}},
			{"id":"same","type":"function","function":{"name":"g","arguments":"{}"}},
			{"id":"same","type":"function","function":{"name":"h","arguments":"{}"}}]}`, `"tool_calls"`),
		want: map[string]string{
			"output": `[{"type":"function_call","id":"fc_r1_0","status":"completed","call_id":"call_r1_0","name":"f","arguments":"{}"},
				{"type":"function_call","id":"fc_r1_1","status":"completed","call_id":"same","name":"g","arguments":"{}"},
				{"type":"function_call","id":"fc_r1_2","status":"completed","call_id":"call_r1_2","name":"h","arguments":"{}"}]`,
		},
	}, {
		name: "cut short by the cap",
		chat: completion(`{"role":"assistant","content":"Once upon","reasoning_content":"story"}`, `"length"`, chatUsage),
		want: map[string]string{
			"status": `"incomplete"`, "incomplete_details": `{"reason":"max_output_tokens"}`,
			"output": `[{"type":"reasoning","id":"rs_r1","summary":[{"type":"summary_text","text":"story"}]},
				{"type":"message","id":"msg_r1","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"Once upon","annotations":[]}]}]`,
		},
	}, {
		name: "filtered",
		chat: completion(`{"role":"assistant","content":""}`, `"content_filter"`),
		want: map[string]string{
			"status": `"incomplete"`, "incomplete_details": `{"reason":"content_filter"}`,
			"output": `[{"type":"message","id":"msg_r1","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"","annotations":[]}]}]`,
		},
	}, {
		name: "nothing said is an empty message",
		chat: completion(`{"role":"assistant","content":null}`, `"stop"`),
		want: map[string]string{
			"output": `[{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"","annotations":[]}]}]`,
		},
	}, {
		name: "content as parts, usage without a total",
		chat: completion(`{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, `"stop"`, `"usage":{"prompt_tokens":2,"completion_tokens":3}`),
		want: map[string]string{
			"output": `[{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"ab","annotations":[]}]}]`,
			"usage":  `{"input_tokens":2,"input_tokens_details":{"cached_tokens":0},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":5}`,
		},
	}, {
		name: "the choice with index 0",
		chat: `{"model":"x","choices":[{"index":1,"message":{"content":"no"},"finish_reason":"length"},{"index":0,"message":{"content":"yes"},"finish_reason":"stop"}]}`,
		want: map[string]string{
			"status": `"completed"`,
			"output": `[{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"yes","annotations":[]}]}]`,
		},
	}, {
		name: "odd members read as absent",
		chat: `{"model":7,"choices":[{"index":0,"message":{"content":5,"tool_calls":[1,{"function":"f"}]},"finish_reason":3}],"usage":"many","svc":null}`,
		want: map[string]string{
			"model":  `""`,
			"output": `[{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"","annotations":[]}]}]`,
			"usage":  `null`, "svc": ``,
		},
	}, {
		name: "no choices",
		chat: `{"model":"m","choices":[]}`,
		want: map[string]string{
			"output": `[{"type":"message","id":"msg_r1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"","annotations":[]}]}]`,
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fromChat([]byte(tc.chat), "r1", 1700)
			if err != nil {
				t.Fatal(err)
			}
			for key, want := range tc.want {
				m := member(t, got, key)
				if want == "" {
					if m != nil {
						t.Errorf("%s is %s, want it absent", key, m)
					}
					continue
				}
				if m == nil {
					t.Errorf("%s is missing from %s", key, got)
					continue
				}
				sameJSON(t, key, m, []byte(want))
			}
		})
	}
}

func TestFromChatRefusesWhatIsNotACompletion(t *testing.T) {
	for _, body := range []string{``, `[]`, `"x"`, `{"choices":`, `{"choices":{}}`} {
		_, err := fromChat([]byte(body), "r1", 1)
		if ae := apiError(t, err, http.StatusBadGateway); ae.Code == "" {
			t.Errorf("FromChat(%q): no code", body)
		}
	}
}

// TestEcho: the response object repeats the request's parameters, and the
// model it asked for rather than the engine's name for it.
func TestEcho(t *testing.T) {
	r, err := responses.Parse([]byte(`{"model":"qwen","input":"hi","instructions":"Be brief.","max_output_tokens":64,"temperature":0.2,"top_p":0.9,
		"tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":true}],"tool_choice":"required","parallel_tool_calls":false,
		"text":{"format":{"type":"json_object"},"verbosity":"low"},"reasoning":{"effort":"high","summary":"concise"},"truncation":"auto","user":"u","metadata":{"a":"b"},"store":true}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.FromChat([]byte(completion(`{"content":"{}"}`, `"stop"`)), "r2", 9)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"model": `"qwen"`, "instructions": `"Be brief."`, "max_output_tokens": `64`, "temperature": `0.2`, "top_p": `0.9`,
		"tools":       `[{"type":"function","name":"f","parameters":{"type":"object"},"strict":true}]`,
		"tool_choice": `"required"`, "parallel_tool_calls": `false`,
		"text":       `{"format":{"type":"json_object"},"verbosity":"low"}`,
		"reasoning":  `{"effort":"high","summary":"concise"}`,
		"truncation": `"auto"`, "user": `"u"`, "metadata": `{"a":"b"}`, "store": `false`,
		"previous_response_id": `null`, "background": `false`,
	}
	for key, w := range want {
		sameJSON(t, key, member(t, got, key), []byte(w))
	}

	// Without the request, the defaults, and the completion's model.
	got, err = fromChat([]byte(completion(`{"content":"{}"}`, `"stop"`)), "r2", 9)
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{
		"model": `"engine-model"`, "instructions": `null`, "max_output_tokens": `null`, "temperature": `null`, "top_p": `null`,
		"tools": `[]`, "tool_choice": `"auto"`, "parallel_tool_calls": `true`, "text": `{"format":{"type":"text"}}`,
		"reasoning": `{"effort":null,"summary":null}`, "truncation": `"disabled"`, "user": `null`, "metadata": `{}`,
	}
	for key, w := range defaults {
		sameJSON(t, key, member(t, got, key), []byte(w))
	}
}
