package responses

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzAppendChat holds the chat body Parse writes by hand to what
// encoding/json writes for the same request, byte for byte, spacing in
// the client's values included.
func FuzzAppendChat(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","instructions":"sys <b> & \u2028","input":[{"role":"developer","content":"d"},{"role":"user","content":[ {"type":"input_text" , "text":"a"} ]}]}`,
		`{"model":"m","input":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"output_text","text":"t","annotations":[]}]},` +
			`{"type":"function_call","call_id":"c1","name":"f","arguments":"{ }"},{"type":"function_call_output","call_id":"c1","output":[ {"type":"input_text","text":"y"} ]}]}`,
		`{"model":"m","input":"x","stream":true,"max_output_tokens":1e3,"temperature" : 2 ,"top_p":0,"parallel_tool_calls":true,"user":"u","truncation":"auto","metadata":{ "a" : 1 }}`,
		`{"model":"m","input":"x","tools":[{"type":"function","name":"f","description":"d","parameters":{ "type" : "object" },"strict":true}],"tool_choice":{ "type":"function","name":"f" }}`,
		`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{ "type":"object" },"strict":true}},"reasoning":{"effort":"high"}}`,
		`{"model":"m","input":[{"role":"assistant","content":[]},{"type":"function_call","call_id":"c","name":"f","arguments":""}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := check(body)
		if err != nil {
			return
		}
		if got, want := appendChat(nil, &c.out), marshal(&c.out); !bytes.Equal(got, want) {
			t.Fatalf("appendChat wrote\n %s\nencoding/json writes\n %s\nfor %q", got, want, body)
		}
	})
}

// BenchmarkParse turns a conversation of 27 KB into its chat request.
func BenchmarkParse(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","instructions":"You are a helpful assistant.","input":[`)
	for i := range 80 {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`{"role":"user","content":"The quick brown fox jumps over the lazy dog, 日本語. ` +
			`The quick brown fox jumps over the lazy dog, \"quoted\".\n"},{"role":"assistant","content":[{"type":"output_text",` +
			`"text":"The quick brown fox jumps over the lazy dog, once more. The quick brown fox jumps over the lazy dog, and again.","annotations":[]}]}`)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}
