package worker

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// chunkEngine streams its chunks when asked for a stream, as an engine
// does, stopping at the first the sink refuses, and answers whole
// otherwise; it records what it was asked and how far it got.
type chunkEngine struct {
	chunks [][]byte
	whole  []byte
	// streamed says the request asked for a stream; sent counts the
	// chunks the sink took.
	streamed bool
	sent     int
}

func (e *chunkEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	e.streamed = req.Stream
	if !req.Stream {
		if err := sink.Body(ctx, e.whole); err != nil {
			return engine.Cancelled()
		}
		return engine.OK()
	}
	for _, c := range e.chunks {
		if err := sink.Event(ctx, c); err != nil {
			return engine.Cancelled()
		}
		e.sent++
	}
	u := &api.Usage{PromptTokens: 4, CompletionTokens: len(e.chunks), TotalTokens: 4 + len(e.chunks)}
	return &api.Result{Status: http.StatusOK, Usage: u}
}

// wholeReply is what a test reads of a chat.completion.
type wholeReply struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role             string  `json:"role"`
			Content          *string `json:"content"`
			ReasoningContent string  `json:"reasoning_content"`
			Reasoning        string  `json:"reasoning"`
			ToolCalls        []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		Logprobs *struct {
			Content []struct {
				Token string `json:"token"`
			} `json:"content"`
		} `json:"logprobs"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Svc map[string]json.RawMessage `json:"svc"`
}

// A whole answer capped apart from its thinking is asked of the engine as
// a stream, which is stopped at the cap rather than run to the end of the
// thinking budget, and the client gets the whole answer it asked for: the
// thinking, the answer up to the cap, finish_reason length, and the usage
// the worker counted.
func TestWholeAnswerStopsTheEngineAtTheCap(t *testing.T) {
	eng := &chunkEngine{}
	for range 3 {
		eng.chunks = append(eng.chunks, chunkOf(0, `{"reasoning_content":"hmm "}`, ""))
	}
	for range 40 {
		eng.chunks = append(eng.chunks, chunkOf(0, `{"content":"word "}`, ""))
	}
	eng.chunks = append(eng.chunks, chunkOf(0, `{}`, "stop"))
	ereq := &engine.Request{Kind: api.KindChat, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"sixteen letters."}]}`)}
	var out captureEvents
	sink, finish := holdAnswer(ereq, &out, 5, true)
	res := finish(context.Background(), eng.Serve(context.Background(), ereq, sink))

	if !eng.streamed || eng.sent != 3+4 {
		t.Fatalf("engine streamed %v, %d chunks taken before it was stopped; want a stream stopped at the fifth answer chunk", eng.streamed, eng.sent)
	}
	if res.Status != http.StatusOK || res.FinishReason != "length" || res.Usage == nil || !res.Usage.Estimated ||
		res.Usage.CompletionTokens != 8 || res.Usage.ReasoningTokens == nil || *res.Usage.ReasoningTokens != 3 {
		t.Fatalf("result %+v, usage %+v", res, res.Usage)
	}
	if len(out.events) != 1 {
		t.Fatalf("%d sends, want the one whole answer", len(out.events))
	}
	var reply wholeReply
	if err := json.Unmarshal(out.events[0], &reply); err != nil || len(reply.Choices) != 1 {
		t.Fatalf("%s: %v", out.events[0], err)
	}
	c := reply.Choices[0]
	if reply.Object != "chat.completion" || reply.ID != "c1" || reply.Created != 7 || reply.Model != "m" ||
		c.Message.Role != "assistant" || c.Message.Content == nil || *c.Message.Content != strings.Repeat("word ", 5) ||
		c.Message.ReasoningContent != "hmm hmm hmm " || c.Message.Reasoning != c.Message.ReasoningContent || c.FinishReason != "length" {
		t.Fatalf("answer %s", out.events[0])
	}
}

