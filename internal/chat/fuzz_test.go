package chat

import (
	"bytes"
	"errors"
	"net/http"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func seedBodies() []string {
	return []string{
		``, `{}`, `[]`, `null`, `{"model":`, body(), msgs(userHi, `{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`, `{"role":"tool","tool_call_id":"c","content":"x"}`),
		body(`"stream":true`, `"stream_options":{"include_usage":false,"x":1}`, `"max_tokens":5.0`, `"reasoning":{"max_tokens":64,"effort":"low"}`),
		body(`"reasoning_effort":"none"`, `"enable_thinking":false`, `"temperature":2`, `"seed":-9223372036854775808`, `"logit_bias":{"1":-100}`),
		body(`"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{},"strict":true}}`, `"tools":[{"type":"function","function":{"name":"f"}}]`, `"tool_choice":"auto"`),
		body(`"x_unknown":{"a":[1,2,{"b":null}]}`, `"n":1`, `"stop":["a","b"]`, `"max_completion_tokens":9223372036854775807`),
		userParts(`{"type":"text","text":"a"}`, imagePart(tinyPNG), filePart("a.txt", b64("hello\nworld")), `{"type":"image_url","image_url":"https://x.test/a.png"}`),
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"n":5,"n":1,"reasoning":null,"max\u005ftokens":3}`,
		`{"model":"m","messages":[{"role":"user","content":"` + string(bytes.Repeat([]byte("x"), 6000)) + `"}]}`,
	}
}

// FuzzParse: Parse never panics, and every failure is a 400 or a 422 with
// a message (and, for a 422, at least one field).
func FuzzParse(f *testing.F) {
	for _, s := range seedBodies() {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, remote bool) {
		r, err := Parse(b, Options{AllowRemoteImages: remote})
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
