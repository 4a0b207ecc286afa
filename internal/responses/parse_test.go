package responses_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/responses"
)

func TestToChat(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{{
		name: "string input",
		body: req(`"input":"hi"`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	}, {
		name: "instructions lead as system",
		body: req(`"instructions":"Be brief.","input":"hi"`),
		want: `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]}`,
	}, {
		name: "empty instructions are none",
		body: req(`"instructions":""`, `"input":"hi"`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	}, {
		name: "roles, with developer as system",
		body: req(`"input":[{"role":"developer","content":"d"},{"type":"message","role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a"}]`),
		want: `{"model":"m","messages":[{"role":"system","content":"d"},{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a"}]}`,
	}, {
		name: "content parts",
		body: req(`"input":[
			{"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"` + tinyPNG + `","detail":"low"},{"type":"input_image","image_url":"https://x.test/a.png"}]},
			{"role":"assistant","content":[{"type":"output_text","text":"a cat","annotations":[],"logprobs":[]},{"type":"refusal","refusal":"no"}],"id":"msg_1","status":"completed"}]`),
		want: `{"model":"m","messages":[
			{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"` + tinyPNG + `","detail":"low"}},{"type":"image_url","image_url":{"url":"https://x.test/a.png"}}]},
			{"role":"assistant","content":[{"type":"text","text":"a cat"},{"type":"text","text":"no"}]}]}`,
	}, {
		name: "text file becomes text",
		body: req(`"input":[{"role":"user","content":[{"type":"input_file","filename":"a.txt","file_data":"` + b64("\uFEFFhello\nworld") + `"},{"type":"input_file","filename":"b.CSV","file_data":"data:text/csv;base64,` + b64("x,y") + `"}]}]`),
		want: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a.txt:\nhello\nworld"},{"type":"text","text":"b.CSV:\nx,y"}]}]}`,
	}, {
		name: "tool round trip: consecutive calls are one turn",
		body: req(`"input":[
			{"role":"user","content":"weather in Paris and Rome?"},
			{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"two calls"}]},
			{"type":"function_call","id":"fc_1","call_id":"call_a","name":"weather","arguments":"{\"city\":\"Paris\"}","status":"completed"},
			{"type":"function_call","id":"fc_2","call_id":"call_b","name":"weather","arguments":"{\"city\":\"Rome\"}","status":"completed"},
			{"type":"function_call_output","call_id":"call_a","output":"sunny"},
			{"type":"function_call_output","call_id":"call_b","output":[{"type":"input_text","text":"rain"}]}]`),
		want: `{"model":"m","messages":[
			{"role":"user","content":"weather in Paris and Rome?"},
			{"role":"assistant","tool_calls":[
				{"id":"call_a","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}},
				{"id":"call_b","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Rome\"}"}}]},
			{"role":"tool","tool_call_id":"call_a","content":"sunny"},
			{"role":"tool","tool_call_id":"call_b","content":[{"type":"text","text":"rain"}]}]}`,
	}, {
		name: "calls join the text before them, not after",
		body: req(`"input":[
			{"role":"user","content":"q"},
			{"role":"assistant","content":"Let me check."},
			{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
			{"type":"function_call_output","call_id":"c1","output":"r"},
			{"role":"assistant","content":"Done."},
			{"role":"user","content":"again"},
			{"type":"function_call","call_id":"c2","name":"f","arguments":""}]`),
		want: `{"model":"m","messages":[
			{"role":"user","content":"q"},
			{"role":"assistant","content":"Let me check.","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"r"},
			{"role":"assistant","content":"Done."},
			{"role":"user","content":"again"},
			{"role":"assistant","tool_calls":[{"id":"c2","type":"function","function":{"name":"f","arguments":""}}]}]}`,
	}, {
		name: "sampling and length",
		body: req(`"input":"hi"`, `"max_output_tokens":5.0e1`, `"temperature":0.5`, `"top_p":1`, `"parallel_tool_calls":false`, `"user":"u-1"`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":50,"temperature":0.5,"top_p":1,"parallel_tool_calls":false,"user":"u-1"}`,
	}, {
		name: "ignored members",
		body: req(`"input":"hi"`, `"store":true`, `"metadata":{"k":"v"}`, `"truncation":"auto"`, `"include":["reasoning.encrypted_content"]`,
			`"service_tier":"auto"`, `"max_tool_calls":3`, `"prompt_cache_key":"k"`, `"safety_identifier":"s"`, `"stream_options":{"include_obfuscation":false}`,
			`"top_logprobs":0`, `"background":false`, `"previous_response_id":null`, `"conversation":null`, `"instructions":null`, `"x_future":{"a":1}`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	}, {
		name: "function tools and a named choice",
		body: req(`"input":"hi"`, `"tools":[{"type":"function","name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true},{"type":"function","name":"noop","parameters":null,"strict":null,"description":null}]`,
			`"tool_choice":{"type":"function","name":"get_weather"}`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[
			{"type":"function","function":{"name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true}},
			{"type":"function","function":{"name":"noop"}}],
			"tool_choice":{"type":"function","function":{"name":"get_weather"}}}`,
	}, {
		name: "tool choice modes",
		body: req(`"input":"hi"`, `"tools":[{"type":"function","name":"f"}]`, `"tool_choice":"required"`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`,
	}, {
		name: "json_schema format",
		body: req(`"input":"hi"`, `"text":{"format":{"type":"json_schema","name":"person","description":"A person.","schema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"additionalProperties":false},"strict":true},"verbosity":"low"}`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"person","description":"A person.","schema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"additionalProperties":false},"strict":true}}}`,
	}, {
		name: "json_object format",
		body: req(`"input":"hi"`, `"text":{"format":{"type":"json_object"}}`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}}`,
	}, {
		name: "text format is the default",
		body: req(`"input":"hi"`, `"text":{"format":{"type":"text"}}`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	}, {
		name: "reasoning effort",
		body: req(`"input":"hi"`, `"reasoning":{"effort":"low","summary":"auto"}`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"reasoning_effort":"low"}`,
	}, {
		name: "xhigh effort is high",
		body: req(`"input":"hi"`, `"reasoning":{"effort":"xhigh"}`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"reasoning_effort":"high"}`,
	}, {
		name: "stream asks for usage",
		body: req(`"input":"hi"`, `"stream":true`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
	}, {
		name: "stream false is not sent",
		body: req(`"input":"hi"`, `"stream":false`),
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, model, stream, err := toChat([]byte(tc.body))
			if err != nil {
				t.Fatalf("ToChat: %v", err)
			}
			sameJSON(t, "chat body", body, []byte(tc.want))
			if model != "m" || stream != strings.Contains(tc.body, `"stream":true`) {
				t.Errorf("model %q stream %v", model, stream)
			}
			// The chat side must take what it is given.
			r, err := chat.Parse(body, chat.Options{AllowRemoteImages: true})
			if err != nil {
				t.Fatalf("chat.Parse refused %s: %v", body, err)
			}
			if r.Stream != stream || r.Model != model {
				t.Errorf("chat.Parse read model %q stream %v", r.Model, r.Stream)
			}
		})
	}
}

// TestOutputFedBack sends a response's output back as input, as the SDKs'
// multi-turn examples do, and finds the turn it was.
func TestOutputFedBack(t *testing.T) {
	out, err := fromChat([]byte(`{"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Checking.","reasoning_content":"hmm",
		"tool_calls":[{"id":"call_9","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},"finish_reason":"tool_calls"}]}`), "r1", 1)
	if err != nil {
		t.Fatal(err)
	}
	output := member(t, out, "output")
	items := strings.TrimSuffix(strings.TrimPrefix(string(output), "["), "]")
	body := req(`"input":[{"role":"user","content":"q"},` + items + `,{"type":"function_call_output","call_id":"call_9","output":"42"}]`)
	got, _, _, err := toChat([]byte(body))
	if err != nil {
		t.Fatalf("ToChat(%s): %v", body, err)
	}
	sameJSON(t, "chat body", got, []byte(`{"model":"m","messages":[
		{"role":"user","content":"q"},
		{"role":"assistant","content":[{"type":"text","text":"Checking."}],"tool_calls":[{"id":"call_9","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},
		{"role":"tool","tool_call_id":"call_9","content":"42"}]}`))
	if _, err := chat.Parse(got, chat.Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestToChatValidation(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{"nothing", `{}`, []string{"model:missing", "input:missing"}},
		{"empty model", `{"model":"","input":"x"}`, []string{"model:missing"}},
		{"body not an object", `[1]`, []string{"body:type_error"}},
		{"input a number", req(`"input":5`), []string{"input:type_error"}},
		{"input empty", req(`"input":[]`), []string{"input:value_error"}},
		{"only reasoning", req(`"input":[{"type":"reasoning","summary":[]}]`), []string{"input:value_error"}},
		{"item not an object", req(`"input":["hi"]`), []string{"input.0:type_error"}},
		{"bad role", req(`"input":[{"role":"tool","content":"x"}]`), []string{"input.0.role:enum"}},
		{"no role", req(`"input":[{"content":"x"}]`), []string{"input.0.role:missing"}},
		{"no content", req(`"input":[{"role":"user"}]`), []string{"input.0.content:missing"}},
		{"content a number", req(`"input":[{"role":"user","content":1}]`), []string{"input.0.content:type_error"}},
		{"user parts empty", req(`"input":[{"role":"user","content":[]}]`), []string{"input.0.content:value_error"}},
		{"unknown part", req(`"input":[{"role":"user","content":[{"type":"text","text":"x"}]}]`), []string{"input.0.content.0.type:enum"}},
		{"part without text", req(`"input":[{"role":"user","content":[{"type":"input_text"}]}]`), []string{"input.0.content.0.text:missing"}},
		{"image from the assistant", req(`"input":[{"role":"assistant","content":[{"type":"input_image","image_url":"` + tinyPNG + `"}]}]`), []string{"input.0.content.0.type:not_supported"}},
		{"audio", req(`"input":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]`), []string{"input.0.content.0.type:not_supported"}},
		{"image without url", req(`"input":[{"role":"user","content":[{"type":"input_image","detail":"auto"}]}]`), []string{"input.0.content.0.image_url:missing"}},
		{"image not base64", req(`"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,@@"}]}]`), []string{"input.0.content.0.image_url:value_error"}},
		{"image not an image", req(`"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:text/plain;base64,AAAA"}]}]`), []string{"input.0.content.0.image_url:value_error"}},
		{"image at the metadata service", req(`"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://169.254.169.254/x.png"}]}]`), []string{"input.0.content.0.image_url:not_allowed"}},
		{"image over http", req(`"input":[{"role":"user","content":[{"type":"input_image","image_url":"http://x.test/a.png"}]}]`), []string{"input.0.content.0.image_url:not_allowed"}},
		{"image by ftp", req(`"input":[{"role":"user","content":[{"type":"input_image","image_url":"ftp://x/a.png"}]}]`), []string{"input.0.content.0.image_url:value_error"}},
		{"bad detail", req(`"input":[{"role":"user","content":[{"type":"input_image","image_url":"` + tinyPNG + `","detail":"max"}]}]`), []string{"input.0.content.0.detail:enum"}},
		{"pdf file", req(`"input":[{"role":"user","content":[{"type":"input_file","filename":"a.pdf","file_data":"` + b64("x") + `"}]}]`), []string{"input.0.content.0.filename:not_supported"}},
		{"file not base64", req(`"input":[{"role":"user","content":[{"type":"input_file","filename":"a.txt","file_data":"%%"}]}]`), []string{"input.0.content.0.file_data:value_error"}},
		{"file not text", req(`"input":[{"role":"user","content":[{"type":"input_file","filename":"a.txt","file_data":"` + b64("\xff\xfe") + `"}]}]`), []string{"input.0.content.0.file_data:value_error"}},
		{"file by url", req(`"input":[{"role":"user","content":[{"type":"input_file","file_url":"https://x/a.txt"}]}]`), []string{"input.0.content.0.file_url:not_supported"}},
		{"file without data", req(`"input":[{"role":"user","content":[{"type":"input_file","filename":"a.txt"}]}]`), []string{"input.0.content.0.file_data:missing"}},
		{"call without anything", req(`"input":[{"type":"function_call"}]`), []string{"input.0.call_id:missing", "input.0.name:missing", "input.0.arguments:missing"}},
		{"call with empty id", req(`"input":[{"type":"function_call","call_id":"","name":"f","arguments":"{}"}]`), []string{"input.0.call_id:missing"}},
		{"output without output", req(`"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c"}]`), []string{"input.1.output:missing"}},
		{"output with an image", req(`"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"` + tinyPNG + `"}]}]`), []string{"input.1.output.0.type:not_supported"}},
		{"output that answers no call", req(`"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"d","output":"x"}]`), []string{"input.1.call_id:value_error"}},
		{"output before its call", req(`"input":[{"type":"function_call_output","call_id":"c","output":"x"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]`), []string{"input.0.call_id:value_error"}},
		{"hosted tool item", req(`"input":[{"type":"web_search_call","id":"ws_1","status":"completed"}]`), []string{"input.0.type:not_supported"}},
		{"item type not a string", req(`"input":[{"type":1}]`), []string{"input.0.type:type_error"}},
		{"temperature", req(`"input":"x"`, `"temperature":2.5`), []string{"temperature:out_of_range"}},
		{"temperature huge", req(`"input":"x"`, `"temperature":1e999`), []string{"temperature:out_of_range"}},
		{"top_p", req(`"input":"x"`, `"top_p":-0.1`), []string{"top_p:out_of_range"}},
		{"top_p a string", req(`"input":"x"`, `"top_p":"1"`), []string{"top_p:type_error"}},
		{"max tokens zero", req(`"input":"x"`, `"max_output_tokens":0`), []string{"max_output_tokens:out_of_range"}},
		{"max tokens fraction", req(`"input":"x"`, `"max_output_tokens":1.5`), []string{"max_output_tokens:type_error"}},
		{"max tokens huge", req(`"input":"x"`, `"max_output_tokens":1e30`), []string{"max_output_tokens:out_of_range"}},
		{"tool name", req(`"input":"x"`, `"tools":[{"type":"function","name":"a b"}]`), []string{"tools.0.name:value_error"}},
		{"tool without name", req(`"input":"x"`, `"tools":[{"type":"function"}]`), []string{"tools.0.name:missing"}},
		{"tool names alike", req(`"input":"x"`, `"tools":[{"type":"function","name":"f"},{"type":"function","name":"f"}]`), []string{"tools.1.name:value_error"}},
		{"tool_choice required without tools", req(`"input":"x"`, `"tool_choice":"required"`), []string{"tool_choice:value_error"}},
		{"tool_choice naming no function", req(`"input":"x"`, `"tools":[{"type":"function","name":"f"}]`, `"tool_choice":{"type":"function","name":"g"}`),
			[]string{"tool_choice.name:value_error"}},
		{"tool parameters", req(`"input":"x"`, `"tools":[{"type":"function","name":"f","parameters":"{}"}]`), []string{"tools.0.parameters:type_error"}},
		{"tool without type", req(`"input":"x"`, `"tools":[{"name":"f"}]`), []string{"tools.0.type:missing"}},
		{"tools not an array", req(`"input":"x"`, `"tools":{}`), []string{"tools:type_error"}},
		{"tool choice word", req(`"input":"x"`, `"tool_choice":"any"`), []string{"tool_choice:enum"}},
		{"tool choice unnamed", req(`"input":"x"`, `"tool_choice":{"type":"function"}`), []string{"tool_choice.name:missing"}},
		{"tool choice allowed_tools", req(`"input":"x"`, `"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}`), []string{"tool_choice.type:not_supported"}},
		{"tool choice number", req(`"input":"x"`, `"tool_choice":1`), []string{"tool_choice:type_error"}},
		{"format type", req(`"input":"x"`, `"text":{"format":{"type":"xml"}}`), []string{"text.format.type:enum"}},
		{"schema incomplete", req(`"input":"x"`, `"text":{"format":{"type":"json_schema"}}`), []string{"text.format.name:missing", "text.format.schema:missing"}},
		{"schema not an object", req(`"input":"x"`, `"text":{"format":{"type":"json_schema","name":"n","schema":true}}`), []string{"text.format.schema:type_error"}},
		{"text not an object", req(`"input":"x"`, `"text":"json"`), []string{"text:type_error"}},
		{"effort", req(`"input":"x"`, `"reasoning":{"effort":"max"}`), []string{"reasoning.effort:enum"}},
		{"summary", req(`"input":"x"`, `"reasoning":{"summary":"long"}`), []string{"reasoning.summary:enum"}},
		{"truncation", req(`"input":"x"`, `"truncation":"middle"`), []string{"truncation:enum"}},
		{"logprobs", req(`"input":"x"`, `"top_logprobs":5`), []string{"top_logprobs:not_supported"}},
		{"stream", req(`"input":"x"`, `"stream":"yes"`), []string{"stream:type_error"}},
		{"store", req(`"input":"x"`, `"store":"no"`), []string{"store:type_error"}},
		{"metadata", req(`"input":"x"`, `"metadata":[]`), []string{"metadata:type_error"}},
		{"user", req(`"input":"x"`, `"user":1`), []string{"user:type_error"}},
		{"instructions", req(`"input":"x"`, `"instructions":["a"]`), []string{"instructions:type_error"}},
		{"all at once, in order", `{"model":1,"input":[{"role":"user","content":[]},{"type":"function_call","call_id":"c","name":"f"}],"temperature":-1,"tools":[{"type":"function","name":""}],"reasoning":{"effort":"max"}}`,
			[]string{"model:type_error", "input.0.content:value_error", "input.1.arguments:missing", "temperature:out_of_range", "tools.0.name:value_error", "reasoning.effort:enum"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := toChat([]byte(tc.body))
			ae := apiError(t, err, http.StatusUnprocessableEntity)
			if got := fields(ae); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("fields %q, want %q (%s)", got, tc.want, ae.Message)
			}
			for _, f := range ae.Fields {
				if f.Message == "" {
					t.Errorf("%s has no message", f.Field)
				}
			}
		})
	}
}

func TestToChatRefusals(t *testing.T) {
	tests := []struct {
		name, body, param, says string
	}{
		{"previous response", req(`"input":"x"`, `"previous_response_id":"resp_1"`), "previous_response_id", "stateless"},
		{"conversation", req(`"input":"x"`, `"conversation":"conv_1"`), "conversation", "stateless"},
		{"conversation object", req(`"input":"x"`, `"conversation":{"id":"conv_1"}`), "conversation", "stateless"},
		{"background", req(`"input":"x"`, `"background":true`), "background", "stateless"},
		{"stored prompt", req(`"prompt":{"id":"pmpt_1"}`), "prompt", "stateless"},
		{"item reference", req(`"input":[{"role":"user","content":"x"},{"type":"item_reference","id":"msg_1"}]`), "input.1", "stateless"},
		{"image by file id", req(`"input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]`), "input.0.content.0.file_id", "stateless"},
		{"file by file id", req(`"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]`), "input.0.content.0.file_id", "stateless"},
		{"web search tool", req(`"input":"x"`, `"tools":[{"type":"function","name":"f"},{"type":"web_search"}]`), "tools.1.type", "not served"},
		{"file search tool", req(`"input":"x"`, `"tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]`), "tools.0.type", "not served"},
		{"hosted tool choice", req(`"input":"x"`, `"tool_choice":{"type":"web_search_preview"}`), "tool_choice.type", "not served"},
		{"a refusal wins over field errors", req(`"input":5`, `"temperature":9`, `"previous_response_id":"resp_1"`), "previous_response_id", "stateless"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := toChat([]byte(tc.body))
			ae := apiError(t, err, http.StatusBadRequest)
			if ae.Param != tc.param || !strings.Contains(ae.Message, tc.says) {
				t.Errorf("param %q message %q; want param %q and %q", ae.Param, ae.Message, tc.param, tc.says)
			}
		})
	}
}

// TestStateless: the refusal the server gives the endpoints that read
// stored responses is the one requests get.
func TestStateless(t *testing.T) {
	ae := apiError(t, responses.Stateless("retrieving a response"), http.StatusBadRequest)
	if !strings.HasPrefix(ae.Message, "retrieving a response is not supported: this gateway's Responses API is stateless") {
		t.Errorf("message %q", ae.Message)
	}
}

func TestToChatMalformed(t *testing.T) {
	for body, says := range map[string]string{
		"":              "empty",
		"  \n":          "empty",
		`{"model":`:     "unexpected end",
		`{"model":"m"x`: "at byte",
		`{"a":1}{}`:     "Malformed",
	} {
		_, _, _, err := toChat([]byte(body))
		ae := apiError(t, err, http.StatusBadRequest)
		if !strings.Contains(ae.Message, says) {
			t.Errorf("ToChat(%q): %q, want it to say %q", body, ae.Message, says)
		}
	}
}

func TestChatError(t *testing.T) {
	body := req(`"instructions":"sys"`, `"tools":[{"type":"function","name":"f"}]`, `"input":[
		{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"https://x.test/a.png"}]},
		{"role":"assistant","content":"t"},
		{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
		{"type":"reasoning","summary":[]},
		{"type":"function_call","call_id":"c2","name":"f","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":"x"}]`)
	r, err := responses.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	// The organisation's setting is the chat side's to apply.
	_, err = chat.Parse(r.Chat(), chat.Options{})
	ae := apiError(t, r.ChatError(err), http.StatusUnprocessableEntity)
	if got := fields(ae); !reflect.DeepEqual(got, []string{"input.0.content.1.image_url:not_allowed"}) {
		t.Fatalf("fields %q", got)
	}
	if !strings.Contains(ae.Message, "input.0.content.1.image_url") {
		t.Errorf("message %q", ae.Message)
	}

	paths := map[string]string{
		"messages":                                   "input",
		"messages.0.content":                         "instructions",
		"messages.1":                                 "input.0",
		"messages.1.content.0.text":                  "input.0.content.0.text",
		"messages.2.content":                         "input.1.content",
		"messages.2.tool_calls.0.id":                 "input.2.call_id",
		"messages.2.tool_calls.1.function.name":      "input.4.name",
		"messages.2.tool_calls.1.function.arguments": "input.4.arguments",
		"messages.3.tool_call_id":                    "input.5.call_id",
		"messages.3.content":                         "input.5.output",
		"messages.9.content":                         "messages.9.content",
		"max_completion_tokens":                      "max_output_tokens",
		"reasoning_effort":                           "reasoning.effort",
		"response_format.json_schema.name":           "text.format.name",
		"tools.0.function.name":                      "tools.0.name",
		"tool_choice.function.name":                  "tool_choice.name",
		"temperature":                                "temperature",
	}
	for from, want := range paths {
		err := r.ChatError(api.Invalid(api.FieldError{Field: from, Type: api.FieldInvalid, Message: "bad"}))
		if got := apiError(t, err, http.StatusUnprocessableEntity).Fields[0].Field; got != want {
			t.Errorf("%s became %s, want %s", from, got, want)
		}
	}
	tooLong := r.ChatError(&api.Error{Kind: api.KindInvalidRequest, Type: chat.TypeContextLengthExceeded, Param: "messages", Message: "too long"})
	if ae := apiError(t, tooLong, http.StatusBadRequest); ae.Param != "input" || ae.Type != chat.TypeContextLengthExceeded {
		t.Errorf("context error became %+v", ae)
	}
	if err := r.ChatError(http.ErrBodyNotAllowed); err != http.ErrBodyNotAllowed {
		t.Errorf("a plain error became %v", err)
	}
}

// TestRequestKeepsNoPartOfTheBody: the body is read as views of it, and
// the server reuses its buffer once the handler returns, so what the
// request keeps to echo must be copies: a body overwritten after Parse
// changes neither the chat body nor the response.
func TestRequestKeepsNoPartOfTheBody(t *testing.T) {
	body := []byte(req(`"instructions":"Be brief."`,
		`"input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"x"}]`,
		`"max_output_tokens":64`, `"temperature":0.5`, `"top_p":0.9`, `"parallel_tool_calls":false`, `"user":"u"`, `"truncation":"auto"`, `"metadata":{"k":"v"}`,
		`"tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object"},"strict":true}]`, `"tool_choice":{"type":"function","name":"f"}`,
		`"text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}},"verbosity":"low"}`, `"reasoning":{"effort":"high","summary":"auto"}`))
	const completion = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"{}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	r, err := responses.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	chatBefore := string(r.Chat())
	respBefore, err := r.FromChat([]byte(completion), "resp_1", 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'x'
	}
	if got := string(r.Chat()); got != chatBefore {
		t.Errorf("chat body changed with the request's:\n%s\nwas\n%s", got, chatBefore)
	}
	respAfter, err := r.FromChat([]byte(completion), "resp_1", 1)
	if err != nil || string(respAfter) != string(respBefore) {
		t.Errorf("response changed with the request's body:\n%s (%v)\nwas\n%s", respAfter, err, respBefore)
	}
}