// An answer within the cap is the engine's whole, put together from its
// chunks: each choice in order, tool calls joined from their deltas,
// logprobs and the finish reasons.
func TestWholeAnswerFromChunks(t *testing.T) {
	eng := &chunkEngine{chunks: [][]byte{
		[]byte(`{"id":"c2","object":"chat.completion.chunk","created":9,"model":"m","system_fingerprint":"fp","choices":[` +
			`{"index":1,"delta":{"role":"assistant","content":"B<"},"logprobs":{"content":[{"token":"B<"}]},"finish_reason":null},` +
			`{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":"{\"a\""}}]},"finish_reason":null}]}`),
		[]byte(`{"id":"c2","object":"chat.completion.chunk","created":9,"model":"m","choices":[` +
			`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"},` +
			`{"index":1,"delta":{"content":"ye"},"logprobs":{"content":[{"token":"ye"}]},"finish_reason":"stop"}]}`),
	}}
	ereq := &engine.Request{Kind: api.KindChat, Body: []byte(`{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}`)}
	var out captureEvents
	sink, finish := holdAnswer(ereq, &out, 100, true)
	res := finish(context.Background(), eng.Serve(context.Background(), ereq, sink))
	if res.Status != http.StatusOK || res.Usage == nil || res.Usage.Estimated || len(out.events) != 1 {
		t.Fatalf("result %+v, %d sends", res, len(out.events))
	}
	var reply wholeReply
	if err := json.Unmarshal(out.events[0], &reply); err != nil || len(reply.Choices) != 2 {
		t.Fatalf("%s: %v", out.events[0], err)
	}
	tool, text := reply.Choices[0], reply.Choices[1]
	if tool.Index != 0 || tool.FinishReason != "tool_calls" || tool.Message.Content != nil || len(tool.Message.ToolCalls) != 1 ||
		tool.Message.ToolCalls[0].ID != "call_1" || tool.Message.ToolCalls[0].Function.Name != "get" ||
		tool.Message.ToolCalls[0].Function.Arguments != `{"a":1}` || tool.Logprobs != nil {
		t.Errorf("the tool call's choice: %s", out.events[0])
	}
	if text.Index != 1 || text.FinishReason != "stop" || text.Message.Content == nil || *text.Message.Content != "B<ye" ||
		text.Logprobs == nil || len(text.Logprobs.Content) != 2 {
		t.Errorf("the text's choice: %s", out.events[0])
	}
	if !strings.Contains(string(out.events[0]), `"B<ye"`) || !strings.Contains(string(out.events[0]), `"system_fingerprint":"fp"`) ||
		reply.Svc != nil {
		t.Errorf("answer %s", out.events[0])
	}
}

// A stream that fails sends nothing: the whole request fails with the
// engine's error, as it would have asked whole.
func TestWholeAnswerFailure(t *testing.T) {
	eng := &failingAfterChunk{}
	ereq := &engine.Request{Kind: api.KindChat, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)}
	var out captureEvents
	sink, finish := holdAnswer(ereq, &out, 5, true)
	res := finish(context.Background(), eng.Serve(context.Background(), ereq, sink))
	if res.Status != http.StatusBadGateway || len(out.events) != 0 {
		t.Fatalf("result %+v, %d sends", res, len(out.events))
	}
}

type failingAfterChunk struct{}

func (failingAfterChunk) Serve(ctx context.Context, _ *engine.Request, sink engine.Sink) *api.Result {
	if err := sink.Event(ctx, chunkOf(0, `{"content":"a "}`, "")); err != nil {
		return engine.Cancelled()
	}
	return engine.Failure(http.StatusBadGateway, api.TypeUpstream, "the engine went away")
}

// An engine that answers a stream with one whole completion (made one
// chunk by its adapter) is held to the cap all the same: the answer is
// cut, finishes with length, and is billed as counted, not as the engine
// counted what was cut away.
func TestWholeAnswerFromOneChunkOverTheCap(t *testing.T) {
	long := strings.Repeat("word ", 40)
	eng := &chunkEngine{chunks: [][]byte{chunkOf(0, `{"role":"assistant","reasoning_content":"hmm","content":"`+long+`"}`, "stop")}}
	ereq := &engine.Request{Kind: api.KindChat, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"sixteen letters."}]}`)}
	var out captureEvents
	sink, finish := holdAnswer(ereq, &out, 5, true)
	res := finish(context.Background(), eng.Serve(context.Background(), ereq, sink))
	if res.Status != http.StatusOK || res.FinishReason != "length" || res.Usage == nil || !res.Usage.Estimated ||
		res.Usage.CompletionTokens != 1+5 {
		t.Fatalf("result %+v, usage %+v", res, res.Usage)
	}
	var reply wholeReply
	if len(out.events) != 1 || json.Unmarshal(out.events[0], &reply) != nil || len(reply.Choices) != 1 {
		t.Fatalf("sent %q", out.events)
	}
	if c := reply.Choices[0]; c.FinishReason != "length" || c.Message.Content == nil || *c.Message.Content != long[:20] ||
		c.Message.ReasoningContent != "hmm" {
		t.Fatalf("answer %s", out.events[0])
	}
}
