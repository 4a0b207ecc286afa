package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
)

// reasoningBase is the part of every request that the mapping must leave
// alone. The spacing and escapes inside the values check that they go out
// byte for byte.
const reasoningBase = `"model":"m","messages":[{"role":"user","content":"hi <there> \u00e9"}],"max_tokens": 4096,"max_completion_tokens":8192,"x_custom":{"keep": [1, 2.50, "a"]}`

func reasoningRequest(fields string) string {
	if fields == "" {
		return "{" + reasoningBase + "}"
	}
	return "{" + reasoningBase + "," + fields + "}"
}

type reasoningCase struct {
	name   string
	fields string // the request's reasoning fields, added to reasoningBase
	// set is a JSON object of the top-level fields the engine must get
	// added or replaced; everything else must arrive as sent. Empty means
	// the body is forwarded unchanged.
	set string
}

// unchangedCases hold for every flavour: nothing to map.
var unchangedCases = []reasoningCase{
	{name: "no reasoning fields"},
	{name: "only the client's chat_template_kwargs", fields: `"chat_template_kwargs": {"enable_thinking": false}`},
	{name: "reasoning as a string value", fields: `"x_note":"reasoning","x_other":"enable_thinking"`},
	{name: "enable_thinking null", fields: `"enable_thinking":null`},
	{name: "effort the mapping does not know", fields: `"reasoning_effort":"xhigh"`},
}

