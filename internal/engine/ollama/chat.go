package ollama

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// chatLine is one NDJSON line of /api/chat, or its whole non-streamed
// answer. The counters are on the last line only.
type chatLine struct {
	Message struct {
		Content   string     `json:"content"`
		Thinking  string     `json:"thinking"`
		ToolCalls []toolCall `json:"tool_calls"`
	} `json:"message"`
	Done               bool            `json:"done"`
	DoneReason         string          `json:"done_reason"`
	LoadDuration       int64           `json:"load_duration"`
	PromptEvalCount    int             `json:"prompt_eval_count"`
	PromptEvalDuration int64           `json:"prompt_eval_duration"`
	EvalCount          int             `json:"eval_count"`
	EvalDuration       int64           `json:"eval_duration"`
	Error              json.RawMessage `json:"error"`
}

// OpenAI shapes written to the sink.
type (
	chunk struct {
		ID      string        `json:"id"`
		Object  string        `json:"object"`
		Created int64         `json:"created"`
		Model   string        `json:"model"`
		Choices []chunkChoice `json:"choices"`
	}
	chunkChoice struct {
		Index        int     `json:"index"`
		Delta        delta   `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	}
	// delta omits what is empty, so the finish chunk's delta is {}.
	delta struct {
		Role             string        `json:"role,omitempty"`
		Content          string        `json:"content,omitempty"`
		ReasoningContent string        `json:"reasoning_content,omitempty"`
		Reasoning        string        `json:"reasoning,omitempty"`
		ToolCalls        []outToolCall `json:"tool_calls,omitempty"`
	}
	outToolCall struct {
		Index    *int   `json:"index,omitempty"` // in deltas only
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	completion struct {
		ID      string             `json:"id"`
		Object  string             `json:"object"`
		Created int64              `json:"created"`
		Model   string             `json:"model"`
		Choices []completionChoice `json:"choices"`
		Usage   usage              `json:"usage"`
	}
	completionChoice struct {
		Index        int               `json:"index"`
		Message      completionMessage `json:"message"`
		FinishReason string            `json:"finish_reason"`
	}
	completionMessage struct {
		Role string `json:"role"`
		// Content is null when the reply is only tool calls, as OpenAI's.
		Content          *string       `json:"content"`
		ReasoningContent string        `json:"reasoning_content,omitempty"`
		Reasoning        string        `json:"reasoning,omitempty"`
		ToolCalls        []outToolCall `json:"tool_calls,omitempty"`
	}
	usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
)

// chat serves a chat request through /api/chat.
func (e *Engine) chat(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	body, err := translateChat(req.Body, req.Model, req.Stream)
	if err != nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
	}
	// Cancelling on return closes the connection whatever path is taken,
	// which is how Ollama learns to stop generating.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	body.KeepAlive = e.keepAlive(body.Model)
	before := e.loadState(body.Model)
	resp, err := e.send(ctx, http.MethodPost, "/api/chat", body)
	if err != nil {
		if ctx.Err() != nil {
			return engine.Cancelled()
		}
		return engine.Unreachable(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return engine.ErrorResult(resp.StatusCode, readError(resp.Body))
	}
	s := &chatStream{
		sink:    sink,
		id:      newID("chatcmpl-"),
		created: e.now().Unix(),
		model:   body.Model,
	}
	var r *api.Result
	if req.Stream {
		r = s.stream(ctx, resp.Body)
	} else {
		r = s.complete(ctx, resp.Body)
	}
	if s.answered {
		e.markLoaded(body.Model)
	}
	if r.Status == http.StatusOK {
		r.Timing = timing(before, s.last.LoadDuration, s.last.PromptEvalDuration, s.last.EvalCount, s.last.EvalDuration)
	}
	return r
}

// chatStream is the state of one chat answer being relayed.
type chatStream struct {
	sink    engine.Sink
	id      string
	created int64
	model   string

	sent     bool // a chunk reached the sink
	answered bool // Ollama answered with a line, so the model is loaded
	calls    int  // tool calls relayed
	last     chatLine
}

// stream relays NDJSON lines as chat.completion.chunk events.
func (s *chatStream) stream(ctx context.Context, body io.Reader) *api.Result {
	sc := lines(body)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l chatLine
		if err := json.Unmarshal(line, &l); err != nil {
			if s.sent {
				return engine.CutOff(fmt.Errorf("unreadable stream line: %w", err))
			}
			return badAnswer(err)
		}
		if hasError(l.Error) {
			if s.sent {
				return engine.CutOff(errors.New(errorText(l.Error)))
			}
			return engine.ErrorResult(http.StatusInternalServerError, line)
		}
		s.answered = true
		if d, ok := s.delta(&l); ok {
			if err := s.emit(ctx, d, nil); err != nil {
				return engine.Cancelled()
			}
		}
		if l.Done {
			s.last = l
			finish := finishReason(l.DoneReason, s.calls > 0)
			if err := s.emit(ctx, delta{}, &finish); err != nil {
				return engine.Cancelled()
			}
			return success(&l, finish)
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return s.broken(ctx, err)
}

// broken is the result of an answer that stopped making sense or ended
// before done: lost output if some was sent, else a retryable failure.
func (s *chatStream) broken(ctx context.Context, err error) *api.Result {
	switch {
	case ctx.Err() != nil:
		return engine.Cancelled()
	case s.sent:
		return engine.CutOff(err)
	}
	return engine.Unreachable(err)
}

// delta turns a line's message into a chunk delta; ok is false when the
// line has nothing to say.
func (s *chatStream) delta(l *chatLine) (delta, bool) {
	m := &l.Message
	d := delta{Content: m.Content, ReasoningContent: m.Thinking, Reasoning: m.Thinking}
	for _, tc := range m.ToolCalls {
		call := openAIToolCall(tc)
		call.Index = ptr(s.calls)
		s.calls++
		d.ToolCalls = append(d.ToolCalls, call)
	}
	if d.Content == "" && d.ReasoningContent == "" && len(d.ToolCalls) == 0 {
		return delta{}, false
	}
	if !s.sent {
		d.Role = "assistant"
	}
	return d, true
}

// emit writes one chunk.
func (s *chatStream) emit(ctx context.Context, d delta, finish *string) error {
	b, err := marshal(chunk{
		ID:      s.id,
		Object:  "chat.completion.chunk",
		Created: s.created,
		Model:   s.model,
		Choices: []chunkChoice{{Delta: d, FinishReason: finish}},
	})
	if err != nil {
		return err
	}
	if err := s.sink.Event(ctx, b); err != nil {
		return err
	}
	s.sent = true
	return nil
}

// complete relays a non-streamed answer as one chat.completion body.
func (s *chatStream) complete(ctx context.Context, body io.Reader) *api.Result {
	b, err := readAll(body, maxLine)
	if err != nil {
		return s.broken(ctx, fmt.Errorf("read answer: %w", err))
	}
	var l chatLine
	if err := json.Unmarshal(b, &l); err != nil {
		return badAnswer(err)
	}
	if hasError(l.Error) {
		return engine.ErrorResult(http.StatusInternalServerError, b)
	}
	s.answered = true
	s.last = l
	msg := completionMessage{
		Role:             "assistant",
		ReasoningContent: l.Message.Thinking,
		Reasoning:        l.Message.Thinking,
	}
	for _, tc := range l.Message.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, openAIToolCall(tc))
	}
	if l.Message.Content != "" || len(msg.ToolCalls) == 0 {
		msg.Content = &l.Message.Content
	}
	finish := finishReason(l.DoneReason, len(msg.ToolCalls) > 0)
	out, err := marshal(completion{
		ID:      s.id,
		Object:  "chat.completion",
		Created: s.created,
		Model:   s.model,
		Choices: []completionChoice{{Message: msg, FinishReason: finish}},
		Usage:   usageOf(&l),
	})
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode completion: "+err.Error())
	}
	if err := s.sink.Body(ctx, out); err != nil {
		return engine.Cancelled()
	}
	s.sent = true
	return success(&l, finish)
}

// openAIToolCall turns Ollama's tool call into OpenAI's, with the
// arguments as a JSON string. Every call gets a fresh id in OpenAI's
// call_ form, as older Ollama sends none.
func openAIToolCall(tc toolCall) outToolCall {
	var out outToolCall
	out.ID = newID("call_")
	out.Type = "function"
	out.Function.Name = tc.Function.Name
	out.Function.Arguments = "{}"
	if present(tc.Function.Arguments) {
		var buf bytes.Buffer
		if json.Compact(&buf, tc.Function.Arguments) == nil {
			out.Function.Arguments = buf.String()
		}
	}
	return out
}

// finishReason maps done_reason; Ollama says "stop" for tool calls too.
func finishReason(done string, toolCalls bool) string {
	switch {
	case toolCalls:
		return "tool_calls"
	case done == "length":
		return "length"
	}
	return "stop"
}

func usageOf(l *chatLine) usage {
	return usage{
		PromptTokens:     l.PromptEvalCount,
		CompletionTokens: l.EvalCount,
		TotalTokens:      l.PromptEvalCount + l.EvalCount,
	}
}

// success is the result of a finished answer; the caller adds timing.
func success(l *chatLine, finish string) *api.Result {
	u := usageOf(l)
	r := engine.OK()
	r.Usage = &api.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	r.FinishReason = finish
	return r
}
