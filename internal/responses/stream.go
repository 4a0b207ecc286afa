package responses

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/jsonraw"
)

// Stream translates the gateway's chat-completions event stream into
// Responses streaming events. It keeps the output it has announced, so that
// its last event carries the response object FromChat would give for the
// same answer. A Stream is used by one goroutine.
type Stream struct {
	req     *Request
	id      string
	created int64
	seq     int64
	started bool
	done    bool

	out *output
	// open are the items announced and not yet done, in output order:
	// one reasoning or message item, or any number of calls.
	open []*outItem
	// calls are the calls by the chat stream's tool-call index.
	calls map[int64]*streamCall
	// finish is the chat finish_reason, once sent.
	finish string
	usage  *usage
	svc    chat.StreamSvc
}

// streamCall is a call being streamed; sent is the engine's id for it,
// which tells a new call that reuses an index from more of the same one.
type streamCall struct {
	item *outItem
	sent string
}

// NewStream starts the translation of one stream for the gateway's
// request id and the time to report, echoing the request's parameters and
// the model it asked for.
func (r *Request) NewStream(id string, createdAt int64) *Stream {
	return &Stream{req: r, id: id, created: createdAt, out: newOutput(id), calls: map[int64]*streamCall{}}
}

// Chunk takes the data of one event of the chat stream (a
// chat.completion.chunk object, or "[DONE]") and appends to dst the
// complete SSE bytes of the events it produces. Data that is not a JSON
// object is skipped; an {"error": ...} object fails the stream; nothing is
// produced after the stream has ended.
func (s *Stream) Chunk(dst, data []byte) []byte {
	if s.done {
		return dst
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return s.complete(dst)
	}
	if c, ok := chat.ReadTextChunk(data); ok {
		// Nearly every chunk: its text, read in one pass (FuzzPlainChunk
		// holds this to the general way below).
		dst = s.start(dst)
		reasoning := c.ReasoningContent
		if len(reasoning) == 0 {
			reasoning = c.Reasoning
		}
		dst = s.text(dst, itemReasoning, string(reasoning))
		return s.text(dst, itemMessage, string(c.Content))
	}
	return s.chunk(dst, data)
}

// chunk is Chunk for any chunk, decoded at each level.
func (s *Stream) chunk(dst, data []byte) []byte {
	var ch struct {
		Choices json.RawMessage `json:"choices"`
		Usage   json.RawMessage `json:"usage"`
		Svc     json.RawMessage `json:"svc"`
		Error   json.RawMessage `json:"error"`
	}
	if jsonraw.KindOf(data) != jsonraw.Object || json.Unmarshal(data, &ch) != nil {
		return dst
	}
	if e, ok := jsonraw.DecodeObject(ch.Error); ok {
		code := textOf(e["code"])
		if code == "" {
			code = textOf(e["type"])
		}
		if code == "" {
			code = "server_error"
		}
		return s.Fail(dst, code, textOf(e["message"]), int(count(e["retry_after"])))
	}
	dst = s.start(dst)
	choices, _ := jsonraw.DecodeArray(ch.Choices)
	for _, raw := range choices {
		dst = s.choice(dst, raw)
	}
	if u := readUsage(ch.Usage); u != nil {
		s.usage = u
	}
	if step := s.svc.Add(ch.Svc); step != nil {
		// A web tool step, as it starts and again as it ends: on a
		// keepalive, the one event the SDKs' stream helpers take (they
		// throw on a type they do not know) that says nothing of the
		// response, with the svc member a chat stream's chunk has. The
		// gathered steps are svc.web_tool_steps on the last response.
		dst = s.event(dst, "keepalive", func(b []byte) []byte {
			b = append(b, `,"svc":{"web_tool_step":`...)
			b = append(b, step...)
			return append(b, '}')
		})
	}
	return dst
}

// Fail appends the events of a stream that failed after it started: a
// response.failed whose response has status failed and error {code,
// message, and retry_after when retryAfter, in seconds, is above 0}, with
// the output so far. The stream ends there.
func (s *Stream) Fail(dst []byte, code, msg string, retryAfter int) []byte {
	if s.done {
		return dst
	}
	dst = s.start(dst)
	for _, it := range s.open {
		it.status = "incomplete"
	}
	s.open = nil
	res := s.result()
	res.status, res.reason = "failed", ""
	res.errCode, res.errMsg, res.errRetry = code, msg, retryAfter
	s.done = true
	return s.response(dst, "response.failed", &res)
}