var reasoningFlavours = []struct {
	name   string
	models string // /v1/models answer; empty: Models is never called
	cases  []reasoningCase
}{
	{
		name:   "vllm",
		models: vllmModels,
		cases: []reasoningCase{
			{name: "enable_thinking false", fields: `"enable_thinking":false`, set: `{"chat_template_kwargs":{"enable_thinking":false}}`},
			{name: "enable_thinking true", fields: `"enable_thinking":true`, set: `{"chat_template_kwargs":{"enable_thinking":true}}`},
			{name: "effort high", fields: `"reasoning_effort":"high"`, set: `{"chat_template_kwargs":{"enable_thinking":true}}`},
			{name: "effort none", fields: `"reasoning_effort":"none"`, set: `{"chat_template_kwargs":{"enable_thinking":false}}`},
			{name: "effort minimal", fields: `"reasoning_effort":"minimal"`, set: `{"chat_template_kwargs":{"enable_thinking":false}}`},
			{name: "reasoning.effort low", fields: `"reasoning":{"effort":"low"}`, set: `{"chat_template_kwargs":{"enable_thinking":true}}`},
			{name: "budget", fields: `"reasoning":{"max_tokens": 2048}`,
				set: `{"chat_template_kwargs":{"enable_thinking":true},"thinking_token_budget":2048}`},
			{name: "budget with effort", fields: `"reasoning":{"max_tokens":1024,"effort":"medium"},"reasoning_effort":"medium"`,
				set: `{"chat_template_kwargs":{"enable_thinking":true},"thinking_token_budget":1024}`},
			{name: "budget written as a float", fields: `"reasoning":{"max_tokens":1.024e3}`,
				set: `{"chat_template_kwargs":{"enable_thinking":true},"thinking_token_budget":1024}`},
			{name: "zero budget is off", fields: `"reasoning":{"max_tokens":0}`, set: `{"chat_template_kwargs":{"enable_thinking":false}}`},
			{name: "off wins", fields: `"reasoning_effort":"high","enable_thinking":false,"reasoning":{"max_tokens":2048}`,
				set: `{"chat_template_kwargs":{"enable_thinking":false}}`},
			{name: "client kwargs merged", fields: `"chat_template_kwargs":{"thinking": true, "custom":[1, 2]},"enable_thinking":false`,
				set: `{"chat_template_kwargs":{"thinking":true,"custom":[1,2],"enable_thinking":false}}`},
			{name: "client kwargs not overridden", fields: `"chat_template_kwargs":{"enable_thinking": true},"reasoning":{"max_tokens":0}`},
			{name: "client kwargs not overridden, budget added", fields: `"chat_template_kwargs":{"enable_thinking":false},"reasoning":{"max_tokens":512}`,
				set: `{"thinking_token_budget":512}`},
			{name: "client budget kept", fields: `"thinking_token_budget":100,"reasoning":{"max_tokens":2048}`,
				set: `{"chat_template_kwargs":{"enable_thinking":true}}`},
			{name: "null kwargs replaced", fields: `"chat_template_kwargs":null,"enable_thinking":true`,
				set: `{"chat_template_kwargs":{"enable_thinking":true}}`},
			{name: "kwargs that are not an object left alone", fields: `"chat_template_kwargs":"odd","enable_thinking":true`},
		},
	},
	{
		name:   "llamacpp",
		models: llamaModels,
		cases: []reasoningCase{
			{name: "budget", fields: `"reasoning":{"max_tokens":2048}`,
				set: `{"chat_template_kwargs":{"enable_thinking":true},"thinking_budget_tokens":2048,"reasoning_budget_tokens":2048}`},
			{name: "enable_thinking false", fields: `"enable_thinking":false`,
				set: `{"chat_template_kwargs":{"enable_thinking":false},"thinking_budget_tokens":0,"reasoning_budget_tokens":0}`},
			{name: "effort minimal", fields: `"reasoning_effort":"minimal"`,
				set: `{"chat_template_kwargs":{"enable_thinking":false},"thinking_budget_tokens":0,"reasoning_budget_tokens":0}`},
			{name: "zero budget", fields: `"reasoning":{"max_tokens":0}`,
				set: `{"chat_template_kwargs":{"enable_thinking":false},"thinking_budget_tokens":0,"reasoning_budget_tokens":0}`},
			{name: "effort high, no budget", fields: `"reasoning_effort":"high"`, set: `{"chat_template_kwargs":{"enable_thinking":true}}`},
			{name: "client kwargs not overridden, budget added", fields: `"chat_template_kwargs":{"enable_thinking":false},"reasoning":{"max_tokens":512}`,
				set: `{"thinking_budget_tokens":512,"reasoning_budget_tokens":512}`},
			{name: "client budget kept", fields: `"thinking_budget_tokens":-1,"enable_thinking":false`,
				set: `{"chat_template_kwargs":{"enable_thinking":false},"reasoning_budget_tokens":0}`},
		},
	},
	{
		name:   "sglang",
		models: sglangModels,
		cases: []reasoningCase{
			{name: "effort medium", fields: `"reasoning_effort":"medium"`,
				set: `{"chat_template_kwargs":{"enable_thinking":true},"separate_reasoning":true}`},
			{name: "enable_thinking false", fields: `"enable_thinking":false`, set: `{"chat_template_kwargs":{"enable_thinking":false}}`},
			{name: "effort none", fields: `"reasoning_effort":"none"`, set: `{"chat_template_kwargs":{"enable_thinking":false}}`},
			{name: "effort minimal becomes none", fields: `"reasoning_effort":"minimal"`,
				set: `{"chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"none"}`},
			{name: "budget turns thinking on", fields: `"reasoning":{"max_tokens":2048}`,
				set: `{"chat_template_kwargs":{"enable_thinking":true},"separate_reasoning":true}`},
			{name: "client separate_reasoning kept", fields: `"separate_reasoning":false,"enable_thinking":true`,
				set: `{"chat_template_kwargs":{"enable_thinking":true}}`},
		},
	},
	{
		name:   "ollama",
		models: ollamaModels,
		cases: []reasoningCase{
			{name: "reasoning.effort copied", fields: `"reasoning":{"effort":"high"}`, set: `{"reasoning_effort":"high"}`},
			{name: "enable_thinking false", fields: `"enable_thinking":false`, set: `{"reasoning_effort":"none"}`},
			{name: "effort minimal", fields: `"reasoning_effort":"minimal"`, set: `{"reasoning_effort":"none"}`},
			{name: "effort none", fields: `"reasoning_effort":"none"`},
			{name: "zero budget", fields: `"reasoning":{"max_tokens": 0}`,
				set: `{"reasoning_effort":"none","reasoning":{"max_tokens":0,"effort":"none"}}`},
			{name: "effort copied into the reasoning object", fields: `"reasoning_effort":"low","reasoning":{"max_tokens":1024}`,
				set: `{"reasoning":{"max_tokens":1024,"effort":"low"}}`},
			{name: "off wins", fields: `"reasoning_effort":"high","reasoning":{"effort":"high"},"enable_thinking":false`,
				set: `{"reasoning_effort":"none","reasoning":{"effort":"none"}}`},
			{name: "enable_thinking true", fields: `"enable_thinking":true`},
			{name: "efforts agree", fields: `"reasoning_effort":"medium","reasoning":{"effort":"medium"}`},
		},
	},
	{
		name:   "generic",
		models: genericModels,
		cases: []reasoningCase{
			{name: "enable_thinking true", fields: `"enable_thinking":true`, set: `{"chat_template_kwargs":{"enable_thinking":true}}`},
			{name: "budget", fields: `"reasoning":{"max_tokens":2048}`, set: `{"chat_template_kwargs":{"enable_thinking":true}}`},
			{name: "effort none", fields: `"reasoning_effort":"none"`, set: `{"chat_template_kwargs":{"enable_thinking":false}}`},
			{name: "reasoning.effort low", fields: `"reasoning":{"effort":"low"}`, set: `{"chat_template_kwargs":{"enable_thinking":true}}`},
		},
	},
	{
		name: "undetected",
		cases: []reasoningCase{
			{name: "enable_thinking false", fields: `"enable_thinking":false`, set: `{"chat_template_kwargs":{"enable_thinking":false}}`},
		},
	},
}

