package chat

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonraw"
)

func TestParseMalformed(t *testing.T) {
	for _, b := range []string{``, `   `, `{"model":`, `{model:1}`, `{"model":"m"}{}`, `{"model":"m"} x`, `{"a":1,}`, "{\"a\":\"\x00\"}"} {
		t.Run(b, func(t *testing.T) {
			_, err := Parse([]byte(b), Options{})
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

// A field sent twice under two cases is refused: an engine written in Go
// reads either spelling, the last one winning, and would obey what the
// gateway never checked (another model, a larger max_tokens).
func TestParseRefusesCaseTwins(t *testing.T) {
	many := make([]string, 40)
	for i := range many {
		many[i] = `"x` + strconv.Itoa(i) + `":1`
	}
	for _, tt := range []struct{ name, body, param string }{
		{"model", body(`"Model":"other"`), "model"},
		{"max_tokens", body(`"max_tokens":5`, `"MAX_TOKENS":100000`), "max_tokens"},
		{"unknown fields", body(`"x_vendor":1`, `"X_Vendor":2`), "x_vendor"},
		{"Kelvin sign", body(`"k":1`, `"\u212a":2`), "k"},
		{"in a large object", body(append(many, `"X39":2`)...), "x39"},
		{"a field the gateway reads, alone in another case", body(`"MAX_TOKENS":100000`), "max_tokens"},
		{"n in another case", body(`"N":100`), "n"},
		{"stream_options in another case", body(`"stream":true`, `"Stream_Options":{"include_usage":false}`), "stream_options"},
		{"in a message", msgs(`{"role":"user","content":"hi","CONTENT":"other"}`), "messages.0.content"},
		{"a message's role alone in another case", msgs(`{"ROLE":"system","role":"user","content":"hi"}`), "messages.0.role"},
		{"in reasoning", body(`"reasoning":{"MAX_TOKENS":100000}`), "reasoning.max_tokens"},
		{"in stream_options", body(`"stream":true`, `"stream_options":{"INCLUDE_USAGE":false}`), "stream_options.include_usage"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.body), Options{})
			ae := apiError(t, err)
			if ae.HTTPStatus() != http.StatusBadRequest || ae.Code != "ambiguous_field" || ae.Param != tt.param {
				t.Fatalf("err = %+v (param %q), want a 400 ambiguous_field for %s", ae, ae.Param, tt.param)
			}
		})
	}
}

// TestParseFieldErrors covers every validation rule: each body must fail
// with exactly the listed field errors, in order, as one 422.
func TestParseFieldErrors(t *testing.T) {
	long := strings.Repeat("a", 65)
	stops17 := `["` + strings.Repeat(`s","`, 16) + `s"]`
	tests := []struct {
		name   string
		body   string
		opts   Options
		fields []fe
	}{
		// body
		{"array body", `[1]`, Options{}, []fe{{"body", api.FieldWrongType}}},
		{"string body", `"x"`, Options{}, []fe{{"body", api.FieldWrongType}}},
		{"null body", `null`, Options{}, []fe{{"body", api.FieldWrongType}}},
		{"number body", ` 5 `, Options{}, []fe{{"body", api.FieldWrongType}}},

		// model
		{"model missing", `{"messages":[` + userHi + `]}`, Options{}, []fe{{"model", api.FieldMissing}}},
		{"model null", `{"model":null,"messages":[` + userHi + `]}`, Options{}, []fe{{"model", api.FieldMissing}}},
		{"model empty", `{"model":"","messages":[` + userHi + `]}`, Options{}, []fe{{"model", api.FieldMissing}}},
		{"model number", `{"model":5,"messages":[` + userHi + `]}`, Options{}, []fe{{"model", api.FieldWrongType}}},

		// messages
		{"messages missing", `{"model":"m"}`, Options{}, []fe{{"messages", api.FieldMissing}}},
		{"messages null", `{"model":"m","messages":null}`, Options{}, []fe{{"messages", api.FieldMissing}}},
		{"messages object", `{"model":"m","messages":{}}`, Options{}, []fe{{"messages", api.FieldWrongType}}},
		{"messages empty", `{"model":"m","messages":[]}`, Options{}, []fe{{"messages", api.FieldInvalid}}},
		{"message not object", msgs(`"hi"`), Options{}, []fe{{"messages.0", api.FieldWrongType}}},
		{"role missing", msgs(`{"content":"hi"}`), Options{}, []fe{{"messages.0.role", api.FieldMissing}}},
		{"role null", msgs(`{"role":null,"content":"hi"}`), Options{}, []fe{{"messages.0.role", api.FieldMissing}}},
		{"role number", msgs(`{"role":1,"content":"hi"}`), Options{}, []fe{{"messages.0.role", api.FieldWrongType}}},
		{"role unknown", msgs(userHi, `{"role":"critic","content":"hi"}`), Options{}, []fe{{"messages.1.role", api.FieldEnum}}},
		{"developer image", msgs(`{"role":"developer","content":[`+imagePart(tinyPNG)+`]}`, userHi), Options{}, []fe{{"messages.0.content.0.type", api.FieldNotSupported}}},
		{"developer content missing", msgs(`{"role":"developer"}`, userHi), Options{}, []fe{{"messages.0.content", api.FieldMissing}}},

		// user content
		{"user content missing", msgs(`{"role":"user"}`), Options{}, []fe{{"messages.0.content", api.FieldMissing}}},
		{"user content null", msgs(`{"role":"user","content":null}`), Options{}, []fe{{"messages.0.content", api.FieldMissing}}},
		{"user content number", msgs(`{"role":"user","content":5}`), Options{}, []fe{{"messages.0.content", api.FieldWrongType}}},
		{"user content object", msgs(`{"role":"user","content":{"type":"text"}}`), Options{}, []fe{{"messages.0.content", api.FieldWrongType}}},
		{"user content empty", msgs(`{"role":"user","content":[]}`), Options{}, []fe{{"messages.0.content", api.FieldInvalid}}},
		{"part not object", userParts(`"hi"`), Options{}, []fe{{"messages.0.content.0", api.FieldWrongType}}},
		{"part type missing", userParts(`{"text":"hi"}`), Options{}, []fe{{"messages.0.content.0.type", api.FieldMissing}}},
		{"part type number", userParts(`{"type":1}`), Options{}, []fe{{"messages.0.content.0.type", api.FieldWrongType}}},
		{"part type unknown", userParts(`{"type":"text","text":"a"}`, `{"type":"input_audio"}`), Options{}, []fe{{"messages.0.content.1.type", api.FieldEnum}}},
		{"text missing", userParts(`{"type":"text"}`), Options{}, []fe{{"messages.0.content.0.text", api.FieldMissing}}},
		{"text number", userParts(`{"type":"text","text":5}`), Options{}, []fe{{"messages.0.content.0.text", api.FieldWrongType}}},

		// system, assistant and tool content
		{"system content missing", msgs(`{"role":"system"}`, userHi), Options{}, []fe{{"messages.0.content", api.FieldMissing}}},
		{"system content number", msgs(`{"role":"system","content":1}`, userHi), Options{}, []fe{{"messages.0.content", api.FieldWrongType}}},
		{"system image", msgs(`{"role":"system","content":[`+imagePart(tinyPNG)+`]}`, userHi), Options{}, []fe{{"messages.0.content.0.type", api.FieldNotSupported}}},
		{"system file", msgs(`{"role":"system","content":[`+filePart("a.txt", b64("x"))+`]}`, userHi), Options{}, []fe{{"messages.0.content.0.type", api.FieldNotSupported}}},
		{"system unknown part", msgs(`{"role":"system","content":[{"type":"audio"}]}`, userHi), Options{}, []fe{{"messages.0.content.0.type", api.FieldEnum}}},
		{"assistant content missing", msgs(userHi, `{"role":"assistant"}`), Options{}, []fe{{"messages.1.content", api.FieldMissing}}},
		{"assistant content null no tools", msgs(userHi, `{"role":"assistant","content":null}`), Options{}, []fe{{"messages.1.content", api.FieldMissing}}},
		{"assistant empty tool_calls", msgs(userHi, `{"role":"assistant","tool_calls":[]}`), Options{}, []fe{{"messages.1.content", api.FieldMissing}}},
		{"assistant image", msgs(userHi, `{"role":"assistant","content":[`+imagePart(tinyPNG)+`]}`), Options{}, []fe{{"messages.1.content.0.type", api.FieldNotSupported}}},
		{"assistant content number", msgs(userHi, `{"role":"assistant","content":true}`), Options{}, []fe{{"messages.1.content", api.FieldWrongType}}},
		{"tool_calls not array", msgs(userHi, `{"role":"assistant","content":"x","tool_calls":{}}`), Options{}, []fe{{"messages.1.tool_calls", api.FieldWrongType}}},
		{"tool_call not object", msgs(userHi, `{"role":"assistant","tool_calls":[1]}`), Options{}, []fe{{"messages.1.tool_calls.0", api.FieldWrongType}}},
		{"tool_call fields missing", msgs(userHi, `{"role":"assistant","tool_calls":[{}]}`), Options{}, []fe{
			{"messages.1.tool_calls.0.id", api.FieldMissing}, {"messages.1.tool_calls.0.type", api.FieldMissing}, {"messages.1.tool_calls.0.function", api.FieldMissing}}},
		{"tool_call bad values", msgs(userHi, `{"role":"assistant","tool_calls":[{"id":1,"type":"code","function":{"arguments":{}}}]}`), Options{}, []fe{
			{"messages.1.tool_calls.0.id", api.FieldWrongType}, {"messages.1.tool_calls.0.type", api.FieldEnum},
			{"messages.1.tool_calls.0.function.name", api.FieldMissing}, {"messages.1.tool_calls.0.function.arguments", api.FieldWrongType}}},
		{"tool_call function not object", msgs(userHi, `{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":"f"}]}`), Options{}, []fe{{"messages.1.tool_calls.0.function", api.FieldWrongType}}},
		{"tool call id missing", msgs(userHi, `{"role":"tool","content":"42"}`), Options{}, []fe{{"messages.1.tool_call_id", api.FieldMissing}}},
		{"tool call id number", msgs(userHi, `{"role":"tool","tool_call_id":7,"content":"42"}`), Options{}, []fe{{"messages.1.tool_call_id", api.FieldWrongType}}},
		{"tool content missing", msgs(userHi, `{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`, `{"role":"tool","tool_call_id":"c"}`), Options{}, []fe{{"messages.2.content", api.FieldMissing}}},
		{"tool image", msgs(userHi, `{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`, `{"role":"tool","tool_call_id":"c","content":[`+imagePart(tinyPNG)+`]}`), Options{}, []fe{{"messages.2.content.0.type", api.FieldNotSupported}}},
		{"tool result answering no call", msgs(userHi, `{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`, `{"role":"tool","tool_call_id":"d","content":"42"}`), Options{}, []fe{{"messages.2.tool_call_id", api.FieldInvalid}}},
		{"tool result before its call", msgs(userHi, `{"role":"tool","tool_call_id":"c","content":"42"}`, `{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`), Options{}, []fe{{"messages.1.tool_call_id", api.FieldInvalid}}},

		// image_url parts
		{"image_url missing", userParts(`{"type":"image_url"}`), Options{}, []fe{{"messages.0.content.0.image_url", api.FieldMissing}}},
		{"image_url number", userParts(`{"type":"image_url","image_url":5}`), Options{}, []fe{{"messages.0.content.0.image_url", api.FieldWrongType}}},
		{"image url missing", userParts(`{"type":"image_url","image_url":{"detail":"low"}}`), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldMissing}}},
		{"image url number", userParts(`{"type":"image_url","image_url":{"url":5}}`), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldWrongType}}},
		{"image not image type", userParts(imagePart("data:text/plain;base64," + b64("x"))), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldInvalid}}},
		{"image no comma", userParts(imagePart("data:image/png;base64")), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldInvalid}}},
		{"image not base64 encoded", userParts(imagePart("data:image/svg+xml,<svg/>")), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldInvalid}}},
		{"image empty data", userParts(imagePart("data:image/png;base64,")), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldInvalid}}},
		{"image bad base64", userParts(imagePart("data:image/png;base64,!!!!")), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldInvalid}}},
		{"image base64 bad length", userParts(imagePart("data:image/png;base64,AAAAA")), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldInvalid}}},
		{"image base64 line break", userParts(imagePart("data:image/png;base64,AAAA\nAAAA")), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldInvalid}}},
		{"image remote off", userParts(imagePart("https://example.com/cat.png")), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldNotAllowed}}},
		{"image remote http off", userParts(imagePart("HTTP://example.com/cat.png")), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldNotAllowed}}},
		{"bare image remote off", userParts(`{"type":"image_url","image_url":"https://example.com/cat.png"}`), Options{}, []fe{{"messages.0.content.0.image_url", api.FieldNotAllowed}}},
		{"image other scheme", userParts(imagePart("ftp://example.com/cat.png")), Options{}, []fe{{"messages.0.content.0.image_url.url", api.FieldInvalid}}},
		{"image other scheme remote on", userParts(imagePart("file:///etc/passwd")), Options{AllowRemoteImages: true}, []fe{{"messages.0.content.0.image_url.url", api.FieldInvalid}}},
		{"image remote no host", userParts(imagePart("https:///cat.png")), Options{AllowRemoteImages: true}, []fe{{"messages.0.content.0.image_url.url", api.FieldInvalid}}},
		{"image remote over http", userParts(imagePart("http://example.com/cat.png")), Options{AllowRemoteImages: true}, []fe{{"messages.0.content.0.image_url.url", api.FieldNotAllowed}}},
		{"image remote with credentials", userParts(imagePart("https://u:p@example.com/cat.png")), Options{AllowRemoteImages: true}, []fe{{"messages.0.content.0.image_url.url", api.FieldNotAllowed}}},
		{"image remote at the metadata service", userParts(imagePart("https://169.254.169.254/latest/meta-data/")), Options{AllowRemoteImages: true}, []fe{{"messages.0.content.0.image_url.url", api.FieldNotAllowed}}},
		{"image remote on loopback", userParts(imagePart("https://127.1:8080/x.png")), Options{AllowRemoteImages: true}, []fe{{"messages.0.content.0.image_url.url", api.FieldNotAllowed}}},
		{"image remote at localhost", userParts(imagePart("https://LocalHost./x.png")), Options{AllowRemoteImages: true}, []fe{{"messages.0.content.0.image_url.url", api.FieldNotAllowed}}},
		{"image remote in a private range", userParts(imagePart("https://[::ffff:10.0.0.1]/x.png")), Options{AllowRemoteImages: true}, []fe{{"messages.0.content.0.image_url.url", api.FieldNotAllowed}}},

		// file parts
		{"file missing", userParts(`{"type":"file"}`), Options{}, []fe{{"messages.0.content.0.file", api.FieldMissing}}},
		{"file not object", userParts(`{"type":"file","file":"a.txt"}`), Options{}, []fe{{"messages.0.content.0.file", api.FieldWrongType}}},
		{"file fields missing", userParts(`{"type":"file","file":{"file_id":"file-1"}}`), Options{}, []fe{
			{"messages.0.content.0.file.filename", api.FieldMissing}, {"messages.0.content.0.file.file_data", api.FieldMissing}}},
		{"file data number", userParts(`{"type":"file","file":{"filename":"a.txt","file_data":5}}`), Options{}, []fe{{"messages.0.content.0.file.file_data", api.FieldWrongType}}},
		{"filename number", userParts(`{"type":"file","file":{"filename":5,"file_data":""}}`), Options{}, []fe{{"messages.0.content.0.file.filename", api.FieldWrongType}}},
		{"file pdf", userParts(filePart("report.pdf", b64("x"))), Options{}, []fe{{"messages.0.content.0.file.filename", api.FieldNotSupported}}},
		{"file no extension", userParts(filePart("txt", b64("x"))), Options{}, []fe{{"messages.0.content.0.file.filename", api.FieldNotSupported}}},
		{"file bad base64", userParts(filePart("a.txt", "not base64!")), Options{}, []fe{{"messages.0.content.0.file.file_data", api.FieldInvalid}}},
		{"file bad extension and data", userParts(filePart("a.exe", "%%%")), Options{}, []fe{
			{"messages.0.content.0.file.filename", api.FieldNotSupported}, {"messages.0.content.0.file.file_data", api.FieldInvalid}}},
		{"file data url not base64", userParts(filePart("a.txt", "data:text/plain,hello")), Options{}, []fe{{"messages.0.content.0.file.file_data", api.FieldInvalid}}},
		{"file too long", userParts(filePart("a.txt", b64(strings.Repeat("a", MaxFileBytes+1)))), Options{}, []fe{{"messages.0.content.0.file.file_data", api.FieldTooLong}}},
		{"file data url too long", userParts(filePart("a.csv", "data:text/csv;base64,"+b64(strings.Repeat("a", MaxFileBytes+1)))), Options{}, []fe{{"messages.0.content.0.file.file_data", api.FieldTooLong}}},
		{"file not utf8", userParts(filePart("a.txt", b64("caf\xe9"))), Options{}, []fe{{"messages.0.content.0.file.file_data", api.FieldInvalid}}},

		// stream
		{"stream string", body(`"stream":"yes"`), Options{}, []fe{{"stream", api.FieldWrongType}}},
		{"stream_options string", body(`"stream_options":"x"`), Options{}, []fe{{"stream_options", api.FieldWrongType}}},
		{"include_usage string", body(`"stream_options":{"include_usage":"yes"}`), Options{}, []fe{{"stream_options.include_usage", api.FieldWrongType}}},

		// tools
		{"tools object", body(`"tools":{}`), Options{}, []fe{{"tools", api.FieldWrongType}}},
		{"tool not object", body(`"tools":[1]`), Options{}, []fe{{"tools.0", api.FieldWrongType}}},
		{"tool names alike", body(`"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]`), Options{}, []fe{{"tools.1.function.name", api.FieldInvalid}}},
		{"tool empty", body(`"tools":[{}]`), Options{}, []fe{{"tools.0.type", api.FieldMissing}, {"tools.0.function", api.FieldMissing}}},
		{"tool type", body(`"tools":[{"type":"code_interpreter","function":{"name":"f"}}]`), Options{}, []fe{{"tools.0.type", api.FieldEnum}}},
		{"tool function string", body(`"tools":[{"type":"function","function":"f"}]`), Options{}, []fe{{"tools.0.function", api.FieldWrongType}}},
		{"tool name missing", body(`"tools":[{"type":"function","function":{}}]`), Options{}, []fe{{"tools.0.function.name", api.FieldMissing}}},
		{"tool name number", body(`"tools":[{"type":"function","function":{"name":1}}]`), Options{}, []fe{{"tools.0.function.name", api.FieldWrongType}}},
		{"tool name space", body(`"tools":[{"type":"function","function":{"name":"get weather"}}]`), Options{}, []fe{{"tools.0.function.name", api.FieldInvalid}}},
		{"tool name empty", body(`"tools":[{"type":"function","function":{"name":""}}]`), Options{}, []fe{{"tools.0.function.name", api.FieldInvalid}}},
		{"tool name too long", body(`"tools":[{"type":"function","function":{"name":"` + long + `"}}]`), Options{}, []fe{{"tools.0.function.name", api.FieldInvalid}}},
		{"tool description and parameters", body(`"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g","description":1,"parameters":[]}}]`), Options{}, []fe{
			{"tools.1.function.description", api.FieldWrongType}, {"tools.1.function.parameters", api.FieldWrongType}}},
		{"tool_choice unknown", body(`"tool_choice":"any"`), Options{}, []fe{{"tool_choice", api.FieldEnum}}},
		{"tool_choice number", body(`"tool_choice":1`), Options{}, []fe{{"tool_choice", api.FieldWrongType}}},
		{"tool_choice object empty", body(`"tool_choice":{}`), Options{}, []fe{{"tool_choice.type", api.FieldMissing}, {"tool_choice.function", api.FieldMissing}}},
		{"tool_choice object bad", body(`"tool_choice":{"type":"tool","function":{}}`), Options{}, []fe{{"tool_choice.type", api.FieldEnum}, {"tool_choice.function.name", api.FieldMissing}}},
		{"tool_choice required without tools", body(`"tool_choice":"required"`), Options{}, []fe{{"tool_choice", api.FieldInvalid}}},
		{"tool_choice naming no tool", body(`"tools":[{"type":"function","function":{"name":"f"}}]`, `"tool_choice":{"type":"function","function":{"name":"g"}}`), Options{},
			[]fe{{"tool_choice.function.name", api.FieldInvalid}}},
		{"tool_choice naming a function without tools", body(`"tool_choice":{"type":"function","function":{"name":"g"}}`), Options{},
			[]fe{{"tool_choice.function.name", api.FieldInvalid}}},
		{"parallel_tool_calls string", body(`"parallel_tool_calls":"true"`), Options{}, []fe{{"parallel_tool_calls", api.FieldWrongType}}},

		// response_format
		{"response_format string", body(`"response_format":"json"`), Options{}, []fe{{"response_format", api.FieldWrongType}}},
		{"response_format no type", body(`"response_format":{}`), Options{}, []fe{{"response_format.type", api.FieldMissing}}},
		{"response_format type", body(`"response_format":{"type":"xml"}`), Options{}, []fe{{"response_format.type", api.FieldEnum}}},
		{"json_schema missing", body(`"response_format":{"type":"json_schema"}`), Options{}, []fe{{"response_format.json_schema", api.FieldMissing}}},
		{"json_schema not object", body(`"response_format":{"type":"json_schema","json_schema":"s"}`), Options{}, []fe{{"response_format.json_schema", api.FieldWrongType}}},
		{"json_schema fields", body(`"response_format":{"type":"json_schema","json_schema":{"schema":"x","strict":"yes"}}`), Options{}, []fe{
			{"response_format.json_schema.name", api.FieldMissing}, {"response_format.json_schema.schema", api.FieldWrongType}, {"response_format.json_schema.strict", api.FieldWrongType}}},

		// reasoning controls
		{"reasoning_effort unknown", body(`"reasoning_effort":"max"`), Options{}, []fe{{"reasoning_effort", api.FieldEnum}}},
		{"reasoning_effort number", body(`"reasoning_effort":1`), Options{}, []fe{{"reasoning_effort", api.FieldWrongType}}},
		{"reasoning string", body(`"reasoning":"high"`), Options{}, []fe{{"reasoning", api.FieldWrongType}}},
		{"reasoning max_tokens float", body(`"reasoning":{"max_tokens":1.5}`), Options{}, []fe{{"reasoning.max_tokens", api.FieldWrongType}}},
		{"reasoning max_tokens negative", body(`"reasoning":{"max_tokens":-1}`), Options{}, []fe{{"reasoning.max_tokens", api.FieldOutOfRange}}},
		{"reasoning max_tokens string", body(`"reasoning":{"max_tokens":"100"}`), Options{}, []fe{{"reasoning.max_tokens", api.FieldWrongType}}},
		{"reasoning max_tokens huge", body(`"reasoning":{"max_tokens":1e30}`), Options{}, []fe{{"reasoning.max_tokens", api.FieldOutOfRange}}},
		{"reasoning max_tokens bool", body(`"reasoning":{"max_tokens":true}`), Options{}, []fe{{"reasoning.max_tokens", api.FieldWrongType}}},
		{"reasoning effort unknown", body(`"reasoning":{"effort":"extreme"}`), Options{}, []fe{{"reasoning.effort", api.FieldEnum}}},
		{"enable_thinking string", body(`"enable_thinking":"false"`), Options{}, []fe{{"enable_thinking", api.FieldWrongType}}},

		// logit_bias, stop, logprobs, n, user
		{"logit_bias array", body(`"logit_bias":[]`), Options{}, []fe{{"logit_bias", api.FieldWrongType}}},
		{"logit_bias key", body(`"logit_bias":{"hello":1,"-1":1}`), Options{}, []fe{{"logit_bias.hello", api.FieldInvalid}, {"logit_bias.-1", api.FieldInvalid}}},
		{"logit_bias value", body(`"logit_bias":{"1":101,"2":-100.5,"3":"x","4":100}`), Options{}, []fe{
			{"logit_bias.1", api.FieldOutOfRange}, {"logit_bias.2", api.FieldOutOfRange}, {"logit_bias.3", api.FieldWrongType}}},
		{"stop number", body(`"stop":5`), Options{}, []fe{{"stop", api.FieldWrongType}}},
		{"stop too many", body(`"stop":` + stops17), Options{}, []fe{{"stop", api.FieldTooLong}}},
		{"stop element", body(`"stop":["a",1]`), Options{}, []fe{{"stop.1", api.FieldWrongType}}},
		{"logprobs string", body(`"logprobs":"yes"`), Options{}, []fe{{"logprobs", api.FieldWrongType}}},
		{"n zero", body(`"n":0`), Options{}, []fe{{"n", api.FieldOutOfRange}}},
		{"n negative", body(`"n":-2`), Options{}, []fe{{"n", api.FieldOutOfRange}}},
		{"n over the bound", body(`"n":17`), Options{}, []fe{{"n", api.FieldOutOfRange}}},
		{"n string", body(`"n":"1"`), Options{}, []fe{{"n", api.FieldWrongType}}},
		{"n fraction", body(`"n":1.5`), Options{}, []fe{{"n", api.FieldWrongType}}},
		{"user number", body(`"user":42`), Options{}, []fe{{"user", api.FieldWrongType}}},

		// several failures, reported together in a fixed order
		{"several", `{"n":20,"reasoning":{"max_tokens":-1},"temperature":3,"messages":[{"role":"bot"},` +
			`{"role":"user","content":[` + imagePart("https://example.com/x.png") + `,` + filePart("a.pdf", b64("x")) + `]},` +
			`{"role":"assistant"}],"model":5,"stop":[1]}`, Options{}, []fe{
			{"model", api.FieldWrongType},
			{"messages.0.role", api.FieldEnum},
			{"messages.1.content.0.image_url.url", api.FieldNotAllowed},
			{"messages.1.content.1.file.filename", api.FieldNotSupported},
			{"messages.2.content", api.FieldMissing},
			{"reasoning.max_tokens", api.FieldOutOfRange},
			{"temperature", api.FieldOutOfRange},
			{"stop.0", api.FieldWrongType},
			{"n", api.FieldOutOfRange},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.body), tt.opts)
			ae := apiError(t, err)
			if ae.HTTPStatus() != http.StatusUnprocessableEntity || ae.ErrorType() != api.TypeInvalidRequest {
				t.Fatalf("status %d type %q, want 422 invalid_request_error: %v", ae.HTTPStatus(), ae.ErrorType(), ae)
			}
			if got := fieldsOf(ae); !slices.Equal(got, tt.fields) {
				t.Fatalf("fields = %v\nwant      %v\n(%v)", got, tt.fields, ae)
			}
			for _, f := range ae.Fields {
				if f.Message == "" || strings.HasSuffix(f.Message, ".") {
					t.Errorf("%s: message %q should be a short phrase", f.Field, f.Message)
				}
			}
		})
	}
}

