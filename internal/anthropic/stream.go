package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/jsonraw"
)

// blockKind is the kind of the content block a stream has open.
type blockKind int

const (
	blockNone blockKind = iota
	blockText
	blockThinking
	blockTool
)

// toolCall is the tool_use block a stream has open. Its start waits for the
// function name, which content_block_start must carry; arguments that come
// before it are held until then.
type toolCall struct {
	chatIndex int
	id, name  string
	started   bool
	held      []byte
	// input is what was passed on of the arguments, which must stay the
	// beginning of a JSON object.
	input objectPrefix
}

// Stream translates one chat-completions event stream into Anthropic's
// named server-sent events. It is not safe for concurrent use.
type Stream struct {
	id, model   string
	inputTokens int64 // message_start's, an estimate (NewStream)

	started bool // message_start was sent
	done    bool // message_stop or an error was sent: nothing follows

	open  blockKind
	index int // index of the open block, or of the next one when none is
	tool  *toolCall
	// toolBlocks holds the chat tool-call indexes already given a block.
	toolBlocks map[int]bool
	// waiting are the calls that began while another call's block was
	// open, which more of that call may still follow: a block cannot be
	// reopened once closed, so theirs come whole after it, at the end.
	waiting []*toolCall

	finish  string
	matched string
	usage   *chatUsage
	svc     chat.StreamSvc
}

// NewStream starts the translation of the stream answering request id (the
// message id is "msg_"+id) for model.
//
// inputTokens is what message_start reports as the prompt's tokens: the
// engine counts them only as the stream ends, where message_delta carries
// its count, and clients that read usage at message_start would read 0.
// Callers give an estimate.
func NewStream(id, model string, inputTokens int64) *Stream {
	return &Stream{id: id, model: model, inputTokens: inputTokens, toolBlocks: map[int]bool{}}
}

// Events as they are written; field order is Anthropic's.

type messageStart struct {
	Type    string  `json:"type"`
	Message message `json:"message"`
}

type blockStart struct {
	Type         string `json:"type"`
	Index        int    `json:"index"`
	ContentBlock any    `json:"content_block"`
}

type blockDelta struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
	Delta any    `json:"delta"`
}

type textDelta struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type thinkingDelta struct {
	Type     string `json:"type"`
	Thinking string `json:"thinking"`
}

type jsonDelta struct {
	Type        string `json:"type"`
	PartialJSON string `json:"partial_json"`
}

type blockStop struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

type messageDelta struct {
	Type  string `json:"type"`
	Delta struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage deltaUsage      `json:"usage"`
	Svc   json.RawMessage `json:"svc,omitempty"`
}

// deltaUsage leaves input_tokens out when the stream reported no usage,
// so that the estimate of message_start is not confirmed as a count.
type deltaUsage struct {
	OutputTokens         int64  `json:"output_tokens"`
	InputTokens          *int64 `json:"input_tokens,omitempty"`
	CacheReadInputTokens *int64 `json:"cache_read_input_tokens,omitempty"`
}

// StepEvent names the event of a web tool step, sent as the step starts
// and again as it ends, its svc member as a chat stream's chunk has it;
// the gathered steps are svc.web_tool_steps on message_delta. Anthropic's
// SDKs hand events of a type they do not know to the caller, and their
// message accumulators pass over them.
const StepEvent = "svc.web_tool_step"

type stepEvent struct {
	Type string `json:"type"`
	Svc  struct {
		Step json.RawMessage `json:"web_tool_step"`
	} `json:"svc"`
}

type errorEvent struct {
	Type  string       `json:"type"`
	Error errorPayload `json:"error"`
}

type errorPayload struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	// RetryAfter and QueueDepth ride in a started stream's error event,
	// as in a chat stream's error frame: its headers are gone.
	RetryAfter int  `json:"retry_after,omitempty"`
	QueueDepth *int `json:"queue_depth,omitempty"`
}

// Failure is a stream's failure after it started: the HTTP status it
// would have had, its message, and, when known, the seconds to wait
// before a retry and a capacity refusal's queue depth.
type Failure struct {
	Status     int
	Message    string
	RetryAfter int
	QueueDepth *int
}

// event appends one server-sent event. The values are this file's own
// types, whose raw members come from decoded JSON, so marshalling cannot
// fail; if it ever did, the event is left out rather than sent broken.
func event(dst []byte, name string, v any) []byte {
	data, err := marshal(v)
	if err != nil {
		return dst
	}
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, data...)
	return append(dst, '\n', '\n')
}

// Chunk takes the data of one event of the chat stream (a
// chat.completion.chunk object, or "[DONE]") and appends the Anthropic
// events it makes to dst. Data that is not a JSON object is skipped.
func (s *Stream) Chunk(dst, data []byte) []byte {
	if s.done {
		return dst
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return s.end(dst)
	}
	if out, ok := s.plainChunk(dst, data); ok {
		return out
	}
	return s.chunk(dst, data)
}

