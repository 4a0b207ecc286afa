package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/engine"
)

// A whole chat whose answer is capped apart from its thinking (capSink)
// is asked of the engine as a stream, so that the engine can be stopped
// once the answer reaches the cap: asked whole, thinking that ended early
// left the engine the rest of the thinking budget to go on answering, up
// to thousands of tokens the worker would generate only to cut off. The
// stream's chunks are put together into the whole answer the client asked
// for, which is sent once the engine is done (wholeSink.finish). The
// gateway writes the svc annotation, and a worker's web tools, whose turns
// answer a whole request in a shape of their own, are asked whole.

// wholeSink gathers a chat's streamed chunks into one chat.completion.
type wholeSink struct {
	out engine.Sink

	head        chunkHead
	fingerprint string
	choices     []*wholeChoice
}

// wholeChoice is one choice as its deltas built it.
type wholeChoice struct {
	index        int
	content      strings.Builder
	thinking     strings.Builder
	refusal      strings.Builder
	tools        []*wholeToolCall
	logprobs     []json.RawMessage
	finishReason string
}

// wholeToolCall is one tool call, its arguments joined from the deltas.
type wholeToolCall struct {
	index     int
	id, typ   string
	name      string
	arguments strings.Builder
}

func newWholeSink(out engine.Sink) *wholeSink { return &wholeSink{out: out} }

// wholeChunk is what the sink reads of a streamed chunk.
type wholeChunk struct {
	chunkHead
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           []struct {
		Index int `json:"index"`
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
			Refusal          string `json:"refusal"`
			ToolCalls        []struct {
				Index    int                   `json:"index"`
				ID       string                `json:"id"`
				Type     string                `json:"type"`
				Function chat.ToolCallFunction `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		Logprobs *struct {
			Content []json.RawMessage `json:"content"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// Event takes one chunk; nothing reaches the client until finish. A chunk
// that is not JSON is dropped: the stream's answer is what is gathered.
func (w *wholeSink) Event(ctx context.Context, data []byte) error {
	var chunk wholeChunk
	if json.Unmarshal(data, &chunk) != nil {
		return ctx.Err()
	}
	if w.head.ID == "" {
		w.head = chunk.chunkHead
	}
	w.fingerprint = cmp.Or(w.fingerprint, chunk.SystemFingerprint)
	for _, ch := range chunk.Choices {
		if ch.Index < 0 || ch.Index >= chat.MaxChoices {
			continue
		}
		c := w.choice(ch.Index)
		d := ch.Delta
		c.content.WriteString(d.Content)
		c.thinking.WriteString(cmp.Or(d.ReasoningContent, d.Reasoning))
		c.refusal.WriteString(d.Refusal)
		for _, tc := range d.ToolCalls {
			t := c.tool(tc.Index)
			t.id, t.typ = cmp.Or(t.id, tc.ID), cmp.Or(t.typ, tc.Type)
			t.name = cmp.Or(t.name, tc.Function.Name)
			t.arguments.WriteString(tc.Function.Arguments)
		}
		if ch.Logprobs != nil {
			c.logprobs = append(c.logprobs, ch.Logprobs.Content...)
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			c.finishReason = *ch.FinishReason
		}
	}
	return ctx.Err()
}

// Body passes a whole answer on, from an adapter that hands one on as it
// came although asked for a stream.
func (w *wholeSink) Body(ctx context.Context, data []byte) error { return w.out.Body(ctx, data) }

func (w *wholeSink) choice(index int) *wholeChoice {
	for _, c := range w.choices {
		if c.index == index {
			return c
		}
	}
	c := &wholeChoice{index: index}
	w.choices = append(w.choices, c)
	return c
}

func (c *wholeChoice) tool(index int) *wholeToolCall {
	for _, t := range c.tools {
		if t.index == index {
			return t
		}
	}
	t := &wholeToolCall{index: index}
	c.tools = append(c.tools, t)
	return t
}

// finish sends the answer gathered, once the engine succeeded; a failure
// is the request's, with nothing sent. The usage is the result's, in the
// answer as an engine's whole answer has it: a sealed answer's usage is
// read nowhere else.
func (w *wholeSink) finish(ctx context.Context, res *api.Result) *api.Result {
	if res.Status != http.StatusOK || len(w.choices) == 0 && w.head.ID == "" {
		return res
	}
	if err := w.out.Body(ctx, w.completion(res.Usage)); err != nil {
		return engine.Cancelled()
	}
	return res
}

// completion is the chat.completion the chunks make, with usage u when
// known.
func (w *wholeSink) completion(u *api.Usage) []byte {
	type message struct {
		Role             string          `json:"role"`
		Content          *string         `json:"content"`
		ReasoningContent string          `json:"reasoning_content,omitempty"`
		Reasoning        string          `json:"reasoning,omitempty"`
		Refusal          *string         `json:"refusal,omitempty"`
		ToolCalls        []chat.ToolCall `json:"tool_calls,omitempty"`
	}
	type logprobs struct {
		Content []json.RawMessage `json:"content"`
	}
	type choice struct {
		Index        int       `json:"index"`
		Message      message   `json:"message"`
		Logprobs     *logprobs `json:"logprobs"`
		FinishReason string    `json:"finish_reason"`
	}
	slices.SortFunc(w.choices, func(a, b *wholeChoice) int { return a.index - b.index })
	choices := make([]choice, 0, len(w.choices))
	for _, c := range w.choices {
		ch := choice{Index: c.index, FinishReason: cmp.Or(c.finishReason, "stop"), Message: message{Role: "assistant"}}
		m := &ch.Message
		if content := c.content.String(); content != "" || len(c.tools) == 0 {
			m.Content = &content
		}
		m.ReasoningContent = c.thinking.String()
		m.Reasoning = m.ReasoningContent
		if refusal := c.refusal.String(); refusal != "" {
			m.Refusal = &refusal
		}
		slices.SortFunc(c.tools, func(a, b *wholeToolCall) int { return a.index - b.index })
		for _, t := range c.tools {
			tc := chat.FunctionCall(t.id, t.name, t.arguments.String())
			tc.Type = cmp.Or(t.typ, tc.Type)
			m.ToolCalls = append(m.ToolCalls, tc)
		}
		if len(c.logprobs) > 0 {
			ch.Logprobs = &logprobs{Content: c.logprobs}
		}
		choices = append(choices, ch)
	}
	var usage json.RawMessage
	if u != nil {
		usage = u.AppendOpenAI(nil)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as the engine wrote the text
	_ = enc.Encode(struct {
		ID                string          `json:"id"`
		Object            string          `json:"object"`
		Created           int64           `json:"created"`
		Model             string          `json:"model"`
		SystemFingerprint string          `json:"system_fingerprint,omitempty"`
		Choices           []choice        `json:"choices"`
		Usage             json.RawMessage `json:"usage,omitempty"`
	}{w.head.ID, "chat.completion", cmp.Or(w.head.Created, time.Now().Unix()), w.head.Model, w.fingerprint, choices, usage})
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
