package web

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/jsonraw"
)

// chunkHead is a chunk's identity, which step events repeat.
type chunkHead struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
}

// streamChunk is what a turn reads of a streamed chunk.
type streamChunk struct {
	chunkHead
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Role             string `json:"role"`
			ToolCalls        []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// turnSink passes a streamed turn on to the client as it comes, except
// its tool calls: those chunks, and the finish that says the turn ends in
// calls, are held back and the calls gathered for the loop to run. A
// later turn's opening chunk, which carries nothing but the role, is
// dropped once the client has had one (a turn's role may come in the
// chunk of its first call, held back with it).
type turnSink struct {
	run     *loopRun
	held    [][]byte
	parts   map[int]*toolCall
	content strings.Builder
}

func (s *turnSink) Event(ctx context.Context, data []byte) error {
	var chunk streamChunk
	if json.Unmarshal(data, &chunk) != nil {
		return s.pass(ctx, data, false)
	}
	if s.run.head.ID == "" && chunk.ID != "" {
		s.run.head = chunk.chunkHead
	}
	calls, visible, empty, role := false, false, true, false
	for _, c := range chunk.Choices {
		d := c.Delta
		role = role || d.Role != ""
		for _, tc := range d.ToolCalls {
			calls = true
			if s.parts == nil {
				s.parts = map[int]*toolCall{}
			}
			p := s.parts[tc.Index]
			if p == nil {
				p = &toolCall{}
				s.parts[tc.Index] = p
			}
			if tc.ID != "" {
				p.ID = tc.ID
			}
			p.Function.Name += tc.Function.Name
			p.Function.Arguments += tc.Function.Arguments
		}
		if c.FinishReason != nil && *c.FinishReason == "tool_calls" {
			calls = true
		}
		s.content.WriteString(d.Content)
		if d.Content != "" || d.ReasoningContent != "" {
			visible = true
		}
		if d.Content != "" || d.ReasoningContent != "" || c.FinishReason != nil {
			empty = false
		}
	}
	switch {
	case calls:
		s.held = append(s.held, bytes.Clone(data))
		return nil
	case empty && len(chunk.Choices) > 0 && s.run.roleSent:
		return nil
	}
	s.run.roleSent = s.run.roleSent || role
	return s.pass(ctx, withHead(data, s.run.head), visible)
}

func (s *turnSink) Body(ctx context.Context, data []byte) error { return s.Event(ctx, data) }

func (s *turnSink) pass(ctx context.Context, data []byte, visible bool) error {
	if visible && s.run.firstShown.IsZero() {
		s.run.firstShown = time.Now()
	}
	return s.run.out.Event(ctx, data)
}

// withHead is a chunk of a later turn under the identity of the stream's
// first: every chunk of one completion has the same id and created, and a
// client that groups chunks by id would otherwise see one completion per
// turn. data is JSON; a chunk already under the identity, or that is not
// an object, is returned as it is.
func withHead(data []byte, h chunkHead) []byte {
	if h.ID == "" {
		return data
	}
	fields, ok := jsonraw.AppendFields(nil, data)
	if !ok {
		return data
	}
	var out []byte
	at := 0
	for _, f := range fields {
		var want []byte
		switch string(f.Name) {
		case "id":
			want, _ = json.Marshal(h.ID)
		case "created":
			want = strconv.AppendInt(nil, h.Created, 10)
		default:
			continue
		}
		if bytes.Equal(f.Value, want) {
			continue
		}
		// f.Value is data[start:start+len(f.Value)].
		start := cap(data) - cap(f.Value)
		out = append(append(out, data[at:start]...), want...)
		at = start + len(f.Value)
	}
	if out == nil {
		return data
	}
	return append(out, data[at:]...)
}

// calls are the turn's tool calls, whole, in the order of their indexes.
func (s *turnSink) calls() []toolCall {
	var out []toolCall
	for _, i := range slices.Sorted(maps.Keys(s.parts)) {
		if p := s.parts[i]; p.Function.Name != "" {
			out = append(out, *p)
		}
	}
	return out
}

// contentJSON is the text the turn said beside its calls, as a message's
// content: null when there was none.
func (s *turnSink) contentJSON() json.RawMessage {
	if s.content.Len() == 0 {
		return nil
	}
	b, _ := json.Marshal(s.content.String())
	return b
}
