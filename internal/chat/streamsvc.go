package chat

import (
	"bytes"
	"encoding/json"

	"github.com/svc-dev/svc/internal/jsonraw"
	"github.com/svc-dev/svc/internal/jsontext"
)

// StreamSvc gathers the svc annotation a chat stream carries over several
// chunks (web tool steps as they run; notices, timing, the worker and the
// request id at the end) into the one object a whole answer has, for the
// dialects that give it in one place: the Messages API's message_delta and
// the Responses API's last response. Members keep the place they were first
// sent in, a later value replacing an earlier. Each step event's
// web_tool_step is folded into web_tool_steps, a step's end
// replacing its start, as a non-streaming answer lists them. The zero value
// is ready.
type StreamSvc struct {
	members []svcMember
	steps   []svcStep
}

type svcMember struct {
	key   string
	value json.RawMessage
}

type svcStep struct {
	index int64
	value json.RawMessage
}

const (
	stepKey  = "web_tool_step"
	stepsKey = "web_tool_steps"
)

// Add takes the svc member of one chunk, and returns the web tool step it
// carried (compacted), nil when none, for a dialect that shows the steps as
// they come. A value that is not a JSON object is ignored.
func (s *StreamSvc) Add(raw json.RawMessage) (step json.RawMessage) {
	if jsonraw.KindOf(raw) != jsonraw.Object || !json.Valid(raw) {
		return nil
	}
	fields, _ := jsonraw.AppendFields(nil, raw)
	for _, f := range fields {
		v := compact(f.Value)
		if string(f.Name) == stepKey && jsonraw.KindOf(v) == jsonraw.Object {
			s.addStep(v)
			step = v
			continue
		}
		s.set(string(f.Name), v)
	}
	return step
}

func (s *StreamSvc) set(key string, v json.RawMessage) {
	for i := range s.members {
		if s.members[i].key == key {
			s.members[i].value = v
			return
		}
	}
	s.members = append(s.members, svcMember{key, v})
}

// addStep records a step event: the worker numbers a request's steps in
// the order it runs them, so they are kept as they first came.
func (s *StreamSvc) addStep(v json.RawMessage) {
	idx := int64(-1)
	if m, ok := jsonraw.DecodeObject(v); ok {
		if n, r := jsonraw.Int(string(m["index"])); jsonraw.KindOf(m["index"]) == jsonraw.Number && r == jsonraw.IntOK && n >= 0 {
			idx = n
		}
	}
	if idx >= 0 {
		for i := range s.steps {
			if s.steps[i].index == idx {
				s.steps[i].value = v
				return
			}
		}
	}
	s.steps = append(s.steps, svcStep{idx, v})
}

// JSON is the gathered object, nil when the stream carried none.
func (s *StreamSvc) JSON() json.RawMessage {
	if len(s.members) == 0 && len(s.steps) == 0 {
		return nil
	}
	b := []byte{'{'}
	n := 0
	member := func(key string) {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = jsontext.AppendString(b, key)
		b = append(b, ':')
	}
	for _, m := range s.members {
		if m.key == stepsKey && len(s.steps) > 0 {
			continue // a whole list sent as well: the events are the record
		}
		member(m.key)
		b = append(b, m.value...)
	}
	if len(s.steps) > 0 {
		// Last, where a whole answer has them.
		member(stepsKey)
		b = append(b, '[')
		for i, st := range s.steps {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, st.value...)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// compact is raw without insignificant space, in a slice of its own: the
// chunk it came in is reused.
func compact(raw []byte) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return bytes.Clone(raw)
	}
	return b.Bytes()
}
