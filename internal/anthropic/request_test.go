package anthropic

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
)

var (
	png     = b64("\x89PNG\r\n\x1a\nfake")
	pngURL  = "data:image/png;base64," + png
	imgB64  = `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}}`
	imgURL  = `{"type":"image","source":{"type":"url","url":"https://x.test/a.png"}}`
	toolUse = `{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris","days":[1,2]}}`
)

// TestToChat covers every mapping: each body must become exactly the given
// chat body, which the chat parser must accept.
func TestToChat(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		want   string
		stream bool
	}{
		{"minimal", req(userHi),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, false},
		{"max_tokens as 5.0e1", `{"model":"m","max_tokens":5.0e1,"messages":[` + userHi + `]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":50}`, false},
		{"system string", req(userHi, `"system":"be brief"`),
			`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":100}`, false},
		{"system blocks", req(userHi, `"system":[{"type":"text","text":"one","cache_control":{"type":"ephemeral"}},{"type":"text","text":"two"}]`),
			`{"model":"m","messages":[{"role":"system","content":"one\n\ntwo"},{"role":"user","content":"hi"}],"max_tokens":100}`, false},
		{"empty system", req(userHi, `"system":""`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, false},
		{"sampling and stops", req(userHi, `"stop_sequences":["END","\n\nHuman:"]`, `"temperature":0.5`, `"top_p":0.9`, `"top_k":40.0`, `"metadata":{"user_id":"u-1"}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"stop":["END","\n\nHuman:"],"temperature":0.5,"top_p":0.9,"top_k":40,"user":"u-1"}`, false},
		{"metadata without user", req(userHi, `"metadata":{"user_id":null}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, false},
		{"stream", req(userHi, `"stream":true`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"stream false", req(userHi, `"stream":false`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, false},
		{"unknown members ignored", req(userHi, `"service_tier":"auto"`, `"container":"c"`, `"Model":"x"`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, false},
		{"no MCP servers", req(userHi, `"mcp_servers":[]`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, false},
		{"MCP servers null", req(userHi, `"mcp_servers":null`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, false},

		// content blocks
		{"text blocks", req(user(`{"type":"text","text":"a"}`, `{"type":"text","text":"<b>&","cache_control":{"type":"ephemeral"}}`)),
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"<b>&"}]}],"max_tokens":100}`, false},
		{"one text block is a string", req(user(`{"type":"text","text":"a"}`)),
			`{"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":100}`, false},
		{"images", req(user(`{"type":"text","text":"what?"}`, imgB64, imgURL)),
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":"` + pngURL + `"}},{"type":"image_url","image_url":{"url":"https://x.test/a.png"}}]}],"max_tokens":100}`, false},
		{"image base64 with line breaks", req(user(`{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"` + png[:8] + `\r\n` + png[8:] + `"}}`)),
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + png + `"}}]}],"max_tokens":100}`, false},
		{"text document", req(user(`{"type":"document","title":"Notes","context":"from a meeting","source":{"type":"text","media_type":"text/plain","data":"line 1\nline 2"}}`, `{"type":"text","text":"summarise"}`)),
			`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"Notes.txt","file_data":"` + b64("line 1\nline 2") + `"}},{"type":"text","text":"from a meeting"},{"type":"text","text":"summarise"}]}],"max_tokens":100}`, false},
		{"base64 text document", req(user(`{"type":"document","title":"data.csv","source":{"type":"base64","media_type":"text/plain","data":"` + b64("a,b\n1,2") + `"}}`)),
			`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"data.csv","file_data":"` + b64("a,b\n1,2") + `"}}]}],"max_tokens":100}`, false},
		{"untitled document", req(user(`{"type":"document","source":{"type":"text","data":"x"}}`)),
			`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"document.txt","file_data":"` + b64("x") + `"}}]}],"max_tokens":100}`, false},
		{"content document", req(user(`{"type":"document","source":{"type":"content","content":[{"type":"text","text":"p1"},` + imgB64 + `]}}`)),
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"p1"},{"type":"image_url","image_url":{"url":"` + pngURL + `"}}]}],"max_tokens":100}`, false},
		{"content document string", req(user(`{"type":"document","source":{"type":"content","content":"p1"}}`)),
			`{"model":"m","messages":[{"role":"user","content":"p1"}],"max_tokens":100}`, false},

		// tool round trip
		{"tool round trip", req(userHi,
			assistant(`{"type":"thinking","thinking":"hmm","signature":"sig"}`, `{"type":"redacted_thinking","data":"xx"}`, `{"type":"text","text":"Let me check."}`, toolUse, `{"type":"tool_use","id":"toolu_2","name":"now","input":{}}`),
			user(`{"type":"text","text":"also this"}`, `{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}`,
				`{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"12:00"},{"type":"text","text":"UTC"}],"is_error":false}`)),
			`{"model":"m","messages":[{"role":"user","content":"hi"},
			{"role":"assistant","content":"Let me check.","tool_calls":[
				{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":[1,2]}"}},
				{"id":"toolu_2","type":"function","function":{"name":"now","arguments":"{}"}}]},
			{"role":"tool","content":"sunny","tool_call_id":"toolu_1"},
			{"role":"tool","content":"12:00\nUTC","tool_call_id":"toolu_2"},
			{"role":"user","content":"also this"}],"max_tokens":100}`, false},
		{"tool call only", req(userHi, assistant(toolUse), user(`{"type":"tool_result","tool_use_id":"toolu_1"}`)),
			`{"model":"m","messages":[{"role":"user","content":"hi"},
			{"role":"assistant","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":[1,2]}"}}]},
			{"role":"tool","content":"","tool_call_id":"toolu_1"}],"max_tokens":100}`, false},
		{"tool error", req(userHi, assistant(toolUse), user(`{"type":"tool_result","tool_use_id":"toolu_1","content":"no such city","is_error":true}`)),
			`{"model":"m","messages":[{"role":"user","content":"hi"},
			{"role":"assistant","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":[1,2]}"}}]},
			{"role":"tool","content":"Error: no such city","tool_call_id":"toolu_1"}],"max_tokens":100}`, false},
		{"tool result images", req(userHi, assistant(toolUse), user(`{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"chart"},`+imgB64+`]}`, `{"type":"text","text":"and?"}`)),
			`{"model":"m","messages":[{"role":"user","content":"hi"},
			{"role":"assistant","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":[1,2]}"}}]},
			{"role":"tool","content":"chart\n[The image this tool returned follows in the next message.]","tool_call_id":"toolu_1"},
			{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + pngURL + `"}},{"type":"text","text":"and?"}]}],"max_tokens":100}`, false},
		{"tool result two images only", req(userHi, assistant(toolUse), user(`{"type":"tool_result","tool_use_id":"toolu_1","content":[`+imgB64+`,`+imgURL+`]}`)),
			`{"model":"m","messages":[{"role":"user","content":"hi"},
			{"role":"assistant","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":[1,2]}"}}]},
			{"role":"tool","content":"[The 2 images this tool returned follow in the next message.]","tool_call_id":"toolu_1"},
			{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + pngURL + `"}},{"type":"image_url","image_url":{"url":"https://x.test/a.png"}}]}],"max_tokens":100}`, false},
		{"assistant all thinking", req(userHi, assistant(`{"type":"thinking","thinking":"hmm","signature":""}`), userHi),
			`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":""},{"role":"user","content":"hi"}],"max_tokens":100}`, false},
		{"assistant empty and prefill", req(userHi, `{"role":"assistant","content":[]}`, `{"role":"assistant","content":"The answer is"}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":""},{"role":"assistant","content":"The answer is"}],"max_tokens":100}`, false},
		{"assistant two texts", req(userHi, assistant(`{"type":"text","text":"a"}`, `{"type":"text","text":"b"}`)),
			`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_tokens":100}`, false},

		// tools and tool_choice
		{"tools", req(userHi, `"tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}},"cache_control":{"type":"ephemeral"}},{"type":"custom","name":"now","input_schema":{"type":"object"}}]`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"tools":[
			{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
			{"type":"function","function":{"name":"now","parameters":{"type":"object"}}}]}`, false},
		{"tool_choice auto", req(userHi, `"tool_choice":{"type":"auto"}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"tool_choice":"auto"}`, false},
		{"tool_choice any serial", req(userHi, `"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]`, `"tool_choice":{"type":"any","disable_parallel_tool_use":true}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"tool_choice":"required","parallel_tool_calls":false}`, false},
		{"tool_choice tool", req(userHi, `"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]`, `"tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":false}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"get_weather"}}}`, false},
		{"tool_choice none", req(userHi, `"tool_choice":{"type":"none","disable_parallel_tool_use":true}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"tool_choice":"none"}`, false},

		// thinking and output_config
		{"thinking low", req(userHi, `"thinking":{"type":"enabled","budget_tokens":1024}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"reasoning_effort":"low","reasoning":{"max_tokens":1024}}`, false},
		{"thinking medium", req(userHi, `"thinking":{"type":"enabled","budget_tokens":10000}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"reasoning_effort":"medium","reasoning":{"max_tokens":10000}}`, false},
		{"thinking high", req(userHi, `"thinking":{"type":"enabled","budget_tokens":31999}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"reasoning_effort":"high","reasoning":{"max_tokens":31999}}`, false},
		{"thinking with effort", req(userHi, `"thinking":{"type":"enabled","budget_tokens":31999}`, `"output_config":{"effort":"low"}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"reasoning_effort":"low","reasoning":{"max_tokens":31999}}`, false},
		{"thinking adaptive", req(userHi, `"thinking":{"type":"adaptive","display":"summarized"}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"reasoning_effort":"high"}`, false},
		{"thinking adaptive effort", req(userHi, `"thinking":{"type":"adaptive"}`, `"output_config":{"effort":"medium"}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"reasoning_effort":"medium"}`, false},
		{"thinking disabled", req(userHi, `"thinking":{"type":"disabled"}`, `"output_config":{"effort":"high"}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"reasoning_effort":"none"}`, false},
		{"effort alone", req(userHi, `"output_config":{"effort":"max"}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"reasoning_effort":"high"}`, false},
		{"output format", req(userHi, `"output_config":{"format":{"type":"json_schema","schema":{"type":"object"}}}`),
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"response_format":{"type":"json_schema","json_schema":{"name":"output","schema":{"type":"object"},"strict":true}}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, model, stream, err := ToChat([]byte(tt.body), remoteOK)
			if err != nil {
				t.Fatalf("ToChat: %v", err)
			}
			if !jsonEqual(t, got, []byte(tt.want)) {
				t.Fatalf("ToChat =\n%s\nwant\n%s", got, tt.want)
			}
			if model != "m" || stream != tt.stream {
				t.Fatalf("model, stream = %q, %v", model, stream)
			}
			r, err := chat.Parse(got, chat.Options{AllowRemoteImages: true})
			if err != nil {
				t.Fatalf("chat.Parse(%s) = %v", got, err)
			}
			if r.Model != model || r.Stream != stream {
				t.Fatalf("chat reads model %q stream %v", r.Model, r.Stream)
			}
			if r.UserMaxTokens < 1 {
				t.Fatalf("chat reads no max_tokens")
			}
		})
	}
}

// TestToChatKeepsHTML: text goes to engines, not browsers, so <, > and &
// are not escaped.
func TestToChatKeepsHTML(t *testing.T) {
	got, _, _, err := ToChat([]byte(req(`{"role":"user","content":"a<b && c>d"}`)), remoteOK)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `"a<b && c>d"`) {
		t.Fatalf("ToChat = %s", got)
	}
}

// TestToChatRemoteImage: an organisation that does not allow image URLs
// has them refused at the field the client sent, in a system prompt's
// wake and inside a tool result alike, not at the chat form's.
func TestToChatRemoteImage(t *testing.T) {
	if _, _, _, err := ToChat([]byte(req(user(imgURL))), remoteOK); err != nil {
		t.Fatal(err)
	}
	for body, field := range map[string]string{
		req(`{"role":"user","content":"a"}`, `{"role":"assistant","content":"b"}`, user(`{"type":"text","text":"x"}`, imgURL)): "messages.2.content.1.source.url",
		`{"model":"m","max_tokens":9,"system":"be brief","messages":[` + user(imgURL) + `]}`:                                   "messages.0.content.0.source.url",
		req(userHi, assistant(toolUse), user(`{"type":"tool_result","tool_use_id":"toolu_1","content":[`+imgURL+`]}`)):         "messages.2.content.0.content.0.source.url",
	} {
		_, _, _, err := ToChat([]byte(body), Options{})
		ae := apiError(t, err)
		if f := fieldsOf(ae); len(f) != 1 || f[0].typ != api.FieldNotAllowed || f[0].field != field {
			t.Errorf("%s: %v, want %s", body, ae.Fields, field)
		}
	}
}

func TestToChatMalformed(t *testing.T) {
	for _, b := range []string{``, "  \n", `{"model":`, `{model:1}`, `{"model":"m"}{}`, `{"a":1,}`} {
		t.Run(b, func(t *testing.T) {
			_, _, _, err := ToChat([]byte(b), remoteOK)
			ae := apiError(t, err)
			if ae.HTTPStatus() != http.StatusBadRequest || ae.Message == "" || len(ae.Fields) != 0 {
				t.Fatalf("err = %+v, want a 400", ae)
			}
			if strings.TrimSpace(b) != "" && !strings.HasPrefix(ae.Message, "Malformed JSON") {
				t.Fatalf("message = %q", ae.Message)
			}
		})
	}
}

// TestToChatFieldErrors: each body fails with exactly these field errors,
// in order, in one 422.
func TestToChatFieldErrors(t *testing.T) {
	bigText := strings.Repeat("x", chat.MaxFileBytes+1)
	tooManyStops := `"stop_sequences":["` + strings.Repeat(`s","`, 16) + `s"]`
	tests := []struct {
		name   string
		body   string
		fields []fe
	}{
		{"array body", `[1]`, []fe{{"body", api.FieldWrongType}}},
		{"null body", `null`, []fe{{"body", api.FieldWrongType}}},

		{"model missing", `{"max_tokens":1,"messages":[` + userHi + `]}`, []fe{{"model", api.FieldMissing}}},
		{"model empty", `{"model":"","max_tokens":1,"messages":[` + userHi + `]}`, []fe{{"model", api.FieldMissing}}},
		{"model number", `{"model":1,"max_tokens":1,"messages":[` + userHi + `]}`, []fe{{"model", api.FieldWrongType}}},
		{"max_tokens missing", `{"model":"m","messages":[` + userHi + `]}`, []fe{{"max_tokens", api.FieldMissing}}},
		{"max_tokens zero", `{"model":"m","max_tokens":0,"messages":[` + userHi + `]}`, []fe{{"max_tokens", api.FieldOutOfRange}}},
		{"max_tokens fraction", `{"model":"m","max_tokens":1.5,"messages":[` + userHi + `]}`, []fe{{"max_tokens", api.FieldWrongType}}},
		{"max_tokens string", `{"model":"m","max_tokens":"1","messages":[` + userHi + `]}`, []fe{{"max_tokens", api.FieldWrongType}}},
		{"max_tokens huge", `{"model":"m","max_tokens":1e30,"messages":[` + userHi + `]}`, []fe{{"max_tokens", api.FieldOutOfRange}}},

		{"messages missing", `{"model":"m","max_tokens":1}`, []fe{{"messages", api.FieldMissing}}},
		{"messages empty", `{"model":"m","max_tokens":1,"messages":[]}`, []fe{{"messages", api.FieldInvalid}}},
		{"messages object", `{"model":"m","max_tokens":1,"messages":{}}`, []fe{{"messages", api.FieldWrongType}}},
		{"message string", `{"model":"m","max_tokens":1,"messages":["hi"]}`, []fe{{"messages.0", api.FieldWrongType}}},
		{"role missing", req(`{"content":"hi"}`), []fe{{"messages.0.role", api.FieldMissing}}},
		{"role system", req(userHi, `{"role":"system","content":"x"}`), []fe{{"messages.1.role", api.FieldEnum}}},
		{"content missing", req(`{"role":"user"}`), []fe{{"messages.0.content", api.FieldMissing}}},
		{"content number", req(`{"role":"assistant","content":5}`), []fe{{"messages.0.content", api.FieldWrongType}}},
		{"user content empty", req(`{"role":"user","content":[]}`), []fe{{"messages.0.content", api.FieldInvalid}}},
		{"block not object", req(user(`"hi"`)), []fe{{"messages.0.content.0", api.FieldWrongType}}},
		{"block type missing", req(user(`{"text":"hi"}`)), []fe{{"messages.0.content.0.type", api.FieldMissing}}},
		{"block type unknown", req(userHi, userHi, user(`{"type":"text","text":"a"}`, `{"type":"video"}`)), []fe{{"messages.2.content.1.type", api.FieldEnum}}},
		{"assistant block unknown", req(userHi, assistant(`{"type":"audio"}`)), []fe{{"messages.1.content.0.type", api.FieldEnum}}},
		{"tool_use from user", req(user(toolUse)), []fe{{"messages.0.content.0.type", api.FieldNotAllowed}}},
		{"thinking from user", req(user(`{"type":"thinking","thinking":"x"}`)), []fe{{"messages.0.content.0.type", api.FieldNotAllowed}}},
		{"image from assistant", req(userHi, assistant(imgB64)), []fe{{"messages.1.content.0.type", api.FieldNotAllowed}}},
		{"tool_result from assistant", req(userHi, assistant(`{"type":"tool_result","tool_use_id":"x"}`)), []fe{{"messages.1.content.0.type", api.FieldNotAllowed}}},
		{"server tool block", req(userHi, assistant(`{"type":"server_tool_use","id":"x","name":"web_search","input":{}}`)), []fe{{"messages.1.content.0.type", api.FieldNotSupported}}},
		{"search result", req(user(`{"type":"search_result"}`)), []fe{{"messages.0.content.0.type", api.FieldNotSupported}}},
		{"text missing", req(user(`{"type":"text"}`)), []fe{{"messages.0.content.0.text", api.FieldMissing}}},
		{"text number", req(userHi, assistant(`{"type":"text","text":1}`)), []fe{{"messages.1.content.0.text", api.FieldWrongType}}},

		// images
		{"image no source", req(user(`{"type":"image"}`)), []fe{{"messages.0.content.0.source", api.FieldMissing}}},
		{"image source type", req(user(`{"type":"image","source":{"type":"svg"}}`)), []fe{{"messages.0.content.0.source.type", api.FieldEnum}}},
		{"image file source", req(user(`{"type":"image","source":{"type":"file","file_id":"f"}}`)), []fe{{"messages.0.content.0.source.type", api.FieldNotSupported}}},
		{"image at a loopback address", req(user(`{"type":"image","source":{"type":"url","url":"https://127.0.0.1:8080/a.png"}}`)), []fe{{"messages.0.content.0.source.url", api.FieldNotAllowed}}},
		{"image over http", req(user(`{"type":"image","source":{"type":"url","url":"http://x.test/a.png"}}`)), []fe{{"messages.0.content.0.source.url", api.FieldNotAllowed}}},
		{"image media type", req(user(`{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"` + png + `"}}`)), []fe{{"messages.0.content.0.source.media_type", api.FieldEnum}}},
		{"image data missing", req(user(`{"type":"image","source":{"type":"base64","media_type":"image/png"}}`)), []fe{{"messages.0.content.0.source.data", api.FieldMissing}}},
		{"image data empty", req(user(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":""}}`)), []fe{{"messages.0.content.0.source.data", api.FieldInvalid}}},
		{"image data not base64", req(user(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"ab$d"}}`)), []fe{{"messages.0.content.0.source.data", api.FieldInvalid}}},
		{"image data bad padding", req(user(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"abc=="}}`)), []fe{{"messages.0.content.0.source.data", api.FieldInvalid}}},
		{"image url scheme", req(user(`{"type":"image","source":{"type":"url","url":"ftp://x.test/a.png"}}`)), []fe{{"messages.0.content.0.source.url", api.FieldInvalid}}},
		{"image url no host", req(user(`{"type":"image","source":{"type":"url","url":"https://"}}`)), []fe{{"messages.0.content.0.source.url", api.FieldInvalid}}},

		// documents
		{"pdf document", req(user(`{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + b64("%PDF") + `"}}`)), []fe{{"messages.0.content.0.source.media_type", api.FieldNotSupported}}},
		{"url document", req(user(`{"type":"document","source":{"type":"url","url":"https://x.test/a.pdf"}}`)), []fe{{"messages.0.content.0.source.type", api.FieldNotSupported}}},
		{"file document", req(user(`{"type":"document","source":{"type":"file","file_id":"f"}}`)), []fe{{"messages.0.content.0.source.type", api.FieldNotSupported}}},
		{"document source type", req(user(`{"type":"document","source":{"type":"html"}}`)), []fe{{"messages.0.content.0.source.type", api.FieldEnum}}},
		{"document media type", req(user(`{"type":"document","source":{"type":"base64","media_type":"text/html","data":"eA=="}}`)), []fe{{"messages.0.content.0.source.media_type", api.FieldEnum}}},
		{"text document media type", req(user(`{"type":"document","source":{"type":"text","media_type":"text/html","data":"x"}}`)), []fe{{"messages.0.content.0.source.media_type", api.FieldEnum}}},
		{"text document too large", req(user(`{"type":"document","source":{"type":"text","data":"` + bigText + `"}}`)), []fe{{"messages.0.content.0.source.data", api.FieldTooLong}}},
		{"base64 document too large", req(user(`{"type":"document","source":{"type":"base64","media_type":"text/plain","data":"` + b64(bigText) + `"}}`)), []fe{{"messages.0.content.0.source.data", api.FieldTooLong}}},
		{"base64 document not UTF-8", req(user(`{"type":"document","source":{"type":"base64","media_type":"text/plain","data":"` + b64("\xff\xfe") + `"}}`)), []fe{{"messages.0.content.0.source.data", api.FieldInvalid}}},
		{"document title number", req(user(`{"type":"document","title":1,"source":{"type":"text","data":"x"}}`)), []fe{{"messages.0.content.0.title", api.FieldWrongType}}},
		{"content document block", req(user(`{"type":"document","source":{"type":"content","content":[{"type":"document"}]}}`)), []fe{{"messages.0.content.0.source.content.0.type", api.FieldEnum}}},
		{"content document missing", req(user(`{"type":"document","source":{"type":"content"}}`)), []fe{{"messages.0.content.0.source.content", api.FieldMissing}}},

		// tool_use and tool_result
		{"tool_use empty", req(userHi, assistant(`{"type":"tool_use"}`)), []fe{{"messages.1.content.0.id", api.FieldMissing}, {"messages.1.content.0.name", api.FieldMissing}, {"messages.1.content.0.input", api.FieldMissing}}},
		{"tool_use input array", req(userHi, assistant(`{"type":"tool_use","id":"a","name":"f","input":[1]}`)), []fe{{"messages.1.content.0.input", api.FieldWrongType}}},
		{"tool_use input array, then its result", req(userHi, assistant(`{"type":"tool_use","id":"a","name":"f","input":[1]}`), user(`{"type":"tool_result","tool_use_id":"a","content":"x"}`)),
			[]fe{{"messages.1.content.0.input", api.FieldWrongType}}},
		{"tool_result no id", req(user(`{"type":"tool_result","content":"x"}`)), []fe{{"messages.0.content.0.tool_use_id", api.FieldMissing}}},
		{"tool_result answering no tool_use", req(userHi, assistant(toolUse), user(`{"type":"tool_result","tool_use_id":"toolu_9","content":"x"}`)), []fe{{"messages.2.content.0.tool_use_id", api.FieldInvalid}}},
		{"tool_result before its tool_use", req(user(`{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}`), assistant(toolUse)), []fe{{"messages.0.content.0.tool_use_id", api.FieldInvalid}}},
		{"tool_result content number", req(userHi, assistant(toolUse), user(`{"type":"tool_result","tool_use_id":"toolu_1","content":1}`)), []fe{{"messages.2.content.0.content", api.FieldWrongType}}},
		{"tool_result is_error string", req(userHi, assistant(toolUse), user(`{"type":"tool_result","tool_use_id":"toolu_1","is_error":"yes"}`)), []fe{{"messages.2.content.0.is_error", api.FieldWrongType}}},
		{"tool_result document", req(userHi, assistant(toolUse), user(`{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"document"}]}`)), []fe{{"messages.2.content.0.content.0.type", api.FieldNotSupported}}},
		{"tool_result unknown block", req(userHi, assistant(toolUse), user(`{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"video"}]}`)), []fe{{"messages.2.content.0.content.0.type", api.FieldEnum}}},
		{"tool_result bad image", req(userHi, assistant(toolUse), user(`{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"!"}}]}`)), []fe{{"messages.2.content.0.content.0.source.data", api.FieldInvalid}}},

		// system
		{"system number", req(userHi, `"system":1`), []fe{{"system", api.FieldWrongType}}},
		{"system block type", req(userHi, `"system":[{"type":"image"}]`), []fe{{"system.0.type", api.FieldEnum}}},
		{"system block text", req(userHi, `"system":[{"type":"text"},"x"]`), []fe{{"system.0.text", api.FieldMissing}, {"system.1", api.FieldWrongType}}},

		// parameters
		{"stop_sequences string", req(userHi, `"stop_sequences":"END"`), []fe{{"stop_sequences", api.FieldWrongType}}},
		{"stop_sequences element", req(userHi, `"stop_sequences":["a",1]`), []fe{{"stop_sequences.1", api.FieldWrongType}}},
		{"stop_sequences too many", req(userHi, tooManyStops), []fe{{"stop_sequences", api.FieldTooLong}}},
		{"temperature high", req(userHi, `"temperature":1.5`), []fe{{"temperature", api.FieldOutOfRange}}},
		{"temperature string", req(userHi, `"temperature":"1"`), []fe{{"temperature", api.FieldWrongType}}},
		{"top_p negative", req(userHi, `"top_p":-0.1`), []fe{{"top_p", api.FieldOutOfRange}}},
		{"top_k negative", req(userHi, `"top_k":-1`), []fe{{"top_k", api.FieldOutOfRange}}},
		{"top_k fraction", req(userHi, `"top_k":1.5`), []fe{{"top_k", api.FieldWrongType}}},
		{"stream string", req(userHi, `"stream":"yes"`), []fe{{"stream", api.FieldWrongType}}},
		{"metadata array", req(userHi, `"metadata":[]`), []fe{{"metadata", api.FieldWrongType}}},
		{"user_id number", req(userHi, `"metadata":{"user_id":1}`), []fe{{"metadata.user_id", api.FieldWrongType}}},

		// tools
		{"tools object", req(userHi, `"tools":{}`), []fe{{"tools", api.FieldWrongType}}},
		{"tool_choice any without tools", req(userHi, `"tool_choice":{"type":"any"}`), []fe{{"tool_choice", api.FieldInvalid}}},
		{"tool_choice naming no tool", req(userHi, `"tools":[{"name":"f","input_schema":{}}]`, `"tool_choice":{"type":"tool","name":"g"}`),
			[]fe{{"tool_choice.name", api.FieldInvalid}}},
		{"server tool", req(userHi, `"tools":[{"type":"web_search_20250305","name":"web_search"}]`), []fe{{"tools.0.type", api.FieldNotSupported}}},
		{"MCP servers", req(userHi, `"mcp_servers":[{"type":"url","url":"https://mcp.example/sse","name":"x"}]`), []fe{{"mcp_servers", api.FieldNotSupported}}},
		{"MCP servers object", req(userHi, `"mcp_servers":{}`), []fe{{"mcp_servers", api.FieldWrongType}}},
		{"tool name", req(userHi, `"tools":[{"name":"get weather","input_schema":{}}]`), []fe{{"tools.0.name", api.FieldInvalid}}},
		{"tool names alike", req(userHi, `"tools":[{"name":"f","input_schema":{}},{"name":"g","input_schema":{}},{"name":"f","input_schema":{}}]`), []fe{{"tools.2.name", api.FieldInvalid}}},
		{"tool empty", req(userHi, `"tools":[{}]`), []fe{{"tools.0.name", api.FieldMissing}, {"tools.0.input_schema", api.FieldMissing}}},
		{"tool schema string", req(userHi, `"tools":[{"name":"f","description":2,"input_schema":"{}"}]`), []fe{{"tools.0.description", api.FieldWrongType}, {"tools.0.input_schema", api.FieldWrongType}}},
		{"tool_choice string", req(userHi, `"tool_choice":"auto"`), []fe{{"tool_choice", api.FieldWrongType}}},
		{"tool_choice type", req(userHi, `"tool_choice":{"type":"required"}`), []fe{{"tool_choice.type", api.FieldEnum}}},
		{"tool_choice tool unnamed", req(userHi, `"tool_choice":{"type":"tool"}`), []fe{{"tool_choice.name", api.FieldMissing}}},
		{"tool_choice parallel string", req(userHi, `"tool_choice":{"type":"auto","disable_parallel_tool_use":"yes"}`), []fe{{"tool_choice.disable_parallel_tool_use", api.FieldWrongType}}},

		// thinking and output_config
		{"thinking type", req(userHi, `"thinking":{"type":"on"}`), []fe{{"thinking.type", api.FieldEnum}}},
		{"thinking budget missing", req(userHi, `"thinking":{"type":"enabled"}`), []fe{{"thinking.budget_tokens", api.FieldMissing}}},
		{"thinking budget zero", req(userHi, `"thinking":{"type":"enabled","budget_tokens":0}`), []fe{{"thinking.budget_tokens", api.FieldOutOfRange}}},
		{"thinking budget string", req(userHi, `"thinking":{"type":"enabled","budget_tokens":"1024"}`), []fe{{"thinking.budget_tokens", api.FieldWrongType}}},
		{"effort", req(userHi, `"output_config":{"effort":"extreme"}`), []fe{{"output_config.effort", api.FieldEnum}}},
		{"format type", req(userHi, `"output_config":{"format":{"type":"json_object"}}`), []fe{{"output_config.format.type", api.FieldEnum}, {"output_config.format.schema", api.FieldMissing}}},
		{"format schema", req(userHi, `"output_config":{"format":{"type":"json_schema","schema":true}}`), []fe{{"output_config.format.schema", api.FieldWrongType}}},

		{"several", `{"model":"m","max_tokens":-1,"messages":[{"role":"bot","content":"x"},` + user(`{"type":"image"}`) + `],"temperature":3,"tool_choice":{"type":"x"}}`,
			[]fe{{"max_tokens", api.FieldOutOfRange}, {"messages.0.role", api.FieldEnum}, {"messages.1.content.0.source", api.FieldMissing}, {"temperature", api.FieldOutOfRange}, {"tool_choice.type", api.FieldEnum}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, _, err := ToChat([]byte(tt.body), remoteOK)
			if err == nil {
				t.Fatalf("ToChat accepted it: %s", out)
			}
			ae := apiError(t, err)
			if ae.HTTPStatus() != http.StatusUnprocessableEntity || ae.Message == "" {
				t.Fatalf("err = %+v, want a 422", ae)
			}
			for _, f := range ae.Fields {
				if f.Message == "" {
					t.Fatalf("field %s without a message", f.Field)
				}
			}
			if got := fieldsOf(ae); !slices.Equal(got, tt.fields) {
				t.Fatalf("fields = %v, want %v", got, tt.fields)
			}
		})
	}
}

func TestBudgetEffort(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		want string
	}{{1, "low"}, {1024, "low"}, {4095, "low"}, {4096, "medium"}, {16383, "medium"}, {16384, "high"}, {1 << 40, "high"}} {
		if got := budgetEffort(tt.n); got != tt.want {
			t.Errorf("budgetEffort(%d) = %s, want %s", tt.n, got, tt.want)
		}
	}
}
