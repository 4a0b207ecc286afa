package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/svc-dev/svc/internal/jsontext"
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

// chunkCount is the steps of the job's stream: its longest choice's
// chunks. Each step sends the chunk of that number of every choice that
// has one.
func (j *job) chunkCount() int {
	n := 0
	for _, p := range j.plans {
		n = max(n, chunkCount(p))
	}
	return n
}

// sendStep renders step i of a streamed reply, a chunk of each choice
// that has one, in index order, and hands each to emit; extra goes on the
// step's last chunk, when final (the stream's last step).
func (j *job) sendStep(i int, final bool, emit func([]byte) error, extra ...field) error {
	last := 0
	for c, p := range j.plans {
		if i < chunkCount(p) {
			last = c
		}
	}
	for c, p := range j.plans {
		if i >= chunkCount(p) {
			continue
		}
		var ex []field
		if final && c == last {
			ex = extra
		}
		data, err := j.render.chunk(p, c, i, !j.dir.failing() && i == chunkCount(p)-1, ex...)
		if err != nil {
			return err
		}
		if err := emit(data); err != nil {
			return err
		}
	}
	return nil
}

// chunk renders chunk i of choice index as JSON, followed by any extra
// top-level fields. The first chunk carries the role; final carries the
// finish reason.
//
// Chunks are the hot path of a benchmark (one per token), so they are
// appended by hand rather than built as objects and reflected over.
func (r *renderer) chunk(p *plan, index, i int, final bool, extra ...field) ([]byte, error) {
	if r.text {
		return r.textChunk(p, index, i, final, extra...)
	}
	b := make([]byte, 0, 192+len(r.id)+len(r.model))
	b = append(b, `{"id":`...)
	b = jsontext.AppendStringNoHTML(b, r.id)
	b = append(b, `,"object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, r.created, 10)
	b = append(b, `,"model":`...)
	b = jsontext.AppendStringNoHTML(b, r.model)
	b = append(b, `,"choices":[{"index":`...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, `,"delta":{`...)
	sep := false
	key := func(name string) {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = jsontext.AppendStringNoHTML(b, name)
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
				b = jsontext.AppendStringNoHTML(b, pc.text)
			}
		case pieceContent:
			key("content")
			b = jsontext.AppendStringNoHTML(b, pc.text)
		case pieceToolCall:
			key("tool_calls")
			b = append(b, `[{"index":0,"id":`...)
			b = jsontext.AppendStringNoHTML(b, p.toolID)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = jsontext.AppendStringNoHTML(b, p.toolName)
			b = append(b, `,"arguments":""}}]`...)
		case pieceToolArgs:
			key("tool_calls")
			b = append(b, `[{"index":0,"function":{"arguments":`...)
			b = jsontext.AppendStringNoHTML(b, pc.text)
			b = append(b, `}}]`...)
		}
	}
	b = append(b, `},"finish_reason":`...)
	if final {
		b = jsontext.AppendStringNoHTML(b, p.finish)
		if p.stopped != "" {
			b = append(b, `,"stop_reason":`...)
			b = jsontext.AppendStringNoHTML(b, p.stopped)
		}
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
		b = jsontext.AppendStringNoHTML(b, f.key)
		b = append(b, ':')
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

// textChunk renders chunk i of a text completion, as vLLM streams one:
// only content is text; a completion plans no reasoning or tool calls.
func (r *renderer) textChunk(p *plan, index, i int, final bool, extra ...field) ([]byte, error) {
	text := ""
	if len(p.pieces) > 0 && p.pieces[i].kind == pieceContent {
		text = p.pieces[i].text
	}
	var finish any
	if final {
		finish = p.finish
	}
	c := r.head("text_completion", field{"choices", []object{{
		{"index", index},
		{"text", text},
		{"logprobs", nil},
		{"finish_reason", finish},
	}}})
	return append(c, extra...).MarshalJSON()
}

// usageChunk is the include_usage chunk: no choices, only usage.
func (r *renderer) usageChunk(ps []*plan) object {
	kind := "chat.completion.chunk"
	if r.text {
		kind = "text_completion"
	}
	return r.head(kind, field{"choices", []object{}}, field{"usage", usageObject(ps)})
}

// completion renders the non-streaming chat.completion, a choice a plan.
func (r *renderer) completion(ps []*plan) object {
	choices := make([]object, len(ps))
	for i, p := range ps {
		choices[i] = r.choice(p, i)
	}
	return r.head("chat.completion", field{"choices", choices}, field{"usage", usageObject(ps)})
}

// choice renders p as the completion's choice of that index.
func (r *renderer) choice(p *plan, index int) object {
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
	c := object{{"index", index}, {"message", msg}, {"finish_reason", p.finish}}
	if p.stopped != "" {
		c = append(c, field{"stop_reason", p.stopped})
	}
	return c
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
func usageObject(ps []*plan) object {
	u := usageOf(ps)
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
