package ollama

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
)

// TestChatTranslation sends OpenAI requests through the adapter and checks
// what the fake Ollama received: each want maps a top-level /api/chat
// field to its expected JSON ("-" for absent).
func TestChatTranslation(t *testing.T) {
	notes := base64.StdEncoding.EncodeToString([]byte("a,b\n1,2"))
	tests := []struct {
		name string
		body string
		want map[string]string
	}{
		{
			name: "minimal",
			body: `{"model":"plain","messages":[{"role":"user","content":"hi"}]}`,
			want: map[string]string{
				"model":    `"plain"`,
				"messages": `[{"role":"user","content":"hi"}]`,
				"stream":   `false`,
				"options":  "-", "think": "-", "format": "-", "tools": "-",
			},
		},
		{
			name: "sampling options",
			body: `{"model":"plain","messages":[{"role":"user","content":"hi"}],
				"temperature":0.2,"top_p":0.9,"top_k":40,"min_p":0.05,"seed":7,"stop":"END",
				"max_tokens":100,"frequency_penalty":0.1,"presence_penalty":0.2,"repeat_penalty":1.1,
				"repeat_last_n":64,"mirostat":2,"mirostat_tau":5.0,"mirostat_eta":0.1,"user":"u1"}`,
			want: map[string]string{"options": `{"temperature":0.2,"top_p":0.9,"top_k":40,"min_p":0.05,"seed":7,
				"stop":["END"],"num_predict":100,"frequency_penalty":0.1,"presence_penalty":0.2,"repeat_penalty":1.1,
				"repeat_last_n":64,"mirostat":2,"mirostat_tau":5,"mirostat_eta":0.1}`},
		},
		{
			name: "max_completion_tokens wins",
			body: `{"model":"plain","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"max_completion_tokens":50,"stop":["a","b"],"temperature":null}`,
			want: map[string]string{"options": `{"num_predict":50,"stop":["a","b"]}`},
		},
		{
			name: "max_tokens alone",
			body: `{"model":"plain","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`,
			want: map[string]string{"options": `{"num_predict":100}`},
		},
		{"effort none", `{"model":"plain","messages":[],"reasoning_effort":"none"}`, map[string]string{"think": `false`}},
		{"effort minimal", `{"model":"plain","messages":[],"reasoning_effort":"minimal"}`, map[string]string{"think": `false`}},
		{"effort high", `{"model":"plain","messages":[],"reasoning_effort":"high"}`, map[string]string{"think": `"high"`}},
		{"effort xhigh", `{"model":"plain","messages":[],"reasoning_effort":"xhigh"}`, map[string]string{"think": `"high"`}},
		{"reasoning.effort", `{"model":"plain","messages":[],"reasoning":{"effort":"low"}}`, map[string]string{"think": `"low"`}},
		{"reasoning budget 0", `{"model":"plain","messages":[],"reasoning":{"max_tokens":0}}`, map[string]string{"think": `false`}},
		{"reasoning budget 500", `{"model":"plain","messages":[],"reasoning":{"max_tokens":500}}`, map[string]string{"think": `-`}},
		{"enable_thinking", `{"model":"plain","messages":[],"enable_thinking":true}`, map[string]string{"think": `true`}},
		{"chat_template_kwargs", `{"model":"plain","messages":[],"chat_template_kwargs":{"enable_thinking":false}}`, map[string]string{"think": `false`}},
		{"off beats an effort", `{"model":"plain","messages":[],"reasoning_effort":"high","enable_thinking":false}`, map[string]string{"think": `false`}},
		{"zero budget beats an effort", `{"model":"plain","messages":[],"reasoning":{"max_tokens":0,"effort":"low"}}`, map[string]string{"think": `false`}},
		{"effort with thinking on", `{"model":"plain","messages":[],"reasoning_effort":"low","enable_thinking":true}`, map[string]string{"think": `"low"`}},
		{"json_object", `{"model":"plain","messages":[],"response_format":{"type":"json_object"}}`, map[string]string{"format": `"json"`}},
		{
			"json_schema",
			`{"model":"plain","messages":[],"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}}}}}}`,
			map[string]string{"format": `{"type":"object","properties":{"a":{"type":"integer"}}}`},
		},
		{"text format", `{"model":"plain","messages":[],"response_format":{"type":"text"}}`, map[string]string{"format": `-`}},
		{
			name: "images and text parts",
			body: `{"model":"plain","messages":[{"role":"user","content":[
				{"type":"text","text":"What is this?"},
				{"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8=","detail":"low"}},
				{"type":"text","text":"Be brief."},
				{"type":"image_url","image_url":"data:image/jpeg;base64,d29ybGQ="}]}]}`,
			want: map[string]string{"messages": `[{"role":"user","content":"What is this?\nBe brief.","images":["aGVsbG8=","d29ybGQ="]}]`},
		},
		{
			name: "text file",
			body: `{"model":"plain","messages":[{"role":"user","content":[
				{"type":"text","text":"Sum the column."},
				{"type":"file","file":{"filename":"notes.csv","file_data":"` + notes + `"}},
				{"type":"file","file":{"file_data":"data:text/plain;base64,` + base64.StdEncoding.EncodeToString([]byte("plain")) + `"}}]}]}`,
			want: map[string]string{"messages": `[{"role":"user","content":"Sum the column.\nnotes.csv:\na,b\n1,2\nplain"}]`},
		},
		{
			name: "tool round trip",
			body: `{"model":"plain","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
				"messages":[
				{"role":"developer","content":"Be terse."},
				{"role":"user","content":"Weather in Paris?"},
				{"role":"assistant","content":null,"reasoning_content":"need a tool","tool_calls":[
					{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},
					{"id":"call_2","type":"function","function":{"name":"get_time","arguments":""}}]},
				{"role":"tool","tool_call_id":"call_1","content":"18C"},
				{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"12:00"}]}]}`,
			want: map[string]string{
				"tools": `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`,
				"messages": `[{"role":"system","content":"Be terse."},{"role":"user","content":"Weather in Paris?"},
					{"role":"assistant","content":"","thinking":"need a tool","tool_calls":[
						{"id":"call_1","function":{"name":"get_weather","arguments":{"city":"Paris"}}},
						{"id":"call_2","function":{"name":"get_time","arguments":{}}}]},
					{"role":"tool","content":"18C","tool_name":"get_weather","tool_call_id":"call_1"},
					{"role":"tool","content":"12:00","tool_name":"get_time","tool_call_id":"call_2"}]`,
			},
		},
		{
			name: "tool_choice none drops tools",
			body: `{"model":"plain","messages":[],"tool_choice":"none","tools":[{"type":"function","function":{"name":"f"}}]}`,
			want: map[string]string{"tools": `-`},
		},
	}
	f := newFake(t)
	e := f.engine(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.Serve(context.Background(), chatReq("plain", false, tt.body), &recordSink{})
			if r.Status != 200 {
				t.Fatalf("status %d: %+v", r.Status, r.Error)
			}
			got := f.last(t, "/api/chat")
			for field, want := range tt.want {
				v, ok := got[field]
				switch {
				case want == "-" && ok:
					t.Errorf("%s = %s, want absent", field, jsonOf(t, v))
				case want != "-" && !ok:
					t.Errorf("%s absent, want %s", field, want)
				case want != "-" && jsonOf(t, v) != canon(t, want):
					t.Errorf("%s:\n got %s\nwant %s", field, jsonOf(t, v), canon(t, want))
				}
			}
		})
	}
}

