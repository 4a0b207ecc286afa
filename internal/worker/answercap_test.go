package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// chunkOf is a streamed chunk with one choice's delta.
func chunkOf(index int, delta, finish string) []byte {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return fmt.Appendf(nil, `{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":%d,"delta":%s,"finish_reason":%s}]}`, index, delta, f)
}

// TestCapSinkStream checks that a streamed answer is cut off at the cap,
// thinking not counted, the engine stopped, and the choice closed with
// finish_reason length.
func TestCapSinkStream(t *testing.T) {
	ctx := context.Background()
	var got captureEvents
	c := newCapSink(&got, 3, []byte(`{"model":"m","messages":[{"role":"user","content":"sixteen letters."}]}`))
	// Each chunk passes on 10 ms after the last, the first 100 ms in.
	at := c.start.Add(90 * time.Millisecond)
	c.now = func() time.Time { at = at.Add(10 * time.Millisecond); return at }
	for i := range 5 {
		if err := c.Event(ctx, chunkOf(0, fmt.Sprintf(`{"reasoning_content":"think %d "}`, i), "")); err != nil {
			t.Fatalf("thinking chunk %d: %v", i, err)
		}
	}
	var err error
	sent := 0
	for i := range 10 {
		if err = c.Event(ctx, chunkOf(0, fmt.Sprintf(`{"content":"w%d "}`, i), "")); err != nil {
			break
		}
		sent++
	}
	if !errors.Is(err, errAnswerCapped) || sent != 2 {
		t.Fatalf("stopped after %d more answer chunks with %v; want the third to stop it", sent, err)
	}
	res := c.finish(ctx, engine.Cancelled())
	if res.Status != http.StatusOK || res.FinishReason != "length" || res.Usage == nil {
		t.Fatalf("result %+v", res)
	}
	// The engine reported no usage: the worker's count of what it passed
	// on, 5 of thinking and 3 of answer, and the prompt's 16 characters.
	if u := *res.Usage; !u.Estimated || u.CompletionTokens != 8 || u.ReasoningTokens == nil || *u.ReasoningTokens != 5 ||
		u.PromptTokens != 4 || u.TotalTokens != 12 {
		t.Fatalf("usage %+v", u)
	}
	if n := len(got.events); n != 5+3+1 {
		t.Fatalf("%d events passed on, want 5 of thinking, 3 of answer and the closing one", n)
	}
	// Its timing is the worker's too: the first output at 100 ms, then
	// the other 7 tokens in 70 ms.
	if tm := res.Timing; tm.TTFTMs == nil || *tm.TTFTMs != 100 || tm.TokensPerSecond == nil || math.Abs(*tm.TokensPerSecond-100) > 1e-6 {
		t.Fatalf("timing %+v", tm)
	}
	last := string(got.events[len(got.events)-1])
	if !strings.Contains(last, `"finish_reason":"length"`) || !strings.Contains(last, `"id":"c1"`) {
		t.Errorf("closing chunk %s", last)
	}
}

