package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonraw"
)

func seedBodies() []string {
	return []string{
		``, `{}`, `[]`, `null`, `{"model":`, body(), msgs(userHi, `{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`, `{"role":"tool","tool_call_id":"c","content":"x"}`),
		body(`"stream":true`, `"stream_options":{"include_usage":false,"x":1}`, `"max_tokens":5.0`, `"reasoning":{"max_tokens":64,"effort":"low"}`),
		body(`"reasoning_effort":"none"`, `"enable_thinking":false`, `"temperature":2`, `"seed":-9223372036854775808`, `"logit_bias":{"1":-100}`),
		body(`"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{},"strict":true}}`, `"tools":[{"type":"function","function":{"name":"f"}}]`, `"tool_choice":"auto"`),
		body(`"x_unknown":{"a":[1,2,{"b":null}]}`, `"n":1`, `"stop":["a","b"]`, `"max_completion_tokens":9223372036854775807`),
		body(`"MAX_TOKENS":5`), body(`"Max_Completion_Tokens":5`, `"stream":true`, `"Stream_Options":{}`), body(`"REASONING":{"max_tokens":9}`), body(`"N":100`),
		userParts(`{"type":"text","text":"a"}`, imagePart(tinyPNG), filePart("a.txt", b64("hello\nworld")), `{"type":"image_url","image_url":"https://x.test/a.png"}`),
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"n":5,"n":1,"reasoning":null,"max\u005ftokens":3}`,
		`{"model":"m","messages":[{"role":"user","content":"` + string(bytes.Repeat([]byte("x"), 6000)) + `"}]}`,
		// Not JSON past what the checks read first, and in a name.
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"x":[1,}`, `{"model":"m","messages":[{"role":"user","content":"hi"}]} x`,
		"{\"mo\x01del\":\"m\",\"messages\":[]}", `{"model":"m","messages":[{"role":"user","content":"hi"},]}`,
	}
}

// FuzzParse: Parse never panics, every failure is a 400 or a 422 with a
// message (and, for a 422, at least one field), and a body is refused as
// malformed JSON exactly when encoding/json finds it so.
func FuzzParse(f *testing.F) {
	for _, s := range seedBodies() {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, remote bool) {
		r, err := Parse(b, Options{AllowRemoteImages: remote})
		var malformed *api.Error
		if errors.As(err, &malformed) && !strings.HasPrefix(malformed.Message, "Malformed JSON") {
			malformed = nil
		}
		if valid := json.Valid(b); valid == (malformed != nil) && len(bytes.TrimSpace(b)) > 0 {
			t.Fatalf("Parse(%q) = %v, but json.Valid says %v", b, err, valid)
		}
		if err == nil {
			if r == nil || r.Model == "" || len(r.Messages) == 0 {
				t.Fatalf("Parse(%q) accepted an incomplete request: %+v", b, r)
			}
			return
		}
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Message == "" {
			t.Fatalf("Parse(%q) = %v", b, err)
		}
		switch ae.HTTPStatus() {
		case http.StatusBadRequest:
		case http.StatusUnprocessableEntity:
			if len(ae.Fields) == 0 {
				t.Fatalf("Parse(%q): 422 without fields", b)
			}
		default:
			t.Fatalf("Parse(%q) status %d", b, ae.HTTPStatus())
		}
	})
}

// FuzzPrepare: whatever Parse accepts, Prepare either refuses as too long
// for the window or produces a body that is itself a valid request, with
// a usable cap and every unowned top-level field intact.
func FuzzPrepare(f *testing.F) {
	for _, s := range seedBodies() {
		f.Add([]byte(s), uint8(0))
	}
	models := []*api.Model{nil, plainModel, budgetModel, noBudgetModel, quietModel, budgetOnly, model(1000, new(true), api.CapReasoning, api.CapThinkingBudget)}
	owned := map[string]bool{"messages": true, "max_tokens": true, "max_completion_tokens": true, "reasoning": true, "stream_options": true}
	f.Fuzz(func(t *testing.T, b []byte, which uint8) {
		r, err := Parse(b, Options{AllowRemoteImages: true})
		if err != nil {
			return
		}
		m := models[int(which)%len(models)]
		if err := r.Prepare(m); err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusBadRequest || ae.Type != TypeContextLengthExceeded || m == nil || m.ContextWindow == 0 {
				t.Fatalf("Prepare(%q) = %v", b, err)
			}
			return
		}
		if r.EngineMaxTokens < 1 || (r.UserMaxTokens > 0 && r.EngineMaxTokens < r.UserMaxTokens) {
			t.Fatalf("EngineMaxTokens %d for %q", r.EngineMaxTokens, b)
		}
		again, err := Parse(r.Body, Options{AllowRemoteImages: true})
		if err != nil {
			t.Fatalf("prepared body %s does not parse: %v", r.Body, err)
		}
		if again.UserMaxTokens != r.EngineMaxTokens || again.Stream != r.Stream || again.Model != r.Model {
			t.Fatalf("prepared body %s reads back as %+v", r.Body, again)
		}
		before, _ := parseObject(bytes.TrimSpace(b))
		after, _ := parseObject(r.Body)
		for _, mem := range before.members {
			if owned[mem.key] {
				continue
			}
			if v, ok := after.get(mem.key); !ok || !bytes.Equal(v, mem.value) {
				t.Fatalf("%s changed from %s to %s", mem.key, mem.value, v)
			}
		}
		_ = r.Notice(Outcome{FinishReason: "length"}, nil, m)
		_ = r.Notice(Outcome{FinishReason: "stop", Content: "x", ReasoningTokens: 1 << 20}, nil, m)
	})
}