// TestChatTranslationStreamFlag checks that stream follows the request.
func TestChatTranslationStreamFlag(t *testing.T) {
	f := newFake(t)
	e := f.engine(t)
	e.Serve(context.Background(), chatReq("plain", true, ""), &recordSink{})
	if got := f.last(t, "/api/chat")["stream"]; got != true {
		t.Fatalf("stream = %v, want true", got)
	}
}

// TestChatTranslationRefused covers requests Ollama cannot take: they are
// refused with 400 before anything reaches Ollama.
func TestChatTranslationRefused(t *testing.T) {
	pdf := base64.StdEncoding.EncodeToString([]byte("%PDF-1.7"))
	tests := []struct {
		name, body, msg string
	}{
		{"image URL", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}`, "Ollama needs images inline"},
		{"non-image data URL", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:text/plain;base64,aGk="}}]}]}`, "data:image/"},
		{"pdf file", `{"messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf","file_data":"` + pdf + `"}}]}]}`, "only text files"},
		{"file id", `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`, "file_id"},
		{"bad base64", `{"messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.txt","file_data":"!!"}}]}]}`, "not base64"},
		{"audio part", `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]}`, `"input_audio"`},
		{"bad arguments", `{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"not json"}}]}]}`, "JSON object"},
		{"array arguments", `{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, "JSON object"},
		{"bad role", `{"messages":[{"role":"wizard","content":"x"}]}`, "unsupported role"},
		{"bad stop", `{"messages":[],"stop":5}`, "stop"},
		{"not json", `{`, "invalid chat request"},
		{"several choices", `{"messages":[{"role":"user","content":"x"}],"n":2}`, "one choice a request"},
	}
	f := newFake(t)
	e := f.engine(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.Serve(context.Background(), chatReq("plain", false, tt.body), &recordSink{})
			if r.Status != 400 || r.Error.Type != "invalid_request_error" || !strings.Contains(r.Error.Message, tt.msg) {
				t.Fatalf("got %d %+v, want 400 mentioning %q", r.Status, r.Error, tt.msg)
			}
		})
	}
	if n := f.count("/api/chat"); n != 0 {
		t.Fatalf("%d refused requests reached Ollama", n)
	}
}

func TestChatTranslationOneChoice(t *testing.T) {
	for _, n := range []string{`1`, `1.0`, `null`} {
		if _, err := translateChat([]byte(`{"messages":[{"role":"user","content":"x"}],"n":`+n+`}`), "m", false); err != nil {
			t.Errorf("n %s: %v", n, err)
		}
	}
}
