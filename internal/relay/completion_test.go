package relay

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// A text completion's stream is read by its choices' text and closed with
// text_completion chunks, which clients decode as the rest of the stream.
func TestCompletionStreamChunks(t *testing.T) {
	c := benchCall()
	c.req.Kind, c.req.Chat, c.req.PromptChars = api.KindCompletion, nil, 40
	c.res = nil
	c.inspect([]byte(`{"id":"cmpl-abc","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"héllo","finish_reason":null}]}`))
	c.inspect([]byte(`{"id":"cmpl-abc","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" world","finish_reason":"length"}]}`))
	if c.outChars != 11 || c.first.finish != "length" {
		t.Fatalf("outChars %d finish %q, want 11 and length", c.outChars, c.first.finish)
	}
	u, estimated := c.reportedUsage()
	if !estimated || u.PromptTokens != 10 || u.CompletionTokens != 3 {
		t.Fatalf("estimate %+v (estimated %v), want 10 prompt and 3 completion tokens", u, estimated)
	}
	final := c.finalChunksAt(1767225600)
	if len(final) != 2 {
		t.Fatalf("%d final chunks, want usage and svc", len(final))
	}
	for i, ch := range final {
		var got struct {
			ID      string            `json:"id"`
			Object  string            `json:"object"`
			Choices []json.RawMessage `json:"choices"`
		}
		if err := json.Unmarshal(ch, &got); err != nil {
			t.Fatalf("chunk %d: %v: %s", i, err, ch)
		}
		if got.Object != "text_completion" || got.ID != "cmpl-abc" || got.Choices == nil || len(got.Choices) != 0 {
			t.Errorf("chunk %d: %s", i, ch)
		}
	}
}

func TestCompletionAnswerText(t *testing.T) {
	c := benchCall()
	c.req.Kind, c.req.Stream, c.req.Chat = api.KindCompletion, false, nil
	c.res = nil
	out, err := c.completeBody([]byte(`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"12345678","finish_reason":"stop"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Usage api.Usage       `json:"usage"`
		Svc   json.RawMessage `json:"svc"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Usage.CompletionTokens != 2 || len(got.Svc) == 0 || c.first.finish != "stop" {
		t.Fatalf("usage %+v finish %q: %s", got.Usage, c.first.finish, out)
	}
}

// A sealed request's text cannot be read: with no count from its worker
// it has none, not an estimate of zero (the spec's rule 3 for usage rows).
func TestSealedUsageIsNotEstimated(t *testing.T) {
	c := benchCall()
	c.req.E2E, c.res, c.outChars = true, nil, 400
	if u, estimated := c.reportedUsage(); estimated || u != (api.Usage{}) {
		t.Fatalf("usage %+v, estimated %v", u, estimated)
	}
}

// An estimate counts no more completion tokens than the engine was
// allowed: long words would take four characters a token past the cap.
func TestEstimateKeepsToTheCap(t *testing.T) {
	c := benchCall()
	c.res, c.outChars = nil, 400
	c.req.Chat.EngineMaxTokens = 40
	if u, estimated := c.reportedUsage(); !estimated || u.CompletionTokens != 40 {
		t.Fatalf("usage %+v, estimated %v; want 40 completion tokens", u, estimated)
	}
	c.req.Chat.EngineMaxTokens = 1000
	if u, _ := c.reportedUsage(); u.CompletionTokens != 100 {
		t.Fatalf("usage %+v; want 100 completion tokens", u)
	}
}

// The chunks the gateway adds to a stream repeat the engine's created:
// every chunk of one completion has the same. Before any chunk, or of one
// whose created is no integer, they take the time they are sent.
func TestFinalChunksRepeatCreated(t *testing.T) {
	created := func(chunks [][]byte) []int64 {
		var out []int64
		for _, ch := range chunks {
			var got struct {
				Created int64 `json:"created"`
			}
			if err := json.Unmarshal(ch, &got); err != nil {
				t.Fatalf("%v: %s", err, ch)
			}
			out = append(out, got.Created)
		}
		return out
	}
	c := benchCall()
	c.inspect([]byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`))
	c.inspect([]byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000009,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`))
	for i, got := range created(c.finalChunks()) {
		if got != 1700000000 {
			t.Errorf("final chunk %d: created %d, want the engine's 1700000000", i, got)
		}
	}

	odd := benchCall()
	odd.inspect([]byte(`{"id":"chatcmpl-2","created":"soon","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`))
	if odd.first.hadContent != true {
		t.Fatal("a chunk whose created is a string was not read")
	}
	before := time.Now().Unix()
	for i, got := range created(odd.finalChunks()) {
		if got < before || got > time.Now().Unix() {
			t.Errorf("final chunk %d: created %d, want now", i, got)
		}
	}
}