// TestParseNumericRanges walks every numeric field across its bounds.
func TestParseNumericRanges(t *testing.T) {
	type check struct {
		good []string
		bad  map[string]string // value → field error type
	}
	wrongNumber := func(extra map[string]string) map[string]string {
		m := map[string]string{`"1"`: api.FieldWrongType, `true`: api.FieldWrongType, `[]`: api.FieldWrongType}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	rules := map[string]check{
		"temperature":           {[]string{"0", "0.7", "2", "2.0", "1e0"}, wrongNumber(map[string]string{"-0.1": api.FieldOutOfRange, "2.01": api.FieldOutOfRange, "1e400": api.FieldOutOfRange})},
		"top_p":                 {[]string{"0", "0.95", "1"}, wrongNumber(map[string]string{"-1": api.FieldOutOfRange, "1.5": api.FieldOutOfRange})},
		"top_k":                 {[]string{"0", "40", "40.0", "4e1"}, wrongNumber(map[string]string{"-1": api.FieldOutOfRange, "40.5": api.FieldWrongType})},
		"min_p":                 {[]string{"0", "0.05", "1"}, wrongNumber(map[string]string{"-0.01": api.FieldOutOfRange, "1.01": api.FieldOutOfRange})},
		"seed":                  {[]string{"0", "-1", "42", "9223372036854775807", "-9223372036854775808", "1e18"}, wrongNumber(map[string]string{"0.5": api.FieldWrongType, "9223372036854775808": api.FieldOutOfRange, "-9223372036854775809": api.FieldOutOfRange, "1e19": api.FieldOutOfRange})},
		"xtc_probability":       {[]string{"0", "0.5", "1"}, wrongNumber(map[string]string{"-0.5": api.FieldOutOfRange, "1.1": api.FieldOutOfRange})},
		"xtc_threshold":         {[]string{"0", "0.1", "0.5"}, wrongNumber(map[string]string{"-0.1": api.FieldOutOfRange, "0.51": api.FieldOutOfRange})},
		"mirostat":              {[]string{"0", "1", "2", "2.0"}, wrongNumber(map[string]string{"3": api.FieldOutOfRange, "-1": api.FieldOutOfRange, "1.5": api.FieldWrongType})},
		"mirostat_tau":          {[]string{"5", "0.001"}, wrongNumber(map[string]string{"0": api.FieldOutOfRange, "-1": api.FieldOutOfRange})},
		"mirostat_eta":          {[]string{"0.1", "1"}, wrongNumber(map[string]string{"0": api.FieldOutOfRange, "-0.1": api.FieldOutOfRange})},
		"max_tokens":            {[]string{"1", "4096", "5.0", "1e3"}, wrongNumber(map[string]string{"0": api.FieldOutOfRange, "-5": api.FieldOutOfRange, "5.5": api.FieldWrongType, "1e20": api.FieldOutOfRange})},
		"max_completion_tokens": {[]string{"1", "4096"}, wrongNumber(map[string]string{"0": api.FieldOutOfRange, "100.25": api.FieldWrongType})},
		"frequency_penalty":     {[]string{"-2", "0", "2"}, wrongNumber(map[string]string{"-2.1": api.FieldOutOfRange, "2.1": api.FieldOutOfRange})},
		"presence_penalty":      {[]string{"-2", "1.5", "2"}, wrongNumber(map[string]string{"-3": api.FieldOutOfRange, "3": api.FieldOutOfRange})},
		"repeat_penalty":        {[]string{"1", "1.1", "0.5"}, wrongNumber(map[string]string{"0": api.FieldOutOfRange, "-1": api.FieldOutOfRange})},
		"repeat_last_n":         {[]string{"-1", "0", "64"}, wrongNumber(map[string]string{"-2": api.FieldOutOfRange, "64.5": api.FieldWrongType})},
		"top_logprobs":          {[]string{"0", "5", "20"}, wrongNumber(map[string]string{"-1": api.FieldOutOfRange, "21": api.FieldOutOfRange, "2.5": api.FieldWrongType})},
	}
	for key, c := range rules {
		for _, v := range c.good {
			t.Run(key+"="+v, func(t *testing.T) {
				mustParse(t, body(quote(key)+":"+v), Options{})
			})
		}
		for v, typ := range c.bad {
			t.Run(key+"="+v, func(t *testing.T) {
				_, err := Parse([]byte(body(quote(key)+":"+v)), Options{})
				ae := apiError(t, err)
				if got, want := fieldsOf(ae), []fe{{key, typ}}; !slices.Equal(got, want) {
					t.Fatalf("fields = %v, want %v", got, want)
				}
			})
		}
	}
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name string
		body string
		opts Options
	}{
		{"minimal", body(), Options{}},
		{"all optional fields null", body(`"stream":null`, `"stream_options":null`, `"tools":null`, `"tool_choice":null`,
			`"parallel_tool_calls":null`, `"response_format":null`, `"reasoning_effort":null`, `"reasoning":null`, `"enable_thinking":null`,
			`"temperature":null`, `"top_p":null`, `"top_k":null`, `"min_p":null`, `"seed":null`, `"xtc_probability":null`, `"xtc_threshold":null`,
			`"mirostat":null`, `"mirostat_tau":null`, `"mirostat_eta":null`, `"max_tokens":null`, `"max_completion_tokens":null`,
			`"frequency_penalty":null`, `"presence_penalty":null`, `"repeat_penalty":null`, `"repeat_last_n":null`, `"logit_bias":null`,
			`"stop":null`, `"logprobs":null`, `"top_logprobs":null`, `"n":null`, `"user":null`), Options{}},
		{"nested nulls", body(`"reasoning":{"max_tokens":null,"effort":null}`, `"stream_options":{"include_usage":null}`,
			`"tools":[{"type":"function","function":{"name":"f","description":null,"parameters":null}}]`,
			`"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":null,"strict":null}}`), Options{}},
		{"unknown fields", body(`"x_vendor":{"deep":[1,2,{"a":null}]}`, `"chat_template_kwargs":{"foo":true}`, `"X_Vendor_Flag":5`), Options{}},
		{"every field valid", body(`"stream":true`, `"stream_options":{"include_usage":false}`,
			`"tools":[{"type":"function","function":{"name":"get_weather-2","description":"d","parameters":{"type":"object"},"strict":true}}]`,
			`"tool_choice":{"type":"function","function":{"name":"get_weather-2"}}`, `"parallel_tool_calls":false`,
			`"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"},"strict":true}}`,
			`"reasoning_effort":"low"`, `"reasoning":{"max_tokens":0,"effort":"minimal","summary":"auto"}`, `"enable_thinking":true`,
			`"temperature":0`, `"top_p":1`, `"top_k":0`, `"min_p":0`, `"seed":-7`, `"xtc_probability":0`, `"xtc_threshold":0.5`,
			`"mirostat":2`, `"mirostat_tau":5`, `"mirostat_eta":0.1`, `"max_tokens":10`, `"max_completion_tokens":20`,
			`"frequency_penalty":-2`, `"presence_penalty":2`, `"repeat_penalty":1`, `"repeat_last_n":-1`, `"logit_bias":{"50256":-100,"7":100}`,
			`"stop":["a","b"]`, `"logprobs":true`, `"top_logprobs":20`, `"n":1`, `"user":"u"`), Options{}},
		{"tool_choice strings", body(`"tool_choice":"required"`, `"tools":[{"type":"function","function":{"name":"f"}}]`), Options{}},
		{"tool_choice none and auto without tools", body(`"tool_choice":"auto"`), Options{}},
		{"stop string", body(`"stop":"\n"`), Options{}},
		{"stop sixteen", body(`"stop":["` + strings.Repeat(`s","`, 15) + `s"]`), Options{}},
		{"n one float", body(`"n":1.0`), Options{}},
		{"effort minimal", body(`"reasoning_effort":"minimal"`), Options{}},
		{"response_format text and json_object", body(`"response_format":{"type":"json_object"}`), Options{}},
		{"conversation", msgs(`{"role":"system","content":[{"type":"text","text":"be brief"}]}`, userHi,
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`,
			`{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"42"}]}`,
			`{"role":"assistant","tool_calls":[{"id":"c2","type":"function","function":{"name":"f"}}]}`,
			`{"role":"tool","tool_call_id":"c2","content":"43"}`,
			`{"role":"assistant","content":[{"type":"text","text":"done"}],"name":"bot"}`,
			`{"role":"user","content":"","name":"me"}`), Options{}},
		{"empty system parts", msgs(`{"role":"system","content":[]}`, userHi), Options{}},
		{"image data url", userParts(imagePart(tinyPNG)), Options{}},
		{"image data url upper case", userParts(imagePart("DATA:IMAGE/PNG;BASE64,iVBORw0K")), Options{}},
		{"image data url unpadded", userParts(imagePart("data:image/jpeg;base64,QUJDRA")), Options{}},
		{"image data url params", userParts(imagePart("data:image/png;name=a.png;base64,QUJD")), Options{}},
		{"bare image string", userParts(`{"type":"image_url","image_url":` + quote(tinyPNG) + `}`), Options{}},
		{"image remote on", userParts(imagePart("https://example.com/cat.png")), Options{AllowRemoteImages: true}},
		{"image remote upper-case scheme", userParts(imagePart("HTTPS://example.com/cat.png")), Options{AllowRemoteImages: true}},
		{"bare image remote on", userParts(`{"type":"image_url","image_url":"https://example.com/cat.png"}`), Options{AllowRemoteImages: true}},
		{"file txt", userParts(filePart("notes.txt", b64("hello"))), Options{}},
		{"file csv upper", userParts(filePart("DATA.CSV", b64("a,b\n1,2"))), Options{}},
		{"file data url", userParts(filePart("a.csv", "data:text/csv;base64,"+b64("a,b"))), Options{}},
		{"file unpadded", userParts(filePart("a.txt", "YQ")), Options{}},
		{"file empty", userParts(filePart("a.txt", "")), Options{}},
		{"file exactly the limit", userParts(filePart("a.txt", b64(strings.Repeat("a", MaxFileBytes)))), Options{}},
		{"duplicate key last wins", `{"model":"m","messages":[` + userHi + `],"n":5,"n":1}`, Options{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustParse(t, tt.body, tt.opts)
		})
	}
}

func TestParseFieldMessages(t *testing.T) {
	tests := []struct {
		body, want string
		opts       Options
	}{
		{body: body(`"temperature":3`), want: "must be between 0 and 2"},
		{body: msgs(`{"role":"bot","content":"x"}`), want: "one of system, user, assistant, tool"},
		{body: userParts(`{"type":"audio"}`), want: "one of text, image_url, file"},
		{body: body(`"n":30`), want: "must be a whole number from 1 to 16"},
		{body: userParts(imagePart("https://example.com/a.png")), want: "remote image URLs are turned off for this organisation"},
		{body: userParts(filePart("a.txt", b64(strings.Repeat("a", MaxFileBytes+1)))), want: "larger than 1 MB"},
		{body: userParts(filePart("a.pdf", b64("a"))), want: "only .txt and .csv files are supported"},
		{body: body(`"max_tokens":1.5`), want: "must be a whole number"},
		// Sealed, the organisation's setting is not why.
		{body: userParts(imagePart("https://example.com/a.png")), want: "an encrypted request carries its images inline", opts: Options{Sealed: true, AllowRemoteImages: true}},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.body), tt.opts)
		ae := apiError(t, err)
		if len(ae.Fields) != 1 || !strings.Contains(ae.Fields[0].Message, tt.want) {
			t.Errorf("Parse(%.80s) fields = %+v, want a message containing %q", tt.body, ae.Fields, tt.want)
		}
		if !strings.Contains(ae.Message, tt.want) {
			t.Errorf("summary %q lacks %q", ae.Message, tt.want)
		}
	}
}

func TestParseRequestFields(t *testing.T) {
	tru, fls := new(true), new(false)
	tests := []struct {
		name  string
		body  string
		check func(t *testing.T, r *Request)
	}{
		{"model and stream", body(`"stream":true`), func(t *testing.T, r *Request) {
			if r.Model != "m" || !r.Stream {
				t.Errorf("Model %q Stream %v", r.Model, r.Stream)
			}
		}},
		{"stream null", body(`"stream":null`), func(t *testing.T, r *Request) {
			if r.Stream {
				t.Error("Stream true")
			}
		}},
		{"max_tokens only", body(`"max_tokens":100`), func(t *testing.T, r *Request) { wantInt(t, "UserMaxTokens", r.UserMaxTokens, 100) }},
		{"max_completion_tokens wins", body(`"max_tokens":100`, `"max_completion_tokens":50`), func(t *testing.T, r *Request) { wantInt(t, "UserMaxTokens", r.UserMaxTokens, 50) }},
		{"max_completion_tokens null", body(`"max_tokens":100`, `"max_completion_tokens":null`), func(t *testing.T, r *Request) { wantInt(t, "UserMaxTokens", r.UserMaxTokens, 100) }},
		{"max_tokens as float", body(`"max_tokens":2.5e2`), func(t *testing.T, r *Request) { wantInt(t, "UserMaxTokens", r.UserMaxTokens, 250) }},
		{"no cap", body(), func(t *testing.T, r *Request) { wantInt(t, "UserMaxTokens", r.UserMaxTokens, 0) }},
		{"one choice unless asked", body(), func(t *testing.T, r *Request) { wantInt(t, "Choices", r.Choices, 1) }},
		{"n null", body(`"n":null`), func(t *testing.T, r *Request) { wantInt(t, "Choices", r.Choices, 1) }},
		{"n", body(`"n":3`), func(t *testing.T, r *Request) { wantInt(t, "Choices", r.Choices, 3) }},
		{"n at the bound", body(`"n":16.0`), func(t *testing.T, r *Request) { wantInt(t, "Choices", r.Choices, MaxChoices) }},
		{"json_object", body(`"response_format":{"type":"json_object"}`), func(t *testing.T, r *Request) {
			if r.JSONMode != "json_object" || r.StrictSchema {
				t.Errorf("JSONMode %q Strict %v", r.JSONMode, r.StrictSchema)
			}
		}},
		{"json_schema strict", body(`"response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true}}`), func(t *testing.T, r *Request) {
			if r.JSONMode != "json_schema" || !r.StrictSchema {
				t.Errorf("JSONMode %q Strict %v", r.JSONMode, r.StrictSchema)
			}
		}},
		{"json_schema not strict", body(`"response_format":{"type":"json_schema","json_schema":{"name":"n","strict":false}}`), func(t *testing.T, r *Request) {
			if r.StrictSchema {
				t.Error("StrictSchema")
			}
		}},
		{"text format", body(`"response_format":{"type":"text"}`), func(t *testing.T, r *Request) {
			if r.JSONMode != "" {
				t.Errorf("JSONMode %q", r.JSONMode)
			}
		}},
		{"thinking unsaid", body(`"reasoning":{"summary":"auto"}`), func(t *testing.T, r *Request) { wantThinking(t, r, nil, "", 0) }},
		{"effort high", body(`"reasoning_effort":"high"`), func(t *testing.T, r *Request) { wantThinking(t, r, tru, "high", 0) }},
		{"effort low via reasoning", body(`"reasoning":{"effort":"low"}`), func(t *testing.T, r *Request) { wantThinking(t, r, tru, "low", 0) }},
		{"top-level effort wins", body(`"reasoning_effort":"medium"`, `"reasoning":{"effort":"high"}`), func(t *testing.T, r *Request) { wantThinking(t, r, tru, "medium", 0) }},
		{"effort none", body(`"reasoning_effort":"none"`), func(t *testing.T, r *Request) { wantThinking(t, r, fls, "", 0) }},
		{"effort minimal", body(`"reasoning":{"effort":"minimal"}`), func(t *testing.T, r *Request) { wantThinking(t, r, fls, "", 0) }},
		{"budget zero", body(`"reasoning":{"max_tokens":0}`), func(t *testing.T, r *Request) { wantThinking(t, r, fls, "", 0) }},
		{"budget", body(`"reasoning":{"max_tokens":2048}`), func(t *testing.T, r *Request) { wantThinking(t, r, nil, "", 2048) }},
		{"budget float form", body(`"reasoning":{"max_tokens":2048.0}`), func(t *testing.T, r *Request) { wantThinking(t, r, nil, "", 2048) }},
		{"enable_thinking true", body(`"enable_thinking":true`), func(t *testing.T, r *Request) { wantThinking(t, r, tru, "", 0) }},
		{"enable_thinking false", body(`"enable_thinking":false`), func(t *testing.T, r *Request) { wantThinking(t, r, fls, "", 0) }},
		{"off wins over on", body(`"reasoning_effort":"high"`, `"enable_thinking":false`), func(t *testing.T, r *Request) { wantThinking(t, r, fls, "high", 0) }},
		{"effort with budget", body(`"reasoning":{"effort":"high","max_tokens":512}`), func(t *testing.T, r *Request) { wantThinking(t, r, tru, "high", 512) }},
		{"prompt chars and images", msgs(
			`{"role":"system","content":"héllo"}`, // 5 characters, 6 bytes
			`{"role":"user","content":[{"type":"text","text":"abc"},`+imagePart(tinyPNG)+`,{"type":"image_url","image_url":`+quote(tinyPNG)+`},`+filePart("a.txt", b64("12345"))+`]}`,
			`{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}`,
			`{"role":"tool","tool_call_id":"c","content":"ok"}`), func(t *testing.T, r *Request) {
			// 5 + 3 + len("a.txt:\n12345") + len(`{"x":1}`) + 2
			wantInt(t, "PromptChars", r.PromptChars, 5+3+12+7+2)
			wantInt(t, "Images", r.Images, 2)
			if len(r.Messages) != 4 {
				t.Fatalf("%d messages", len(r.Messages))
			}
			if string(r.Messages[3]) != `{"role":"tool","tool_call_id":"c","content":"ok"}` {
				t.Errorf("Messages[3] = %s", r.Messages[3])
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, mustParse(t, tt.body, Options{}))
		})
	}
}