// chunk is Chunk for any chunk: decoded into its members, and the events
// encoded by encoding/json.
func (s *Stream) chunk(dst, data []byte) []byte {
	chunk, ok := jsonraw.DecodeObject(data)
	if !ok {
		return dst
	}
	if e, ok := jsonraw.DecodeObject(chunk["error"]); ok {
		// A failure the gateway reported inside the stream.
		f := Failure{Status: int(count(e["status"])), Message: stringField(e["message"]), RetryAfter: int(count(e["retry_after"]))}
		if f.Status == 0 {
			f.Status = http.StatusInternalServerError
		}
		if raw, ok := e["queue_depth"]; ok && jsonraw.KindOf(raw) == jsonraw.Number {
			d := int(count(raw))
			f.QueueDepth = &d
		}
		return s.Fail(dst, f)
	}
	dst = s.start(dst)
	if u, ok := readUsage(chunk["usage"]); ok {
		s.usage = &u
	}
	if step := s.svc.Add(chunk["svc"]); step != nil {
		ev := stepEvent{Type: StepEvent}
		ev.Svc.Step = step
		dst = event(dst, StepEvent, ev)
	}
	var choices []json.RawMessage
	if jsonraw.KindOf(chunk["choices"]) == jsonraw.Array {
		_ = json.Unmarshal(chunk["choices"], &choices)
	}
	for _, raw := range choices {
		choice, ok := jsonraw.DecodeObject(raw)
		if !ok || count(choice["index"]) != 0 {
			continue // only one choice is ever asked for
		}
		dst = s.choice(dst, choice)
	}
	return dst
}

func (s *Stream) start(dst []byte) []byte {
	if s.started {
		return dst
	}
	s.started = true
	return event(dst, "message_start", messageStart{Type: "message_start", Message: message{
		ID: "msg_" + s.id, Type: "message", Role: "assistant", Model: s.model, Content: []any{},
		Usage: usage{InputTokens: s.inputTokens},
	}})
}

func (s *Stream) choice(dst []byte, choice jsonraw.Members) []byte {
	if delta, ok := jsonraw.DecodeObject(choice["delta"]); ok {
		if r := reasoningOf(delta); r != "" {
			dst = s.ensure(dst, blockThinking)
			dst = event(dst, "content_block_delta", blockDelta{Type: "content_block_delta", Index: s.index, Delta: thinkingDelta{Type: "thinking_delta", Thinking: r}})
		}
		if text := contentText(delta["content"]); text != "" {
			dst = s.ensure(dst, blockText)
			dst = event(dst, "content_block_delta", blockDelta{Type: "content_block_delta", Index: s.index, Delta: textDelta{Type: "text_delta", Text: text}})
		}
		var calls []json.RawMessage
		if jsonraw.KindOf(delta["tool_calls"]) == jsonraw.Array {
			_ = json.Unmarshal(delta["tool_calls"], &calls)
		}
		for i, raw := range calls {
			if tc, ok := jsonraw.DecodeObject(raw); ok {
				dst = s.toolDelta(dst, tc, i)
			}
		}
	}
	if f := stringField(choice["finish_reason"]); f != "" {
		s.finish = f
		s.matched = matchedStop(choice)
		// Nothing more is coming for the open block, or any call.
		dst = s.closeAll(dst)
	}
	return dst
}

// ensure makes the open block one of kind k, closing another kind first.
func (s *Stream) ensure(dst []byte, k blockKind) []byte {
	if s.open == k {
		return dst
	}
	dst = s.close(dst)
	s.open = k
	var block any
	if k == blockText {
		block = textBlock{Type: "text"}
	} else {
		block = thinkingBlock{Type: "thinking"}
	}
	return event(dst, "content_block_start", blockStart{Type: "content_block_start", Index: s.index, ContentBlock: block})
}

// toolDelta applies one entry of a delta's tool_calls; pos is its place in
// the list, the index for an engine that sends none.
func (s *Stream) toolDelta(dst []byte, tc jsonraw.Members, pos int) []byte {
	idx := pos
	if jsonraw.KindOf(tc["index"]) == jsonraw.Number {
		idx = int(count(tc["index"]))
	}
	fn, _ := jsonraw.DecodeObject(tc["function"])
	if s.open != blockTool || s.tool.chatIndex != idx {
		if w := s.waitingCall(idx); w != nil {
			w.take(tc, fn)
			return dst
		}
		if s.toolBlocks[idx] {
			// More of a call whose block was closed when text or
			// thinking began: a block cannot be reopened, and splitting
			// the call would hand the client two halves of one input.
			return dst
		}
		s.toolBlocks[idx] = true
		if s.open == blockTool {
			// Engines may interleave the deltas of several calls; the
			// open one may get more, so this one waits.
			w := &toolCall{chatIndex: idx}
			w.take(tc, fn)
			s.waiting = append(s.waiting, w)
			return dst
		}
		dst = s.close(dst)
		s.open = blockTool
		s.tool = &toolCall{chatIndex: idx}
	}
	t := s.tool
	args := t.take(tc, fn)
	if t.started {
		return s.argsDelta(dst, args)
	}
	if t.name != "" {
		dst = s.startTool(dst)
	}
	return dst
}