func (s *Stream) choice(dst []byte, raw json.RawMessage) []byte {
	var ch struct {
		Index        json.RawMessage `json:"index"`
		Delta        json.RawMessage `json:"delta"`
		FinishReason json.RawMessage `json:"finish_reason"`
	}
	if jsonraw.KindOf(raw) != jsonraw.Object || json.Unmarshal(raw, &ch) != nil {
		return dst
	}
	// Only one choice is ever asked for; others are not this response's.
	if n, res := jsonraw.Int(string(ch.Index)); jsonraw.KindOf(ch.Index) == jsonraw.Number && (res == jsonraw.IntFraction || n != 0) {
		return dst
	}
	if jsonraw.KindOf(ch.Delta) == jsonraw.Object {
		var d struct {
			Content          json.RawMessage   `json:"content"`
			ReasoningContent json.RawMessage   `json:"reasoning_content"`
			Reasoning        json.RawMessage   `json:"reasoning"`
			ToolCalls        []json.RawMessage `json:"tool_calls"`
		}
		_ = json.Unmarshal(ch.Delta, &d) // a member of the wrong type reads as absent
		dst = s.text(dst, itemReasoning, reasoningText(d.ReasoningContent, d.Reasoning))
		dst = s.text(dst, itemMessage, textOf(d.Content))
		for _, tc := range d.ToolCalls {
			dst = s.toolCall(dst, tc)
		}
	}
	// The first finish is the answer's; an engine that sends more has
	// already been answered for.
	if f := textOf(ch.FinishReason); f != "" && s.finish == "" {
		s.finish = f
		dst = s.settle(dst)
	}
	return dst
}

// text streams reasoning or message text into the open item of its kind,
// closing what was open before when the kind changes.
func (s *Stream) text(dst []byte, kind itemKind, text string) []byte {
	if text == "" {
		return dst
	}
	var it *outItem
	if len(s.open) == 1 && s.open[0].kind == kind {
		it = s.open[0]
	} else {
		dst = s.closeOpen(dst)
		it = s.out.add(kind)
		dst = s.announce(dst, it)
	}
	it.text.WriteString(text)
	if kind == itemReasoning {
		return s.event(dst, "response.reasoning_summary_text.delta", func(b []byte) []byte {
			b = appendRef(b, it)
			b = append(b, `,"summary_index":0,"delta":`...)
			return appendString(b, text)
		})
	}
	return s.event(dst, "response.output_text.delta", func(b []byte) []byte {
		b = appendRef(b, it)
		b = append(b, `,"content_index":0,"delta":`...)
		b = appendString(b, text)
		return append(b, `,"logprobs":[]`...)
	})
}

