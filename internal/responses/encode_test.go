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

// FuzzPlainChunk holds Chunk, which takes plain text chunks by a path of
// their own, to the general path (chunk) on any chunk after any start of a
// stream: the same events for it, and the same stream after it, as the
// events of the chunks that follow and of the end show.
func FuzzPlainChunk(f *testing.F) {
	presets := []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Hello <b> & \u2028"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"think","reasoning":"think"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a\""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
	}
	for _, s := range append(presets,
		`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" fox"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`{"choices":[{"delta":{"content":null,"reasoning":"r"}}]}`, `{"choices":[{"index":1,"delta":{"content":"x"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}`, `{"choices":[{"index":0,"delta":{"content":5}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":null,"reasoning":"r"}}]}`, `{"choices":[{"index":0,"delta":{"reasoning_content":"","reasoning":"r"}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"a","reasoning":"b","content":"c"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"x"}}],"svc":{"worker":{"id":"w","name":"n"}}}`, `{"Choices":[],"choices":[{"delta":{"content":"x"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"x"}}],"error":{"message":"boom","code":"c"}}`, `{"choices":[{"index":0,"Delta":{"content":"y"},"delta":{"content":"x"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"x"}}]`, `{"ch\u006fices":[{"index":0,"delta":{"content":"\ud83d\ude00 \"q\" \xff"}}]}`, `[DONE]`, ``,
	) {
		f.Add([]byte{1, 2}, []byte(s))
	}
	general := func(s *Stream, dst, data []byte) []byte {
		if s.done {
			return dst
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			return s.complete(dst)
		}
		return s.chunk(dst, data)
	}
	f.Fuzz(func(t *testing.T, script, data []byte) {
		req := &Request{Model: "m"}
		fast, slow := req.NewStream("r1", 1), req.NewStream("r1", 1)
		for _, b := range script {
			p := []byte(presets[int(b)%len(presets)])
			general(fast, nil, p)
			general(slow, nil, p)
		}
		if got, want := fast.Chunk(nil, data), general(slow, nil, data); !bytes.Equal(got, want) {
			t.Fatalf("after %v, Chunk(%q) =\n%s\nthe general path writes\n%s", script, data, got, want)
		}
		for _, next := range []string{presets[1], "[DONE]"} {
			if got, want := fast.Chunk(nil, []byte(next)), general(slow, nil, []byte(next)); !bytes.Equal(got, want) {
				t.Fatalf("after %v and %q, the stream differs at %s:\n%s\nagainst\n%s", script, data, next, got, want)
			}
		}
	})
}

// BenchmarkChunk translates a content chunk, as most of a stream's are.
func BenchmarkChunk(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" fox"},"logprobs":null,"finish_reason":null}]}`)
	for name, general := range map[string]bool{"plain": false, "general": true} {
		b.Run(name, func(b *testing.B) {
			s := (&Request{Model: "m"}).NewStream("r1", 1)
			out := s.Chunk(nil, data)
			b.ReportAllocs()
			for b.Loop() {
				if general {
					out = s.chunk(out[:0], data)
				} else {
					out = s.Chunk(out[:0], data)
				}
			}
		})
	}
}

// A raw value is written compact, as encoding/json writes a RawMessage:
// a string token as it stands, anything else without its white space.
func TestAppendRawField(t *testing.T) {
	for raw, want := range map[string]string{
		`"a b"`:                    `,"x":"a b"`,
		`1`:                        `,"x":1`,
		` { "a" : [ 1, "b c" ] } `: `,"x":{"a":[1,"b c"]}`,
		"[\n\ttrue\n]":             `,"x":[true]`,
		``:                         ``,
	} {
		if got := appendRawField(nil, `,"x":`, []byte(raw)); string(got) != want {
			t.Errorf("appendRawField(%q) = %s, want %s", raw, got, want)
		}
	}
}