func wantInt(t *testing.T, name string, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %d, want %d", name, got, want)
	}
}

func wantThinking(t *testing.T, r *Request, thinking *bool, effort string, budget int) {
	t.Helper()
	if (r.Thinking == nil) != (thinking == nil) || (thinking != nil && *r.Thinking != *thinking) {
		t.Errorf("Thinking = %s, want %s", showBool(r.Thinking), showBool(thinking))
	}
	if r.Effort != effort || r.ThinkingBudget != budget {
		t.Errorf("Effort %q budget %d, want %q %d", r.Effort, r.ThinkingBudget, effort, budget)
	}
}

func showBool(b *bool) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprint(*b)
}

// The request keeps its own copy: a caller reusing its buffer must not
// change what is forwarded.
func TestParseCopiesBody(t *testing.T) {
	buf := []byte(body(`"x":"keep"`))
	r, err := Parse(buf, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = ' '
	}
	if err := r.Prepare(nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(r.Body, []byte(`"x":"keep"`)) || string(r.Messages[0]) != userHi {
		t.Fatalf("Body %s Messages %s", r.Body, r.Messages[0])
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		lit  string
		n    int64
		kind jsonraw.IntResult
	}{
		{"0", 0, jsonraw.IntOK}, {"-0", 0, jsonraw.IntOK}, {"0.0", 0, jsonraw.IntOK}, {"0e999999999999", 0, jsonraw.IntOK},
		{"5", 5, jsonraw.IntOK}, {"5.0", 5, jsonraw.IntOK}, {"5.000", 5, jsonraw.IntOK}, {"5e0", 5, jsonraw.IntOK}, {"50e-1", 5, jsonraw.IntOK}, {"0.5e1", 5, jsonraw.IntOK},
		{"-5", -5, jsonraw.IntOK}, {"-5.0", -5, jsonraw.IntOK}, {"1E3", 1000, jsonraw.IntOK}, {"1e+3", 1000, jsonraw.IntOK}, {"100e-2", 1, jsonraw.IntOK},
		{"5.5", 0, jsonraw.IntFraction}, {"0.1", 0, jsonraw.IntFraction}, {"1e-1", 0, jsonraw.IntFraction}, {"1e-9999999999999", 0, jsonraw.IntFraction},
		{"9223372036854775807", 9223372036854775807, jsonraw.IntOK},
		{"-9223372036854775808", -9223372036854775808, jsonraw.IntOK},
		{"9223372036854775808", 0, jsonraw.IntOverflow},
		{"-9223372036854775809", 0, jsonraw.IntOverflow},
		{"9223372036854775807.0", 9223372036854775807, jsonraw.IntOK},
		{"9.223372036854775807e18", 9223372036854775807, jsonraw.IntOK},
		{"1e19", 0, jsonraw.IntOverflow}, {"1e9999999999999", 0, jsonraw.IntOverflow}, {"123456789012345678901234567890", 0, jsonraw.IntOverflow},
		{"18446744073709551616", 0, jsonraw.IntOverflow},
	}
	for _, tt := range tests {
		n, kind := jsonraw.Int(tt.lit)
		if n != tt.n || kind != tt.kind {
			t.Errorf("jsonraw.Int(%s) = %d, %d; want %d, %d", tt.lit, n, kind, tt.n, tt.kind)
		}
	}
}

func TestValidBase64(t *testing.T) {
	for s, want := range map[string]bool{
		"": true, "QQ==": true, "QQ": true, "QUI=": true, "QUI": true, "QUJD": true, "QUJDRA==": true,
		"Q": false, "QQ=": false, "Q===": false, "QQ==QQ==": false, "QU JD": false, "QUJD\n": false, "QU-_": false, "=": false,
	} {
		if got := ValidBase64(s); got != want {
			t.Errorf("ValidBase64(%q) = %v, want %v", s, got, want)
		}
	}
}

// The scanners only see validated JSON, but must fail cleanly on anything.
func TestScannersRejectMalformed(t *testing.T) {
	for _, s := range []string{``, `{`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,`, `{"a" 1}`, `{a:1}`, `{"a":1]`, `{"a":"x`, `{"a":{"b":1}`, `{"a":}`} {
		if _, err := parseObject([]byte(s)); err == nil {
			t.Errorf("parseObject(%q) accepted", s)
		}
	}
	for _, s := range []string{``, `[`, `[1`, `[1,`, `[1}`, `["x`, `[[1]`, `{}`, `[,]`} {
		if _, err := parseArray([]byte(s)); err == nil {
			t.Errorf("parseArray(%q) accepted", s)
		}
	}
	o, err := parseObject([]byte(` { "a" : [1, {"b": "]"}] , "c":"\"}", "a": 2 } `))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := o.get("a"); string(v) != "2" || len(o.members) != 2 {
		t.Fatalf("members %+v", o.members)
	}
	if v, _ := o.get("c"); string(v) != `"\"}"` {
		t.Fatalf("c = %s", v)
	}
}

// Small objects are searched in order and large ones indexed; both read
// the same: the last of a repeated member wins, in the first one's place.
func TestObjectMembers(t *testing.T) {
	for _, n := range []int{1, indexFrom - 1, indexFrom, 3 * indexFrom} {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		b.WriteString(`"k0":"again"}`)
		o, err := parseObject([]byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		if len(o.members) != n || string(o.members[0].value) != `"again"` {
			t.Fatalf("%d members: got %d, first %s", n, len(o.members), o.members[0].value)
		}
		for i := range n {
			want := strconv.Itoa(i)
			if i == 0 {
				want = `"again"`
			}
			if v, ok := o.get(fmt.Sprintf("k%d", i)); !ok || string(v) != want {
				t.Fatalf("%d members: k%d = %s, %v", n, i, v, ok)
			}
		}
		if _, ok := o.get("absent"); ok {
			t.Fatalf("%d members: found an absent key", n)
		}
		c := o.clone()
		c.set("new", []byte("1"))
		if _, ok := o.get("new"); ok {
			t.Fatalf("%d members: set on a clone changed the original", n)
		}
		if v, ok := c.get("new"); !ok || string(v) != "1" {
			t.Fatalf("%d members: the clone lost its new member", n)
		}
	}
}

// runeCount is utf8.RuneCount for every prefix of a text that puts
// multi-byte, broken and invalid characters across its eight-byte words.
func TestRuneCount(t *testing.T) {
	text := []byte("The quick brown fox, 日本語, jumps\xe6\x97 over the lazy dog \xff and again, é and again, plain to the end")
	for n := range len(text) + 1 {
		if got, want := runeCount(text[:n]), utf8.RuneCount(text[:n]); got != want {
			t.Fatalf("runeCount(%q) = %d, want %d", text[:n], got, want)
		}
	}
}
