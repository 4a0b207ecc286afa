package anthropic

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
)

func toChatSeeds() []string {
	return []string{
		``, `{}`, `[]`, `null`, `{"model":`,
		req(userHi),
		req(userHi, `"system":[{"type":"text","text":"s"}]`, `"stop_sequences":["x"]`, `"temperature":1`, `"top_p":0.5`, `"top_k":5`, `"stream":true`, `"metadata":{"user_id":"u"}`),
		req(userHi, assistant(`{"type":"thinking","thinking":"t","signature":"s"}`, `{"type":"text","text":"a"}`, toolUse),
			user(`{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"r"},`+imgB64+`],"is_error":true}`, `{"type":"text","text":"b"}`)),
		req(user(imgB64, imgURL, `{"type":"document","title":"t","context":"c","source":{"type":"text","data":"d"}}`,
			`{"type":"document","source":{"type":"base64","media_type":"text/plain","data":"`+b64("d")+`"}}`,
			`{"type":"document","source":{"type":"content","content":[{"type":"text","text":"p"},`+imgB64+`]}}`)),
		req(userHi, `"tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}]`, `"tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true}`),
		req(userHi, `"thinking":{"type":"enabled","budget_tokens":2048}`, `"output_config":{"effort":"xhigh","format":{"type":"json_schema","schema":{}}}`),
		req(userHi, `"thinking":{"type":"adaptive"}`),
		req(`{"role":"user","content":[]}`, `{"role":"tool","content":"x"}`, `"max_tokens":0.5`),
	}
}

// FuzzToChat: ToChat never panics, fails only with a 400 or a 422 that
// names its fields, and every body it makes is one the chat parser accepts
// (remote image URLs aside, which are the organisation's call).
func FuzzToChat(f *testing.F) {
	for _, s := range toChatSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, model, stream, err := ToChat(b, remoteOK)
		if err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Message == "" {
				t.Fatalf("ToChat(%q) = %v", b, err)
			}
			switch ae.HTTPStatus() {
			case http.StatusBadRequest:
			case http.StatusUnprocessableEntity:
				if len(ae.Fields) == 0 {
					t.Fatalf("ToChat(%q): 422 without fields", b)
				}
			default:
				t.Fatalf("ToChat(%q) status %d", b, ae.HTTPStatus())
			}
			return
		}
		tr, err := translateFor(b, translation{remoteImages: true})
		if err != nil {
			t.Fatalf("translateFor(%q) = %v, where ToChat took it", b, err)
		}
		if want, err := marshal(tr); err != nil || !bytes.Equal(out, want) {
			t.Fatalf("ToChat(%q) wrote\n %s\nwhere encoding/json writes\n %s (%v)", b, out, want, err)
		}
		r, err := chat.Parse(out, chat.Options{AllowRemoteImages: true})
		if err != nil {
			t.Fatalf("ToChat(%q) = %s, which chat.Parse refuses: %v", b, out, err)
		}
		if r.Model != model || r.Stream != stream || r.UserMaxTokens < 1 {
			t.Fatalf("ToChat(%q) = %s, model %q stream %v; chat reads %+v", b, out, model, stream, r)
		}
		// An organisation without remote images has them refused here,
		// so that the refusal names the client's field.
		if strict, _, _, err := ToChat(b, Options{}); err == nil {
			if _, err := chat.Parse(strict, chat.Options{}); err != nil {
				t.Fatalf("ToChat(%q) without remote images = %s, which chat.Parse refuses: %v", b, strict, err)
			}
		}
		if _, err := chat.Parse(out, chat.Options{}); err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) {
				t.Fatalf("chat.Parse(%s) = %v", out, err)
			}
			for _, fe := range ae.Fields {
				if fe.Type != api.FieldNotAllowed || !strings.HasSuffix(fe.Field, ".image_url.url") {
					t.Fatalf("ToChat(%q) = %s, which chat.Parse refuses: %v", b, out, err)
				}
			}
		}
	})
}

func streamSeeds() []string {
	return []string{
		strings.Join([]string{
			delta(`{"role":"assistant","content":""}`, ""),
			delta(`{"reasoning_content":"r"}`, ""),
			delta(`{"content":"a"}`, ""),
			delta(`{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]}`, ""),
			delta(`{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}`, ""),
			delta(`{"tool_calls":[{"index":1,"id":"d","function":{"name":"g"}}]}`, ""),
			delta(`{}`, "tool_calls"),
			usageChunk, noticeChunk, svcChunk, "[DONE]",
		}, "\n"),
		strings.Join([]string{delta(`{"content":"x"}`, "stop"), `{"choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":"E"}]}`, "[DONE]"}, "\n"),
		strings.Join([]string{delta(`{"tool_calls":[{"function":{"arguments":"{"}}]}`, ""), delta(`{"content":"t"}`, ""), `{"error":{"message":"m","status":503}}`}, "\n"),
		"not json\n[1]\n{}\n[DONE]",
	}
}

// FuzzStream: whatever the chunks (one per line of the input), the output
// is well-formed events that the SDKs' accumulators take: message_start
// first, blocks one at a time in index order, and message_delta and
// message_stop last, or an error event.
func FuzzStream(f *testing.F) {
	for _, s := range streamSeeds() {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, done bool) {
		s := NewStream("r1", "m", 0)
		var out []byte
		for _, line := range bytes.Split(b, []byte("\n")) {
			out = s.Chunk(out, line)
		}
		if done {
			out = s.Chunk(out, []byte("[DONE]"))
		}
		a := newAccumulator()
		if err := a.feed(out); err != nil {
			t.Fatalf("chunks %q: %v\n%s", b, err, out)
		}
		if done && !a.stopped && a.failed == nil {
			t.Fatalf("chunks %q: the stream did not end\n%s", b, out)
		}
	})
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
		`{"choices":[],"svc":{"worker":"w"}}`, `{"choices":[{"index":0,"delta":{"content":"x"}}],"svc":{"worker":{"id":"w","name":"n"}}}`,
		`{"choices":[{"index":0,"delta":{"content":"x"}}],"error":{"message":"boom","status":503}}`, `{"choices":[{"index":0,"delta":{"content":"x"}},{"index":1}]}`, `{"error":null,"choices":[{"delta":{"content":"x"}}]}`,
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
			return s.end(dst)
		}
		return s.chunk(dst, data)
	}
	f.Fuzz(func(t *testing.T, script, data []byte) {
		fast, slow := NewStream("r1", "m", 0), NewStream("r1", "m", 0)
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