// An answer the engine finishes within the cap passes untouched.
func TestCapSinkWithinTheCap(t *testing.T) {
	ctx := context.Background()
	var got captureEvents
	c := newCapSink(&got, 3, nil)
	for _, ev := range [][]byte{chunkOf(0, `{"content":"a"}`, ""), chunkOf(0, `{"content":"b"}`, ""), chunkOf(0, `{}`, "stop")} {
		if err := c.Event(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	ok := &api.Result{Status: http.StatusOK, FinishReason: "stop"}
	if res := c.finish(ctx, ok); res != ok || len(got.events) != 3 {
		t.Fatalf("result %+v, %d events", res, len(got.events))
	}
	// A client that goes away is not an answer cut off.
	c = newCapSink(&got, 3, nil)
	if res := c.finish(ctx, engine.Cancelled()); res.Status == http.StatusOK {
		t.Fatalf("a cancelled request settled as %+v", res)
	}
}

// With several choices, one cut off has its later deltas dropped while
// the others go on, and the engine is stopped once all are done.
func TestCapSinkChoices(t *testing.T) {
	ctx := context.Background()
	var got captureEvents
	c := newCapSink(&got, 2, []byte(`{"n":2}`))
	steps := []struct {
		ev   []byte
		stop bool
	}{
		{chunkOf(0, `{"content":"a"}`, ""), false},
		{chunkOf(0, `{"content":"b"}`, ""), false}, // choice 0 reaches the cap
		{chunkOf(1, `{"content":"x"}`, ""), false},
		{chunkOf(0, `{"content":"c"}`, ""), false}, // dropped
		{chunkOf(1, `{}`, "stop"), true},           // choice 1 ends: all done
	}
	for i, s := range steps {
		err := c.Event(ctx, s.ev)
		if stopped := errors.Is(err, errAnswerCapped); stopped != s.stop || err != nil && !stopped {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	for _, ev := range got.events {
		if strings.Contains(string(ev), `"c"`) {
			t.Errorf("a cut-off choice's delta was sent: %s", ev)
		}
	}
	if n := len(got.events); n != 4 {
		t.Fatalf("%d events passed on, want 4", n)
	}
	res := c.finish(ctx, engine.Cancelled())
	last := string(got.events[len(got.events)-1])
	if res.Status != http.StatusOK || !strings.Contains(last, `"index":0`) || strings.Contains(last, `"index":1`) {
		t.Errorf("result %+v, closing %s", res, last)
	}
}

// A whole answer over the cap keeps the share of its text the cap allows,
// and its usage loses the tokens cut.
func TestCapSinkWhole(t *testing.T) {
	ctx := context.Background()
	answer := strings.Repeat("word ", 40) // 200 characters
	body := fmt.Sprintf(`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q,"reasoning_content":"hm"},"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":9,"completion_tokens":50,"total_tokens":59,"completion_tokens_details":{"reasoning_tokens":10}}}`, answer)
	var got captureSink
	c := newCapSink(&got, 10, nil)
	if err := c.Body(ctx, []byte(body)); err != nil {
		t.Fatal(err)
	}
	reply := decodeWhole(t, got.body)
	ch := reply.Choices[0]
	// 40 answer tokens (50 less 10 of thinking) cut to 10: a quarter.
	if ch.Message.Content != answer[:50] || ch.FinishReason != "length" || ch.Message.Reasoning != "hm" {
		t.Errorf("choice %+v", ch)
	}
	if reply.Usage.CompletionTokens != 20 || reply.Usage.TotalTokens != 29 {
		t.Errorf("usage %+v", reply.Usage)
	}
	r := 10
	res := c.finish(ctx, &api.Result{Status: http.StatusOK, Usage: &api.Usage{PromptTokens: 9, CompletionTokens: 50, TotalTokens: 59, ReasoningTokens: &r}})
	if res.FinishReason != "length" || res.Usage.CompletionTokens != 20 || res.Usage.TotalTokens != 29 {
		t.Errorf("result %+v %+v", res, res.Usage)
	}

	// Within the cap, the body goes on byte for byte.
	got = captureSink{}
	c = newCapSink(&got, 100, nil)
	if err := c.Body(ctx, []byte(body)); err != nil || string(got.body) != body {
		t.Errorf("a body within the cap was changed: %s", got.body)
	}
}

// captureEvents keeps the events a sink passes on.
type captureEvents struct{ events [][]byte }

func (c *captureEvents) Event(_ context.Context, data []byte) error {
	c.events = append(c.events, append([]byte(nil), data...))
	return nil
}

func (c *captureEvents) Body(_ context.Context, data []byte) error {
	return c.Event(context.Background(), data)
}

// A chunk holding more of the answer than the cap leaves is cut down to
// what it leaves, at four characters a token.
func TestCapSinkLongChunk(t *testing.T) {
	ctx := context.Background()
	var got captureEvents
	c := newCapSink(&got, 5, nil)
	if err := c.Event(ctx, chunkOf(0, `{"content":"a"}`, "")); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("abcd ", 44) // 220 characters, 55 tokens
	err := c.Event(ctx, chunkOf(0, fmt.Sprintf(`{"content":%q}`, long), ""))
	if !errors.Is(err, errAnswerCapped) {
		t.Fatalf("the long chunk did not stop the engine: %v", err)
	}
	var chunk struct {
		ID      string `json:"id"`
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(got.events[1], &chunk); err != nil {
		t.Fatal(err)
	}
	if chunk.ID != "c1" || chunk.Choices[0].Delta.Content != long[:16] {
		t.Errorf("the long chunk went on as %s, want its first 16 characters (4 tokens)", got.events[1])
	}
}

// With several choices a whole answer's estimates are scaled to the
// engine's count of answer tokens, and the usage keeps the thinking and
// what is left of each answer.
func TestCapSinkWholeChoices(t *testing.T) {
	ctx := context.Background()
	a, b := strings.Repeat("word ", 48), strings.Repeat("word ", 48) // 60 tokens each by their text
	body := fmt.Sprintf(`{"id":"c","object":"chat.completion","choices":[`+
		`{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"},`+
		`{"index":1,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":8,"completion_tokens":100,"total_tokens":108,"completion_tokens_details":{"reasoning_tokens":20}}}`, a, b)
	var got captureSink
	c := newCapSink(&got, 5, []byte(`{"n":2}`))
	if err := c.Body(ctx, []byte(body)); err != nil {
		t.Fatal(err)
	}
	reply := decodeWhole(t, got.body)
	// 80 answer tokens (100 less 20 of thinking), 40 a choice, each cut to
	// 5: an eighth of its text.
	for i, ch := range reply.Choices {
		if ch.FinishReason != "length" || ch.Message.Content != a[:30] {
			t.Errorf("choice %d: %+v", i, ch)
		}
	}
	if reply.Usage.CompletionTokens != 30 || reply.Usage.TotalTokens != 38 {
		t.Errorf("usage %+v, want 20 of thinking and 5 of each answer", reply.Usage)
	}
	r := 20
	res := c.finish(ctx, &api.Result{Status: http.StatusOK, Usage: &api.Usage{PromptTokens: 8, CompletionTokens: 100, TotalTokens: 108, ReasoningTokens: &r}})
	if res.Usage.CompletionTokens != 30 || res.Usage.TotalTokens != 38 {
		t.Errorf("result usage %+v", res.Usage)
	}
}

// whole is what the tests read of a whole answer.
type whole struct {
	Choices []struct {
		Message struct {
			Content   string `json:"content"`
			Reasoning string `json:"reasoning_content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func decodeWhole(t *testing.T, body []byte) whole {
	t.Helper()
	var w whole
	if err := json.Unmarshal(body, &w); err != nil {
		t.Fatal(err)
	}
	return w
}