// take records a delta of t before its block starts (its id and name
// come first, its arguments are held), and returns the delta's arguments,
// which once the block started are the caller's to send.
func (t *toolCall) take(tc, fn jsonraw.Members) string {
	args := argumentsText(fn["arguments"])
	if t.started {
		return args
	}
	if id := stringField(tc["id"]); id != "" {
		t.id = id
	}
	t.name += stringField(fn["name"])
	t.held = append(t.held, args...)
	return args
}

func (s *Stream) waitingCall(idx int) *toolCall {
	for _, w := range s.waiting {
		if w.chatIndex == idx {
			return w
		}
	}
	return nil
}

// closeAll closes the open block, then gives each waiting call its block,
// whole: nothing more comes for any of them.
func (s *Stream) closeAll(dst []byte) []byte {
	dst = s.close(dst)
	for _, w := range s.waiting {
		s.open, s.tool = blockTool, w
		dst = s.close(dst)
	}
	s.waiting = nil
	return dst
}

// argumentsText is a delta's arguments: a string, or, from an engine that
// sends the object itself, its JSON.
func argumentsText(raw json.RawMessage) string {
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		return stringField(raw)
	case jsonraw.Object, jsonraw.Array:
		var b bytes.Buffer
		if json.Compact(&b, raw) == nil {
			return b.String()
		}
	}
	return ""
}

func (s *Stream) startTool(dst []byte) []byte {
	t := s.tool
	t.started = true
	if t.id == "" {
		t.id = fmt.Sprintf("toolu_%s_%d", s.id, s.index)
	}
	dst = event(dst, "content_block_start", blockStart{Type: "content_block_start", Index: s.index, ContentBlock: toolUseBlock{
		Type: "tool_use", ID: t.id, Name: t.name, Input: json.RawMessage("{}"),
	}})
	held := string(t.held)
	t.held = nil
	return s.argsDelta(dst, held)
}

// argsDelta passes on the open call's arguments as far as they are still
// an object's beginning (objectPrefix).
func (s *Stream) argsDelta(dst []byte, args string) []byte {
	args = args[:s.tool.input.take(args)]
	if args == "" {
		return dst
	}
	return event(dst, "content_block_delta", blockDelta{Type: "content_block_delta", Index: s.index, Delta: jsonDelta{Type: "input_json_delta", PartialJSON: args}})
}

// close ends the open block, if any.
func (s *Stream) close(dst []byte) []byte {
	switch s.open {
	case blockNone:
		return dst
	case blockTool:
		if !s.tool.started {
			// The name never came; the block still needs its start.
			dst = s.startTool(dst)
		}
		s.tool = nil
	}
	dst = event(dst, "content_block_stop", blockStop{Type: "content_block_stop", Index: s.index})
	s.open = blockNone
	s.index++
	return dst
}

// end writes what [DONE] means: the last block closed, message_delta with
// the stop reason, usage and svc, and message_stop.
func (s *Stream) end(dst []byte) []byte {
	dst = s.start(dst)
	dst = s.closeAll(dst)
	var md messageDelta
	md.Type = "message_delta"
	md.Delta.StopReason, md.Delta.StopSequence = stopReason(s.finish, s.matched, len(s.toolBlocks) > 0)
	if u := s.usage; u != nil {
		a := u.anthropic()
		md.Usage = deltaUsage{OutputTokens: a.OutputTokens, InputTokens: &a.InputTokens, CacheReadInputTokens: a.CacheReadInputTokens}
	}
	md.Svc = s.svc.JSON()
	dst = event(dst, "message_delta", md)
	dst = event(dst, "message_stop", struct {
		Type string `json:"type"`
	}{"message_stop"})
	s.done = true
	return dst
}

// Fail appends the error event of a stream that failed after it started.
// Nothing follows it.
func (s *Stream) Fail(dst []byte, f Failure) []byte {
	s.done = true
	return event(dst, "error", errorEvent{Type: "error", Error: errorPayload{Type: ErrorType(f.Status), Message: f.Message,
		RetryAfter: max(f.RetryAfter, 0), QueueDepth: f.QueueDepth}})
}

// ErrorType is Anthropic's error type for an HTTP status.
func ErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case http.StatusServiceUnavailable, 529:
		// Anthropic's 529 is its "overloaded"; a gateway with no free
		// worker says 503, which clients should treat the same: retry.
		return "overloaded_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}
