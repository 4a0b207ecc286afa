package chat

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

const userHi = `{"role":"user","content":"hi"}`

// body is a minimal valid request with extra top-level members appended.
func body(extra ...string) string {
	b := `{"model":"m","messages":[` + userHi + `]`
	for _, e := range extra {
		b += "," + e
	}
	return b + "}"
}

// msgs is a request whose messages array is the given messages.
func msgs(messages ...string) string {
	return `{"model":"m","messages":[` + strings.Join(messages, ",") + `]}`
}

// userParts is a request with one user message made of the given parts.
func userParts(parts ...string) string {
	return msgs(`{"role":"user","content":[` + strings.Join(parts, ",") + `]}`)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func filePart(name, data string) string {
	return `{"type":"file","file":{"filename":` + quote(name) + `,"file_data":` + quote(data) + `}}`
}

func imagePart(url string) string {
	return `{"type":"image_url","image_url":{"url":` + quote(url) + `}}`
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// tinyPNG is a well-formed base64 data URL.
var tinyPNG = "data:image/png;base64," + b64("\x89PNG\r\n\x1a\nfake")

// fe is an expected field error: path and type.
type fe struct{ field, typ string }

// apiError asserts err is an *api.Error and returns it.
func apiError(t *testing.T, err error) *api.Error {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v (%T), want *api.Error", err, err)
	}
	return ae
}

func fieldsOf(ae *api.Error) []fe {
	out := make([]fe, len(ae.Fields))
	for i, f := range ae.Fields {
		out[i] = fe{f.Field, f.Type}
	}
	return out
}

func mustParse(t *testing.T, b string, opts Options) *Request {
	t.Helper()
	r, err := Parse([]byte(b), opts)
	if err != nil {
		t.Fatalf("Parse(%s) = %v", b, err)
	}
	return r
}

// decodeBody reads a prepared body as a map of raw members.
func decodeBody(t *testing.T, b []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("Body %s is not a JSON object: %v", b, err)
	}
	return m
}

// Models used across the tests.
func model(window int, defaultThinking *bool, caps ...string) *api.Model {
	return &api.Model{ID: "m", Capabilities: append([]string{api.CapChat}, caps...), ContextWindow: window, DefaultThinking: defaultThinking}
}

var (
	plainModel    = model(0, nil)
	budgetModel   = model(0, new(true), api.CapReasoning, api.CapThinkingBudget)
	noBudgetModel = model(0, new(true), api.CapReasoning)
	quietModel    = model(0, new(false), api.CapReasoning, api.CapThinkingBudget)
	// budgetOnly claims a thinking budget without reasoning: it never thinks.
	budgetOnly = model(0, new(true), api.CapThinkingBudget)
)
