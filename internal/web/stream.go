package web

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"
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
// dropped: the client has had one.
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
	calls, visible, empty := false, false, true
	for _, c := range chunk.Choices {
		d := c.Delta
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
	case empty && len(chunk.Choices) > 0 && s.run.forwarded:
		return nil
	}
	return s.pass(ctx, data, visible)
}

func (s *turnSink) Body(ctx context.Context, data []byte) error { return s.Event(ctx, data) }

func (s *turnSink) pass(ctx context.Context, data []byte, visible bool) error {
	if visible && s.run.firstShown.IsZero() {
		s.run.firstShown = time.Now()
	}
	s.run.forwarded = true
	return s.run.out.Event(ctx, data)
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
