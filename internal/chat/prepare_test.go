package chat

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// TestPrepare covers the cap, the thinking budget and their interplay.
// want* of -1 means the key must be absent from Body.
func TestPrepare(t *testing.T) {
	windowed := model(40000, nil)
	tiny := model(1000, nil)
	tests := []struct {
		name        string
		body        string
		m           *api.Model
		engineCap   int
		defaultCap  bool
		budget      int
		wantBudget  int    // reasoning.max_tokens in Body, -1 when absent
		wantReason  string // exact reasoning member when set
		wantPresent []string
	}{
		{"default cap, unknown model", body(), nil, DefaultMaxTokens, true, 0, -1, "", nil},
		{"default cap, plain model", body(), plainModel, DefaultMaxTokens, true, 0, -1, "", nil},
		{"max_tokens", body(`"max_tokens":100`), plainModel, 100, false, 0, -1, "", nil},
		{"max_completion_tokens", body(`"max_completion_tokens":70`), plainModel, 70, false, 0, -1, "", nil},
		{"max_completion_tokens wins", body(`"max_tokens":100`, `"max_completion_tokens":50`), plainModel, 50, false, 0, -1, "", nil},
		{"answer cap plus budget saturates", body(`"max_tokens":9223372036854775807`), budgetModel, math.MaxInt, false, DefaultThinkingBudget, DefaultThinkingBudget, "", nil},
		{"user cap not lowered by the window", body(`"max_tokens":100000`), windowed, 100000, false, 0, -1, "", nil},
		{"default cap lowered by the window", msgs(`{"role":"user","content":"` + strings.Repeat("a", 40000) + `"}`), windowed, 40000 - 10000, true, 0, -1, "", nil},
		{"default cap kept under a large window", body(), model(131072, nil), DefaultMaxTokens, true, 0, -1, "", nil},
		{"default cap floor of 1", msgs(`{"role":"user","content":"` + strings.Repeat("a", 4800) + `"}`), tiny, 1, true, 0, -1, "", nil},

		// The default budget: only on thinking_budget models, only when thinking is on.
		{"default budget, default cap", body(), budgetModel, DefaultMaxTokens, true, DefaultThinkingBudget, DefaultThinkingBudget, `{"max_tokens":8192}`, nil},
		{"default budget added to the answer cap", body(`"max_tokens":100`), budgetModel, 100 + DefaultThinkingBudget, false, DefaultThinkingBudget, DefaultThinkingBudget, "", nil},
		{"explicit budget added to the answer cap", body(`"max_completion_tokens":100`, `"reasoning":{"summary":"auto","max_tokens":1000}`), budgetModel, 1100, false, 1000, 1000, `{"summary":"auto","max_tokens":1000}`, nil},
		{"budget merged into reasoning", body(`"reasoning":{"effort":"high","x":[1, 2]}`), budgetModel, DefaultMaxTokens, true, DefaultThinkingBudget, DefaultThinkingBudget, `{"effort":"high","x":[1, 2],"max_tokens":8192}`, nil},
		{"null reasoning replaced", body(`"reasoning":null`), budgetModel, DefaultMaxTokens, true, DefaultThinkingBudget, DefaultThinkingBudget, `{"max_tokens":8192}`, nil},
		{"no default budget without thinking_budget", body(`"max_tokens":100`), noBudgetModel, 100, false, 0, -1, "", nil},
		{"explicit budget without thinking_budget", body(`"max_tokens":100`, `"reasoning":{"max_tokens":500}`), noBudgetModel, 600, false, 500, 500, "", nil},
		{"quiet model does not think", body(`"max_tokens":100`), quietModel, 100, false, 0, -1, "", nil},
		{"quiet model budget ignored", body(`"max_tokens":100`, `"reasoning":{"max_tokens":500}`), quietModel, 100, false, 0, 500, `{"max_tokens":500}`, nil},
		{"quiet model enable_thinking", body(`"max_tokens":100`, `"enable_thinking":true`), quietModel, 100 + DefaultThinkingBudget, false, DefaultThinkingBudget, DefaultThinkingBudget, "", []string{"enable_thinking"}},
		{"quiet model effort high", body(`"reasoning_effort":"high"`), quietModel, DefaultMaxTokens, true, DefaultThinkingBudget, DefaultThinkingBudget, "", []string{"reasoning_effort"}},
		{"non-reasoning model never thinks", body(`"enable_thinking":true`, `"max_tokens":10`), budgetOnly, 10, false, 0, -1, "", nil},
		{"unknown model gets no budget", body(`"enable_thinking":true`, `"max_tokens":10`), nil, 10, false, 0, -1, "", nil},

		// Off switches turn the budget off and are forwarded as sent.
		{"effort none", body(`"reasoning_effort":"none"`, `"max_tokens":100`), budgetModel, 100, false, 0, -1, "", []string{"reasoning_effort"}},
		{"effort minimal", body(`"reasoning":{"effort":"minimal"}`, `"max_tokens":100`), budgetModel, 100, false, 0, -1, `{"effort":"minimal"}`, nil},
		{"budget zero", body(`"reasoning":{"max_tokens":0}`, `"max_tokens":100`), budgetModel, 100, false, 0, 0, `{"max_tokens":0}`, nil},
		{"enable_thinking false", body(`"enable_thinking":false`, `"max_tokens":100`), budgetModel, 100, false, 0, -1, "", []string{"enable_thinking"}},
		{"off wins over effort", body(`"enable_thinking":false`, `"reasoning_effort":"high"`), budgetModel, DefaultMaxTokens, true, 0, -1, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustParse(t, tt.body, Options{})
			if err := r.Prepare(tt.m); err != nil {
				t.Fatal(err)
			}
			wantInt(t, "EngineMaxTokens", r.EngineMaxTokens, tt.engineCap)
			wantInt(t, "BudgetApplied", r.BudgetApplied, tt.budget)
			if r.DefaultCap != tt.defaultCap {
				t.Errorf("DefaultCap = %v", r.DefaultCap)
			}
			got := decodeBody(t, r.Body)
			for _, key := range []string{"max_tokens", "max_completion_tokens"} {
				if string(got[key]) != string(marshalInt(tt.engineCap)) {
					t.Errorf("Body %s = %s, want %d", key, got[key], tt.engineCap)
				}
			}
			var reasoning struct {
				MaxTokens *int `json:"max_tokens"`
			}
			if raw, ok := got["reasoning"]; ok {
				if err := json.Unmarshal(raw, &reasoning); err != nil {
					t.Fatalf("reasoning %s: %v", raw, err)
				}
			}
			switch {
			case tt.wantBudget < 0 && reasoning.MaxTokens != nil:
				t.Errorf("reasoning.max_tokens = %d, want none", *reasoning.MaxTokens)
			case tt.wantBudget >= 0 && (reasoning.MaxTokens == nil || *reasoning.MaxTokens != tt.wantBudget):
				t.Errorf("reasoning = %s, want max_tokens %d", got["reasoning"], tt.wantBudget)
			}
			if tt.wantReason != "" && string(got["reasoning"]) != tt.wantReason {
				t.Errorf("reasoning = %s, want %s", got["reasoning"], tt.wantReason)
			}
			for _, key := range tt.wantPresent {
				if _, ok := got[key]; !ok {
					t.Errorf("Body lacks %s: %s", key, r.Body)
				}
			}
			if _, err := Parse(r.Body, Options{}); err != nil {
				t.Errorf("the prepared body does not parse: %v", err)
			}
		})
	}
}