func TestReasoningMapping(t *testing.T) {
	for _, fl := range reasoningFlavours {
		t.Run(fl.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{
				"/v1/models": jsonHandler(200, fl.models),
				"/props":     jsonHandler(200, llamaProps),
				"/v1/chat/completions": func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("Accept") == "text/event-stream" {
						sseHandler(0, append(frames(genericChunk1, genericChunk2), done)...)(w, r)
						return
					}
					jsonHandler(200, vllmPlainCompletion)(w, r)
				},
			})
			e := newEngine(t, f.URL)
			if fl.models != "" {
				if _, err := e.Models(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			for _, tc := range append(append([]reasoningCase(nil), unchangedCases...), fl.cases...) {
				t.Run(tc.name, func(t *testing.T) {
					for _, stream := range []bool{false, true} {
						req := reasoningRequest(tc.fields)
						wantStatus(t, e.Serve(context.Background(), chatReq(stream, req), &sink{}), 200)
						checkReasoningBody(t, stream, req, tc.set, f.last(t, chatPath).Body)
					}
				})
			}
		})
	}
}

// checkReasoningBody checks what the engine got for req: req with the
// fields in set added or replaced and, when streaming, the streaming
// switches. Values set does not name must arrive byte for byte, inside
// objects set changes too.
func checkReasoningBody(t *testing.T, stream bool, req, set string, sent []byte) {
	t.Helper()
	mode := "non-streaming"
	if stream {
		mode = "streaming"
	}
	if set == "" {
		want := []byte(req)
		if stream {
			var err error
			if want, err = streamBody(want); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(sent, want) {
			t.Errorf("%s: body changed:\n got %s\nwant %s", mode, sent, want)
		}
		return
	}

	got := decode(t, sent)
	if stream {
		if got["stream"] != true || !reflect.DeepEqual(got["stream_options"], map[string]any{"include_usage": true}) {
			t.Errorf("%s: streaming switches missing: %s", mode, sent)
		}
		delete(got, "stream")
		delete(got, "stream_options")
	}
	want := decode(t, []byte(req))
	for k, v := range decode(t, []byte(set)) {
		want[k] = v
	}
	if !reflect.DeepEqual(got, want) {
		gotJS, _ := json.Marshal(got)
		wantJS, _ := json.Marshal(want)
		t.Errorf("%s: engine got\n %s\nwant\n %s", mode, gotJS, wantJS)
	}

	var sentRaw, reqRaw, setRaw map[string]json.RawMessage
	for _, u := range []struct {
		b []byte
		m *map[string]json.RawMessage
	}{{sent, &sentRaw}, {[]byte(req), &reqRaw}, {[]byte(set), &setRaw}} {
		if err := json.Unmarshal(u.b, u.m); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range reqRaw {
		changed, ok := setRaw[k]
		if !ok {
			if !bytes.Equal(sentRaw[k], v) {
				t.Errorf("%s: %s re-encoded: got %s, want %s", mode, k, sentRaw[k], v)
			}
			continue
		}
		// An object the mapping wrote to keeps the client's other members
		// as they were.
		var reqObj, sentObj, setObj map[string]json.RawMessage
		if json.Unmarshal(v, &reqObj) != nil || json.Unmarshal(sentRaw[k], &sentObj) != nil || json.Unmarshal(changed, &setObj) != nil {
			continue
		}
		for ik, iv := range reqObj {
			if _, ok := setObj[ik]; ok && !bytes.Equal(setObj[ik], iv) {
				continue
			}
			if !bytes.Equal(sentObj[ik], iv) {
				t.Errorf("%s: %s.%s re-encoded: got %s, want %s", mode, k, ik, sentObj[ik], iv)
			}
		}
	}
}

func TestThinkMode(t *testing.T) {
	tests := []struct {
		fields string
		want   thinkMode
		budget int64
	}{
		{fields: `"reasoning_effort":"none"`, want: thinkOff, budget: -1},
		{fields: `"reasoning_effort":"minimal"`, want: thinkOff, budget: -1},
		{fields: `"reasoning":{"effort":"none"}`, want: thinkOff, budget: -1},
		{fields: `"reasoning":{"effort":"minimal"},"reasoning_effort":"high"`, want: thinkOff, budget: -1},
		{fields: `"reasoning":{"max_tokens":0}`, want: thinkOff, budget: 0},
		{fields: `"enable_thinking":false,"reasoning":{"max_tokens":100}`, want: thinkOff, budget: 100},
		{fields: `"enable_thinking":true`, want: thinkOn, budget: -1},
		{fields: `"reasoning_effort":"low"`, want: thinkOn, budget: -1},
		{fields: `"reasoning_effort":"medium"`, want: thinkOn, budget: -1},
		{fields: `"reasoning":{"effort":"high"}`, want: thinkOn, budget: -1},
		{fields: `"reasoning":{"max_tokens":8192}`, want: thinkOn, budget: 8192},
		{fields: `"reasoning":{"max_tokens":8192.0}`, want: thinkOn, budget: 8192},
		{fields: `"reasoning_effort":"xhigh"`, want: thinkDefault, budget: -1},
		{fields: `"reasoning_effort":null,"enable_thinking":null,"reasoning":null`, want: thinkDefault, budget: -1},
		{fields: `"reasoning":{"max_tokens":null}`, want: thinkDefault, budget: -1},
		{fields: `"reasoning":{"max_tokens":"100"}`, want: thinkDefault, budget: -1},
		{fields: `"reasoning":{"max_tokens":-1}`, want: thinkDefault, budget: -1},
		{fields: `"reasoning":{"max_tokens":1.5}`, want: thinkDefault, budget: -1},
		{fields: `"reasoning":[1]`, want: thinkDefault, budget: -1},
		{fields: `"enable_thinking":"false"`, want: thinkDefault, budget: -1},
	}
	for _, tt := range tests {
		t.Run(tt.fields, func(t *testing.T) {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte("{"+tt.fields+"}"), &m); err != nil {
				t.Fatal(err)
			}
			c, ok := readReasoning(m)
			if !ok {
				t.Fatal("no reasoning fields found")
			}
			if got := c.mode(); got != tt.want {
				t.Errorf("mode = %d, want %d", got, tt.want)
			}
			if c.budget != tt.budget {
				t.Errorf("budget = %d, want %d", c.budget, tt.budget)
			}
		})
	}
}

func TestMapReasoningLeavesOddBodies(t *testing.T) {
	for _, body := range []string{
		`{"enable_thinking":true`,
		`["enable_thinking"]`,
		`null`,
		``,
	} {
		for _, fl := range []flavour{flavourGeneric, flavourVLLM, flavourLlamaCpp, flavourSGLang, flavourOllama} {
			if got := mapReasoning([]byte(body), fl); string(got) != body {
				t.Errorf("%v: mapReasoning(%q) = %q", fl, body, got)
			}
		}
	}
}

// The non-streaming body goes to the engine as the same slice when there
// is nothing to map: no copy, no decoding.
func TestMapReasoningFastPath(t *testing.T) {
	body := []byte(reasoningRequest(`"reasoning_content":"x"`))
	if got := mapReasoning(body, flavourVLLM); &got[0] != &body[0] || len(got) != len(body) {
		t.Fatal("body copied")
	}
	if n := testing.AllocsPerRun(100, func() { mapReasoning(body, flavourVLLM) }); n != 0 {
		t.Fatalf("%v allocations without reasoning fields", n)
	}
}

// Only a top-level member can switch thinking; the names anywhere else,
// in a message or a nested object, leave the body as it came. A name the
// reader cannot see plainly is decoded to be sure.
func TestOnlyTopLevelNamesSwitchThinking(t *testing.T) {
	for body, mapped := range map[string]bool{
		`{"model":"m","reasoning_effort":"none"}`:                                                          true,
		`{"reasoning":{"max_tokens":0},"model":"m"}`:                                                       true,
		`{"model":"m","enable_thinking":false}`:                                                            true,
		`{"\u0072easoning_effort":"none"}`:                                                                 true,
		`{"model":"m","messages":[{"role":"user","content":"say \"reasoning\" and \"enable_thinking\""}]}`: false,
		`{"model":"m","metadata":{"reasoning_effort":"none"}}`:                                             false,
		`{"model":"m","reasoning_content":"x","thinking":true}`:                                            false,
		`{"model":"m","tools":[{"type":"function","function":{"name":"reasoning"}}]}`:                      false,
	} {
		b := []byte(body)
		got := mapReasoning(b, flavourVLLM)
		if !mapped {
			if &got[0] != &b[0] || len(got) != len(b) {
				t.Errorf("mapReasoning(%s) = %s, want the body as it came", body, got)
			}
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(got, &m); err != nil || string(m["chat_template_kwargs"]) != `{"enable_thinking":false}` {
			t.Errorf("mapReasoning(%s) = %s, want thinking switched off", body, got)
		}
	}
}

// FuzzMapReasoning: mapping the top-level members in place gives what
// decoding and encoding the whole body gives, for every engine: the same
// JSON when it changes the body, and the body as it came when that does
// not.
func FuzzMapReasoning(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","reasoning_effort":"low","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","reasoning":{"effort":"high","max_tokens":512,"x":1},"chat_template_kwargs":{"a":1}}`,
		`{"model":"m","enable_thinking":false,"chat_template_kwargs":null,"thinking_token_budget":null}`,
		`{"reasoning_effort":"minimal","reasoning":{},"reasoning_effort":"none"}`,
		`{"reasoning_effort":"medium","chat_template_kwargs":{"enable_thinking":true}}`,
		`{ "enable_thinking" : true , "separate_reasoning" : false }  `,
		`{"\u0072easoning_effort":"none","model":"m"}`,
		`{"reasoning":{"max_tokens":0}}`, `{}`, `{"model":"m"}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return
		}
		for _, fl := range []flavour{flavourGeneric, flavourVLLM, flavourLlamaCpp, flavourSGLang, flavourOllama} {
			got := mapReasoning(bytes.Clone(body), fl)
			want := mapReasoningDecoded(bytes.Clone(body), fl)
			if bytes.Equal(want, body) {
				if !bytes.Equal(got, body) {
					t.Fatalf("%v: mapReasoning(%s) = %s, want it unchanged", fl, body, got)
				}
				continue
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("%v: mapReasoning(%s) = %s: %v", fl, body, got, err)
			}
			_ = json.Unmarshal(want, &w)
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("%v: mapReasoning(%s) =\n %s\ndecoding the whole body gives\n %s", fl, body, got, want)
			}
		}
	})
}

// A member the mapping adds goes where the object closes, whatever
// follows it.
func TestMapReasoningAddsWhereTheObjectCloses(t *testing.T) {
	for body, want := range map[string]string{
		`{"reasoning_effort":"low"}`:         `{"reasoning_effort":"low","chat_template_kwargs":{"enable_thinking":true}}`,
		`{"reasoning_effort":"low" } `:       `{"reasoning_effort":"low" ,"chat_template_kwargs":{"enable_thinking":true}} `,
		`{"reasoning_effort":"low"} {"a":1}`: `{"reasoning_effort":"low","chat_template_kwargs":{"enable_thinking":true}} {"a":1}`,
	} {
		if got := mapReasoning([]byte(body), flavourVLLM); string(got) != want {
			t.Errorf("mapReasoning(%s) = %s, want %s", body, got, want)
		}
	}
}
