package responses

import (
	"bytes"
	"encoding/json"

	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/jsontext"
)

// appendChat writes r as marshal does, byte for byte (FuzzAppendChat
// holds the two to it), with the conversation written by hand: its
// messages are most of a request, and encoding/json spent its time on
// them in reflection and in compacting each message's content again, which
// is a string token or what this package encoded, compact already.
func appendChat(b []byte, r *chatBody) []byte {
	b = jsontext.AppendStringNoHTML(append(b, `{"model":`...), r.Model)
	b = append(b, `,"messages":`...)
	if r.Messages == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendMessage(b, &r.Messages[i])
		}
		b = append(b, ']')
	}
	if r.Stream {
		b = append(b, `,"stream":true`...)
	}
	b = appendRawField(b, `,"stream_options":`, r.StreamOptions)
	b = appendRawField(b, `,"max_completion_tokens":`, r.MaxCompletionTokens)
	b = appendRawField(b, `,"temperature":`, r.Temperature)
	b = appendRawField(b, `,"top_p":`, r.TopP)
	if len(r.Tools) > 0 {
		b = append(append(b, `,"tools":`...), marshal(r.Tools)...)
	}
	b = appendRawField(b, `,"tool_choice":`, r.ToolChoice)
	b = appendRawField(b, `,"parallel_tool_calls":`, r.ParallelToolCalls)
	b = appendRawField(b, `,"response_format":`, r.ResponseFormat)
	if r.ReasoningEffort != "" {
		b = jsontext.AppendStringNoHTML(append(b, `,"reasoning_effort":`...), r.ReasoningEffort)
	}
	b = appendRawField(b, `,"user":`, r.User)
	return append(b, '}')
}

func appendMessage(b []byte, m *chatMessage) []byte {
	b = jsontext.AppendStringNoHTML(append(b, `{"role":`...), m.Role)
	b = appendRawField(b, `,"content":`, m.Content)
	b = chat.AppendToolCalls(b, m.ToolCalls)
	if m.ToolCallID != nil {
		b = jsontext.AppendStringNoHTML(append(b, `,"tool_call_id":`...), *m.ToolCallID)
	}
	return append(b, '}')
}

// appendRawField appends name and raw, compacted as encoding/json writes a
// json.RawMessage, unless raw is empty (omitempty). A string token, and a
// value with no white space byte at all, are compact as they stand.
func appendRawField(b []byte, name string, raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return b
	}
	b = append(b, name...)
	if raw[0] == '"' && raw[len(raw)-1] == '"' || !bytes.ContainsAny(raw, " \t\r\n") {
		return append(b, raw...)
	}
	return append(b, compact(raw)...)
}