// toolCall streams one tool_calls delta. Calls stay open together until
// something else starts, as engines may interleave their arguments.
func (s *Stream) toolCall(dst []byte, raw json.RawMessage) []byte {
	var tc struct {
		Index    json.RawMessage `json:"index"`
		ID       json.RawMessage `json:"id"`
		Function struct {
			Name      json.RawMessage `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if jsonraw.KindOf(raw) != jsonraw.Object || json.Unmarshal(raw, &tc) != nil {
		return dst
	}
	var index int64
	if n, res := jsonraw.Int(string(tc.Index)); jsonraw.KindOf(tc.Index) == jsonraw.Number && res == jsonraw.IntOK {
		index = n
	}
	id, name, args := textOf(tc.ID), textOf(tc.Function.Name), arguments(tc.Function.Arguments)
	sc := s.calls[index]
	if sc != nil && id != "" && sc.sent != "" && id != sc.sent {
		sc = nil // engines that send no index number every call 0
	}
	if sc == nil {
		for _, it := range s.open {
			if it.kind != itemCall {
				dst = s.closeOpen(dst)
				break
			}
		}
		it := s.out.add(itemCall)
		it.name = name
		it.callID = s.out.callID(id)
		sc = &streamCall{item: it, sent: id}
		s.calls[index] = sc
		dst = s.announce(dst, it)
	} else if sc.item.status != "" {
		// Closed when another kind of item started. Its done events said
		// what it was, and the final response must say the same.
		return dst
	} else {
		// A name sent in pieces is whole in the done events.
		sc.item.name += name
		if sc.sent == "" {
			sc.sent = id
		}
	}
	if args == "" {
		return dst
	}
	it := sc.item
	it.text.WriteString(args)
	return s.event(dst, "response.function_call_arguments.delta", func(b []byte) []byte {
		b = appendRef(b, it)
		b = append(b, `,"delta":`...)
		return appendString(b, args)
	})
}

// settle ends the output: a response that would otherwise have no output
// gets an empty message, as FromChat gives it, and everything open closes.
func (s *Stream) settle(dst []byte) []byte {
	if s.out.counts[itemMessage] == 0 && s.out.counts[itemCall] == 0 {
		dst = s.closeOpen(dst)
		dst = s.announce(dst, s.out.add(itemMessage))
	}
	return s.closeOpen(dst)
}

func (s *Stream) complete(dst []byte) []byte {
	dst = s.start(dst)
	dst = s.settle(dst)
	res := s.result()
	s.done = true
	typ := "response.completed"
	if res.status == "incomplete" {
		typ = "response.incomplete"
	}
	return s.response(dst, typ, &res)
}

func (s *Stream) result() result {
	res := result{model: s.req.Model, items: s.out.items, usage: s.usage}
	res.status, res.reason = finishStatus(s.finish)
	res.svc = s.svc.JSON()
	return res
}

func (s *Stream) start(dst []byte) []byte {
	if s.started {
		return dst
	}
	s.started = true
	res := result{model: s.req.Model, status: "in_progress"}
	dst = s.response(dst, "response.created", &res)
	return s.response(dst, "response.in_progress", &res)
}

func (s *Stream) response(dst []byte, typ string, res *result) []byte {
	return s.event(dst, typ, func(b []byte) []byte {
		b = append(b, `,"response":`...)
		return s.req.appendResponse(b, s.id, s.created, res)
	})
}

// announce emits the events that open an item: it is added, and a message
// or reasoning item gets its one, empty, part.
func (s *Stream) announce(dst []byte, it *outItem) []byte {
	s.open = append(s.open, it)
	dst = s.event(dst, "response.output_item.added", func(b []byte) []byte {
		b = appendIndex(b, it)
		b = append(b, `,"item":`...)
		return it.appendJSON(b, true)
	})
	switch it.kind {
	case itemReasoning:
		dst = s.event(dst, "response.reasoning_summary_part.added", func(b []byte) []byte {
			b = appendRef(b, it)
			b = append(b, `,"summary_index":0,"part":`...)
			return appendSummaryPart(b, "")
		})
	case itemMessage:
		dst = s.event(dst, "response.content_part.added", func(b []byte) []byte {
			b = appendRef(b, it)
			b = append(b, `,"content_index":0,"part":`...)
			return appendTextPart(b, "")
		})
	}
	return dst
}

// closeOpen emits the done events of the open items, in order. Once the
// answer has finished short, the last item of the output is incomplete, as
// FromChat marks it (before the finish, s.finish is empty: completed).
func (s *Stream) closeOpen(dst []byte) []byte {
	status, _ := finishStatus(s.finish)
	var last *outItem
	if n := len(s.out.items); n > 0 {
		last = s.out.items[n-1]
	}
	for _, it := range s.open {
		it.status = "completed"
		if status == "incomplete" && it == last {
			it.status = "incomplete"
		}
		text := it.text.String()
		switch it.kind {
		case itemReasoning:
			dst = s.event(dst, "response.reasoning_summary_text.done", func(b []byte) []byte {
				b = appendRef(b, it)
				b = append(b, `,"summary_index":0,"text":`...)
				return appendString(b, text)
			})
			dst = s.event(dst, "response.reasoning_summary_part.done", func(b []byte) []byte {
				b = appendRef(b, it)
				b = append(b, `,"summary_index":0,"part":`...)
				return appendSummaryPart(b, text)
			})
		case itemMessage:
			dst = s.event(dst, "response.output_text.done", func(b []byte) []byte {
				b = appendRef(b, it)
				b = append(b, `,"content_index":0,"text":`...)
				b = appendString(b, text)
				return append(b, `,"logprobs":[]`...)
			})
			dst = s.event(dst, "response.content_part.done", func(b []byte) []byte {
				b = appendRef(b, it)
				b = append(b, `,"content_index":0,"part":`...)
				return appendTextPart(b, text)
			})
		case itemCall:
			dst = s.event(dst, "response.function_call_arguments.done", func(b []byte) []byte {
				b = appendRef(b, it)
				b = append(b, `,"name":`...)
				b = appendString(b, it.name)
				b = append(b, `,"arguments":`...)
				return appendString(b, text)
			})
		}
		dst = s.event(dst, "response.output_item.done", func(b []byte) []byte {
			b = appendIndex(b, it)
			b = append(b, `,"item":`...)
			return it.appendJSON(b, false)
		})
	}
	s.open = s.open[:0]
	return dst
}

// event appends one SSE event: its type, then a JSON object holding the
// type, the next sequence number and the members body appends.
func (s *Stream) event(dst []byte, typ string, body func([]byte) []byte) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":"...)
	dst = appendString(dst, typ)
	dst = append(dst, `,"sequence_number":`...)
	dst = strconv.AppendInt(dst, s.seq, 10)
	s.seq++
	dst = body(dst)
	return append(dst, "}\n\n"...)
}

func appendIndex(b []byte, it *outItem) []byte {
	b = append(b, `,"output_index":`...)
	return strconv.AppendInt(b, int64(it.index), 10)
}

func appendRef(b []byte, it *outItem) []byte {
	b = append(b, `,"item_id":`...)
	b = appendString(b, it.id)
	return appendIndex(b, it)
}
