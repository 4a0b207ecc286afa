package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// object is a JSON object that keeps its keys in order, so that replies
// read like a real engine's, field for field.
type object []field

type field struct {
	key   string
	value any
}

// MarshalJSON writes the fields in order.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(f.key)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", f.key, err)
		}
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", f.key, err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// renderer turns a plan into OpenAI chat objects.
type renderer struct {
	id      string
	created int64
	model   string
	// reasoningNames are the fields reasoning text goes on: both
	// reasoning_content and reasoning in-process, one in the HTTP face.
	reasoningNames []string
	// text renders a text completion's stream: text_completion chunks
	// whose choices carry text, not a delta.
	text bool
}

// chunkCount is how many chunks a streamed plan takes: one per token, and
// one empty chunk for a reply with no tokens at all.
func chunkCount(p *plan) int { return max(1, len(p.pieces)) }

// chunk renders chunk i as JSON, followed by any extra top-level fields.
// The first chunk carries the role; final carries the finish reason.
//
// Chunks are the hot path of a benchmark (one per token), so they are
// appended by hand rather than built as objects and reflected over.
func (r *renderer) chunk(p *plan, i int, final bool, extra ...field) ([]byte, error) {
	if r.text {
		return r.textChunk(p, i, final, extra...)
	}
	b := make([]byte, 0, 192+len(r.id)+len(r.model))
	b = append(b, `{"id":`...)
	b = appendString(b, r.id)
	b = append(b, `,"object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, r.created, 10)
	b = append(b, `,"model":`...)
	b = appendString(b, r.model)
	b = append(b, `,"choices":[{"index":0,"delta":{`...)
	sep := false
	key := func(name string) {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = appendString(b, name)
		b = append(b, ':')
	}
	if i == 0 {
		key("role")
		b = append(b, `"assistant"`...)
	}
	if len(p.pieces) == 0 {
		key("content")
		b = append(b, `""`...)
	} else {
		pc := p.pieces[i]
		switch pc.kind {
		case pieceReasoning:
			for _, name := range r.reasoningNames {
				key(name)
				b = appendString(b, pc.text)
			}
		case pieceContent:
			key("content")
			b = appendString(b, pc.text)
		case pieceToolCall:
			key("tool_calls")
			b = append(b, `[{"index":0,"id":`...)
			b = appendString(b, p.toolID)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, p.toolName)
			b = append(b, `,"arguments":""}}]`...)
		case pieceToolArgs:
			key("tool_calls")
			b = append(b, `[{"index":0,"function":{"arguments":`...)
			b = appendString(b, pc.text)
			b = append(b, `}}]`...)
		}
	}
	b = append(b, `},"finish_reason":`...)
	if final {
		b = appendString(b, p.finish)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, "}]"...)
	for _, f := range extra {
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", f.key, err)
		}
		b = append(b, ',')
		b = appendString(b, f.key)
		b = append(b, ':')
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

// textChunk renders chunk i of a text completion, as vLLM streams one:
// only content is text; a completion plans no reasoning or tool calls.
func (r *renderer) textChunk(p *plan, i int, final bool, extra ...field) ([]byte, error) {
	text := ""
	if len(p.pieces) > 0 && p.pieces[i].kind == pieceContent {
		text = p.pieces[i].text
	}
	var finish any
	if final {
		finish = p.finish
	}
	c := r.head("text_completion", field{"choices", []object{{
		{"index", 0},
		{"text", text},
		{"logprobs", nil},
		{"finish_reason", finish},
	}}})
	return append(c, extra...).MarshalJSON()
}

// usageChunk is the include_usage chunk: no choices, only usage.
func (r *renderer) usageChunk(p *plan) object {
	kind := "chat.completion.chunk"
	if r.text {
		kind = "text_completion"
	}
	return r.head(kind, field{"choices", []object{}}, field{"usage", usageObject(p)})
}

// completion renders the non-streaming chat.completion.
func (r *renderer) completion(p *plan) object {
	msg := object{{"role", "assistant"}}
	content := p.text(pieceContent)
	if p.hasToolCall() && content == "" {
		msg = append(msg, field{"content", nil})
	} else {
		msg = append(msg, field{"content", content})
	}
	if p.reasoningTokens > 0 {
		reasoning := p.text(pieceReasoning)
		for _, name := range r.reasoningNames {
			msg = append(msg, field{name, reasoning})
		}
	}
	if p.hasToolCall() {
		msg = append(msg, field{"tool_calls", []object{{
			{"id", p.toolID},
			{"type", "function"},
			{"function", object{{"name", p.toolName}, {"arguments", p.text(pieceToolArgs)}}},
		}}})
	}
	return r.head("chat.completion",
		field{"choices", []object{{
			{"index", 0},
			{"message", msg},
			{"finish_reason", p.finish},
		}}},
		field{"usage", usageObject(p)})
}

func (r *renderer) head(kind string, rest ...field) object {
	o := object{
		{"id", r.id},
		{"object", kind},
		{"created", r.created},
		{"model", r.model},
	}
	return append(o, rest...)
}

// usageObject is the OpenAI usage object.
func usageObject(p *plan) object {
	u := p.usage()
	o := object{
		{"prompt_tokens", u.PromptTokens},
		{"completion_tokens", u.CompletionTokens},
		{"total_tokens", u.TotalTokens},
	}
	if u.ReasoningTokens != nil {
		o = append(o, field{"completion_tokens_details", object{{"reasoning_tokens", *u.ReasoningTokens}}})
	}
	return o
}

// appendString appends s as a JSON string. Like encoding/json it escapes
// control characters, U+2028 and U+2029 and replaces invalid UTF-8; unlike
// it, it leaves <, > and & alone, as Python-based engines do.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