// A cap that counts thinking, as the dialects' do, is the engine's cap:
// thinking gets its budget within it, never more than the whole.
func TestPrepareCapIncludingThinking(t *testing.T) {
	tests := []struct {
		name          string
		body          string
		m             *api.Model
		engine, spent int
	}{
		{"default budget within the cap", body(`"max_tokens":10000`), budgetModel, 10000, DefaultThinkingBudget},
		{"budget bounded by the cap", body(`"max_tokens":100`), budgetModel, 100, 100},
		{"explicit budget within it", body(`"max_tokens":2000`, `"reasoning":{"max_tokens":1024}`), budgetModel, 2000, 1024},
		{"no thinking", body(`"max_tokens":100`, `"reasoning_effort":"none"`), budgetModel, 100, 0},
		{"plain model", body(`"max_tokens":100`), plainModel, 100, 0},
		{"no cap: the default, thinking included as always", body(), budgetModel, DefaultMaxTokens, DefaultThinkingBudget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustParse(t, tt.body, Options{})
			r.CapIncludesThinking = true
			if err := r.Prepare(tt.m); err != nil {
				t.Fatal(err)
			}
			wantInt(t, "EngineMaxTokens", r.EngineMaxTokens, tt.engine)
			wantInt(t, "BudgetApplied", r.BudgetApplied, tt.spent)
			got := decodeBody(t, r.Body)
			if string(got["max_tokens"]) != string(marshalInt(tt.engine)) {
				t.Errorf("Body max_tokens = %s, want %d", got["max_tokens"], tt.engine)
			}
		})
	}
}