// FuzzStringChars: counting a raw string's characters without decoding it
// gives what decoding and counting gives.
func FuzzStringChars(f *testing.F) {
	for _, s := range []string{`""`, `"a"`, `"hello\nsim: tokens=16"`, `"\\\""`, `"é\u00e9"`, `"\ud83d\ude00x"`,
		`"\ud83d"`, `"\ud83dx"`, `"\ude00\ud83d"`, `"\ud83d\u0041"`, `"\uD83D\uDE00"`, "\"\xff\xfe\"", `"\/\b\f\r\t"`,
		"\"The quick brown fox, 日本語, jumps\xe6\x97 over the lazy \\\"dog\\\" \xff and again, \u00e9 and again\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var s string
		if json.Unmarshal(raw, &s) != nil || jsonraw.KindOf(raw) != jsonraw.String {
			return
		}
		if got, want := stringChars(raw), utf8.RuneCountInString(s); got != want {
			t.Fatalf("stringChars(%q) = %d, want %d (%q)", raw, got, want, s)
		}
	})
}

// Prepare's body is the parsed object with its overrides set in turn:
// encodeWith must give what a clone with each set encodes to.
func TestEncodeWithIsCloneAndSet(t *testing.T) {
	tests := []struct {
		name string
		body string
		over []member
	}{
		{"all new", `{"a":1}`, []member{{key: "x", value: []byte(`2`)}, {key: "y", value: []byte(`3`)}}},
		{"in place", `{"x":1,"b":2}`, []member{{key: "x", value: []byte(`9`)}}},
		{"mixed, order kept", `{"b":1,"y":2,"x":3}`, []member{{key: "x", value: []byte(`"x"`)}, {key: "z", value: []byte(`0`)}, {key: "y", value: []byte(`[]`)}}},
		{"escaped key kept as sent", `{"max\u005ftokens":3,"c":1}`, []member{{key: "max_tokens", value: []byte(`7`)}}},
		{"duplicate key", `{"x":1,"x":2,"a":0}`, []member{{key: "x", value: []byte(`5`)}}},
		{"empty object", `{}`, []member{{key: "x", value: []byte(`1`)}}},
		{"nothing to set", `{"a":1}`, nil},
		{"key needing quotes", `{}`, []member{{key: "a\"b", value: []byte(`1`)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseObject([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			want := o.clone()
			for _, m := range tt.over {
				want.set(m.key, m.value)
			}
			if got, want := o.encodeWith(tt.over), want.encode(); !bytes.Equal(got, want) {
				t.Errorf("encodeWith = %s, want %s", got, want)
			}
		})
	}
}

// FuzzParseBody: parseBody accepts what json.Valid does, when it is an
// object, and splits it into the members parseObject, which only splits,
// finds in it.
func FuzzParseBody(f *testing.F) {
	for _, s := range seedBodies() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parseBody(b)
		if want := json.Valid(b) && jsonraw.KindOf(b) == jsonraw.Object; ok != want {
			t.Fatalf("parseBody(%q) ok = %v, want %v", b, ok, want)
		}
		if !ok {
			return
		}
		want, err := parseObject(b)
		if err != nil {
			t.Fatalf("parseObject(%q) = %v for a body parseBody took", b, err)
		}
		if len(got.members) != len(want.members) {
			t.Fatalf("parseBody(%q): %d members, parseObject %d", b, len(got.members), len(want.members))
		}
		for i, m := range want.members {
			g := got.members[i]
			if g.key != m.key || !bytes.Equal(g.rawKey, m.rawKey) || !bytes.Equal(g.value, m.value) {
				t.Fatalf("parseBody(%q) member %d = %q %q %q, parseObject %q %q %q", b, i, g.rawKey, g.key, g.value, m.rawKey, m.key, m.value)
			}
		}
	})
}

// FuzzDecodeString: a JSON string reads as encoding/json reads it, short
// or long, escaped or not.
func FuzzDecodeString(f *testing.F) {
	for _, s := range []string{`""`, `"role"`, `"assistant"`, `"a\nb"`, `"é"`, `"日本語"`, "\"\xff\"", `"\u00e9"`,
		`"sixteen bytes ok"`, `"seventeen bytes!!"`, ` "spaced" `, `"\ud83d"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want string
		if json.Unmarshal(raw, &want) != nil {
			return
		}
		if got, ok := decodeString(raw); !ok || got != want {
			t.Fatalf("decodeString(%q) = %q, %v; encoding/json reads %q", raw, got, ok, want)
		}
	})
}
