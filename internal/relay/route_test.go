package relay

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestRoute(t *testing.T) {
	for _, c := range []struct {
		body, model string
		stream, ok  bool
	}{
		{`{"model":"m","messages":[]}`, "m", false, true},
		{` {"messages":[{"model":"inner"}],"stream":true,"model":"m"} `, "m", true, true},
		{`{"stream":false,"model":"ünï"}`, "ünï", false, true},
		{`{"model":"m","messages":"not a list"}`, "m", false, true},
		{`{"a":"q\\\"}\\","b":[{"c":"]}"},1.5e3,null],"model":"m","n":-1}`, "m", false, true},
		{`{"a":"\\","model":"m"}`, "m", false, true},
		{`{"a":"\"}","model":"m"`, "", false, false},
		{`{"a":[1,{"b":2}],"model":"m"`, "", false, false},
		{`{"a":[1,{"b":2}]`, "", false, false},
		{`{"a":tru`, "", false, false},
		{`{"prompt":"model: m"}`, "", false, false},
		{`{"Model":"m"}`, "", false, false},
		{`{"mod\u0065l":"m"}`, "", false, false},
		{`{"model":"m","x":1,"mod\u0065l":"n"}`, "", false, false},
		{`{"model":"m","model":"n"}`, "", false, false},
		{`{"model":"m\u0021"}`, "", false, false},
		{`{"model":""}`, "", false, false},
		{`{"model":5}`, "", false, false},
		{`{"model":null}`, "", false, false},
		{`{"model":"m",}`, "", false, false},
		{`{"model":"m"`, "", false, false},
		{`{"model":"m"} x`, "", false, false},
		{`["model","m"]`, "", false, false},
		{``, "", false, false},
	} {
		model, stream, ok := Route([]byte(c.body))
		if string(model) != c.model || stream != c.stream || ok != c.ok {
			t.Errorf("Route(%s) = %q, %v, %v; want %q, %v, %v", c.body, model, stream, ok, c.model, c.stream, c.ok)
		}
	}
}

func BenchmarkRoute(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"Say hello to the world in three languages, please."}],"stream":true,"max_tokens":64}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := Route(body); !ok {
			b.Fatal("not read")
		}
	}
}

// A worker's 429 or 503 tells the client when to come back, by the
// engine's figure up to an hour, else in a second.
func TestResultErrorRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		status, after int
		want          time.Duration
	}{
		{429, 7, 7 * time.Second},
		{503, 0, time.Second},
		{429, 3600, time.Hour},
		{429, 2147483647, time.Hour},
		{429, math.MaxInt, time.Hour},
		{400, 7, 0},
	} {
		err := resultError(&api.Result{Status: tc.status, Error: &api.ResultError{Message: "busy", RetryAfter: tc.after}})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.RetryAfter != tc.want {
			t.Errorf("status %d, retry_after %d: %+v, want Retry-After %v", tc.status, tc.after, err, tc.want)
		}
	}
}

// A worker's failure with a moderation or private-inference code sends it
// in X-Svc-Error-Code as the spec asks; other codes stay in the body.
func TestResultErrorCodeHeader(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		header bool
	}{
		{502, api.CodeModerationInvalidVerdict, true},
		{503, api.CodeModerationUnavailable, true},
		{429, api.CodeModerationCapacity, true},
		{503, api.CodeNoPrivateInferenceWorker, true},
		{502, api.CodeEngineUnreachable, false},
		{400, "", false},
	} {
		ae := resultError(&api.Result{Status: tc.status, Error: &api.ResultError{Message: "no", Code: tc.code, Param: "file"}})
		if ae.CodeHeader != tc.header || ae.Code != tc.code || ae.Param != "file" {
			t.Errorf("%d %q: header %v", tc.status, tc.code, ae.CodeHeader)
		}
	}
}

// A worker's failure that says nothing still has a message: the spec's
// error body always has a detail to read.
func TestResultErrorSaysSomething(t *testing.T) {
	for _, res := range []*api.Result{
		{Status: 502},
		{Status: 502, Error: &api.ResultError{Type: api.TypeUpstream}},
		{Status: 400, Error: &api.ResultError{Param: "x"}},
	} {
		if ae := resultError(res); ae.Message == "" {
			t.Errorf("%d %+v: no message", res.Status, res.Error)
		}
	}
}

// A request's prompt is weighed against the workers' windows from its
// size, and named by its field when too long: messages, or a text
// completion's prompt.
func TestNeedOfNamesThePrompt(t *testing.T) {
	completion := NeedOf(Request{Kind: api.KindCompletion, Model: "m", PromptChars: 5000})
	if completion.PromptTokens != 1000 || completion.PromptField != "prompt" {
		t.Fatalf("a text completion's need %+v", completion)
	}
	if embed := NeedOf(Request{Kind: api.KindEmbeddings, Model: "m"}); embed.PromptTokens != 0 || embed.PromptField != "" {
		t.Fatalf("an embedding's need %+v", embed)
	}
}