func TestPrepareStreamOptions(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string // stream_options in Body; "" when absent
	}{
		{"added", body(`"stream":true`), `{"include_usage":true}`},
		{"null replaced", body(`"stream":true`, `"stream_options":null`), `{"include_usage":true}`},
		{"forced on, others kept", body(`"stream":true`, `"stream_options":{"include_usage":false,"continuous_usage_stats":true}`), `{"include_usage":true,"continuous_usage_stats":true}`},
		{"merged", body(`"stream":true`, `"stream_options":{"x":1}`), `{"x":1,"include_usage":true}`},
		{"not streaming: absent", body(`"stream":false`), ""},
		{"not streaming: untouched", body(`"stream_options":{"include_usage":false}`), `{"include_usage":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustParse(t, tt.body, Options{})
			if err := r.Prepare(plainModel); err != nil {
				t.Fatal(err)
			}
			got := decodeBody(t, r.Body)["stream_options"]
			if string(got) != tt.want {
				t.Fatalf("stream_options = %s, want %s", got, tt.want)
			}
		})
	}
}

// Fields the gateway does not own reach the worker byte for byte and in
// their original order.
func TestPreparePassesUnknownFieldsThrough(t *testing.T) {
	unknown := []string{
		`"x_vendor" :  {"deep": [1, 2.50, 1e400, "é\u00e9", {"a":null}], "n": 12345678901234567890123}`,
		`"chat_template_kwargs":{"enable_thinking":false}`,
		`"min_tokens":   3`,
		`"k\u0065y":"escaped key"`,
	}
	in := `{` + unknown[0] + `,"model":"m",` + unknown[1] + `,"messages":[ {"role":"user", "content":"hi"} ],` + unknown[2] + `,"temperature":0.70,` + unknown[3] + `}`
	r := mustParse(t, in, Options{})
	if err := r.Prepare(budgetModel); err != nil {
		t.Fatal(err)
	}
	for _, u := range unknown {
		key, value, _ := strings.Cut(u, ":")
		member := strings.TrimSpace(key) + ":" + strings.TrimSpace(value)
		if !bytes.Contains(r.Body, []byte(member)) {
			t.Errorf("Body lacks %s:\n%s", member, r.Body)
		}
	}
	for _, kept := range []string{`"temperature":0.70`, `"messages":[ {"role":"user", "content":"hi"} ]`} {
		if !bytes.Contains(r.Body, []byte(kept)) {
			t.Errorf("Body lacks %s:\n%s", kept, r.Body)
		}
	}
	top, err := parseObject(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range top.members {
		keys = append(keys, m.key)
	}
	want := []string{"x_vendor", "model", "chat_template_kwargs", "messages", "min_tokens", "temperature", "key", "max_tokens", "max_completion_tokens", "reasoning"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys = %v, want %v", keys, want)
	}
}

func TestPrepareReplacesFileParts(t *testing.T) {
	sys := `{"role":"system", "content":"s"}`
	user := `{"name":"me","role":"user","content":[{"type":"text","text":"see"}, ` + filePart("data.CSV", b64("\uFEFFa,b\n1,<2>")) + `, ` + imagePart(tinyPNG) + `],"x":1}`
	r := mustParse(t, msgs(sys, user), Options{})
	if string(r.Messages[1]) != user {
		t.Errorf("Messages keeps the message as sent; got %s", r.Messages[1])
	}
	for _, m := range []*api.Model{nil, plainModel} {
		if err := r.Prepare(m); err != nil {
			t.Fatal(err)
		}
		messages := engineMessages(t, r)
		if string(messages[0]) != sys {
			t.Errorf("untouched message changed: %s", messages[0])
		}
		var msg struct {
			Name    string `json:"name"`
			X       int    `json:"x"`
			Content []struct {
				Type     string          `json:"type"`
				Text     string          `json:"text"`
				ImageURL json.RawMessage `json:"image_url"`
				File     json.RawMessage `json:"file"`
			} `json:"content"`
		}
		if err := json.Unmarshal(messages[1], &msg); err != nil {
			t.Fatal(err)
		}
		if msg.Name != "me" || msg.X != 1 || len(msg.Content) != 3 {
			t.Fatalf("message = %s", messages[1])
		}
		if c := msg.Content[1]; c.Type != "text" || c.Text != "data.CSV:\na,b\n1,<2>" || c.File != nil {
			t.Errorf("file part became %+v", c)
		}
		if c := msg.Content[2]; c.Type != "image_url" || string(c.ImageURL) != `{"url":`+quote(tinyPNG)+`}` {
			t.Errorf("image part became %+v", c)
		}
		if !bytes.HasPrefix(messages[1], []byte(`{"name":"me","role":"user","content":[{"type":"text","text":"see"},{"type":"text","text":"data.CSV:\na,b\n1,<2>"}`)) {
			t.Errorf("message order or bytes changed: %s", messages[1])
		}
	}
}

// A developer message, OpenAI's newer name for a system one, reaches the
// engine as system, the rest of it as sent.
func TestPrepareDeveloperIsSystem(t *testing.T) {
	for _, tc := range []struct{ sent, want string }{
		{`{"role":"developer","content":"be brief","name":"d"}`, `{"role":"system","content":"be brief","name":"d"}`},
		{`{"content":[{"type":"text","text":"no"}],"role":"developer"}`, `{"content":[{"type":"text","text":"no"}],"role":"system"}`},
	} {
		r := mustParse(t, msgs(tc.sent, userHi), Options{})
		if err := r.Prepare(nil); err != nil {
			t.Fatal(err)
		}
		if got := engineMessages(t, r); string(got[0]) != tc.want || string(got[1]) != userHi {
			t.Errorf("%s reached the engine as %s", tc.sent, got)
		}
	}
}

func TestPrepareContextWindow(t *testing.T) {
	tests := []struct {
		name  string
		chars int
		m     *api.Model
		fails bool
	}{
		{"fits", 4000, model(1000, nil), false},
		{"estimate at the window", 5000, model(1000, nil), false},
		{"over even the low estimate", 5005, model(1000, nil), true},
		{"unknown window", 1 << 20, model(0, nil), false},
		{"unknown model", 1 << 20, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustParse(t, msgs(`{"role":"user","content":"`+strings.Repeat("x", tt.chars)+`"}`), Options{})
			err := r.Prepare(tt.m)
			if !tt.fails {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			ae := apiError(t, err)
			if ae.HTTPStatus() != http.StatusBadRequest || ae.ErrorType() != TypeContextLengthExceeded || ae.Param != "messages" {
				t.Fatalf("err = %+v", ae)
			}
			if !strings.Contains(ae.Message, "1,001 tokens") || !strings.Contains(ae.Message, "1,000 tokens") {
				t.Errorf("message %q should give the estimate and the window", ae.Message)
			}
		})
	}
}

// Prepare starts from the parsed request every time, so one request can
// be fitted to several candidate models.
func TestPrepareAgain(t *testing.T) {
	r := mustParse(t, body(`"max_tokens":100`, `"stream":true`), Options{})
	if err := r.Prepare(budgetModel); err != nil {
		t.Fatal(err)
	}
	first := string(r.Body)
	if err := r.Prepare(plainModel); err != nil {
		t.Fatal(err)
	}
	wantInt(t, "EngineMaxTokens", r.EngineMaxTokens, 100)
	wantInt(t, "BudgetApplied", r.BudgetApplied, 0)
	if bytes.Contains(r.Body, []byte("reasoning")) {
		t.Errorf("budget leaked into the second body: %s", r.Body)
	}
	if err := r.Prepare(budgetModel); err != nil {
		t.Fatal(err)
	}
	if string(r.Body) != first {
		t.Errorf("Body differs on the same model:\n%s\n%s", first, r.Body)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 32768: "32,768", 1234567: "1,234,567", -4096: "-4,096"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %s, want %s", n, got, want)
		}
	}
}

// engineMessages is the messages of the body r sends to its engine, each
// as it is written there.
func engineMessages(t *testing.T, r *Request) []json.RawMessage {
	t.Helper()
	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.Messages
}
