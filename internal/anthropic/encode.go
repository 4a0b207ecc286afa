package anthropic

import (
	"strconv"

	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/jsontext"
)

// appendChat writes r as marshal does, byte for byte (FuzzToChat holds the
// two to it), with the conversation written by hand: its messages are most
// of a request, and encoding/json took half of ToChat's time for a long
// one, through reflection, an interface for each message's content and a
// buffer that grew as it went. The fields a request has at most one of,
// and that are small, still go through marshal.
func appendChat(b []byte, r *chatRequest) ([]byte, error) {
	b = append(b, `{"model":`...)
	b = jsontext.AppendStringNoHTML(b, r.Model)
	b = append(b, `,"messages":`...)
	if r.Messages == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendMessage(b, &r.Messages[i]); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, r.MaxTokens, 10)
	if len(r.Stop) > 0 {
		b = append(b, `,"stop":[`...)
		for i, s := range r.Stop {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsontext.AppendStringNoHTML(b, s)
		}
		b = append(b, ']')
	}
	var err error
	if len(r.Temperature) > 0 {
		if b, err = appendMarshal(append(b, `,"temperature":`...), r.Temperature); err != nil {
			return nil, err
		}
	}
	if len(r.TopP) > 0 {
		if b, err = appendMarshal(append(b, `,"top_p":`...), r.TopP); err != nil {
			return nil, err
		}
	}
	if r.TopK != nil {
		b = strconv.AppendInt(append(b, `,"top_k":`...), *r.TopK, 10)
	}
	if r.Stream {
		b = append(b, `,"stream":true`...)
	}
	if r.StreamOptions != nil {
		b = strconv.AppendBool(append(b, `,"stream_options":{"include_usage":`...), r.StreamOptions.IncludeUsage)
		b = append(b, '}')
	}
	if r.User != "" {
		b = jsontext.AppendStringNoHTML(append(b, `,"user":`...), r.User)
	}
	if len(r.Tools) > 0 {
		if b, err = appendMarshal(append(b, `,"tools":`...), r.Tools); err != nil {
			return nil, err
		}
	}
	if r.ToolChoice != nil {
		if b, err = appendMarshal(append(b, `,"tool_choice":`...), r.ToolChoice); err != nil {
			return nil, err
		}
	}
	if r.ParallelToolCalls != nil {
		b = strconv.AppendBool(append(b, `,"parallel_tool_calls":`...), *r.ParallelToolCalls)
	}
	if r.ReasoningEffort != "" {
		b = jsontext.AppendStringNoHTML(append(b, `,"reasoning_effort":`...), r.ReasoningEffort)
	}
	if r.Reasoning != nil {
		b = strconv.AppendInt(append(b, `,"reasoning":{"max_tokens":`...), r.Reasoning.MaxTokens, 10)
		b = append(b, '}')
	}
	if r.ResponseFormat != nil {
		if b, err = appendMarshal(append(b, `,"response_format":`...), r.ResponseFormat); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

func appendMessage(b []byte, m *chatMessage) ([]byte, error) {
	b = append(b, `{"role":`...)
	b = jsontext.AppendStringNoHTML(b, m.Role)
	switch c := m.Content.(type) {
	case nil:
	case string:
		b = jsontext.AppendStringNoHTML(append(b, `,"content":`...), c)
	case []chatPart:
		b = append(b, `,"content":`...)
		if c == nil {
			b = append(b, "null"...)
			break
		}
		b = append(b, '[')
		for i := range c {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendPart(b, &c[i])
		}
		b = append(b, ']')
	default:
		var err error
		if b, err = appendMarshal(append(b, `,"content":`...), c); err != nil {
			return nil, err
		}
	}
	b = chat.AppendToolCalls(b, m.ToolCalls)
	if m.ToolCallID != nil {
		b = jsontext.AppendStringNoHTML(append(b, `,"tool_call_id":`...), *m.ToolCallID)
	}
	return append(b, '}'), nil
}

func appendPart(b []byte, p *chatPart) []byte {
	b = jsontext.AppendStringNoHTML(append(b, `{"type":`...), p.Type)
	if p.Text != nil {
		b = jsontext.AppendStringNoHTML(append(b, `,"text":`...), *p.Text)
	}
	if p.ImageURL != nil {
		b = jsontext.AppendStringNoHTML(append(b, `,"image_url":{"url":`...), p.ImageURL.URL)
		b = append(b, '}')
	}
	if p.File != nil {
		b = jsontext.AppendStringNoHTML(append(b, `,"file":{"filename":`...), p.File.Filename)
		b = jsontext.AppendStringNoHTML(append(b, `,"file_data":`...), p.File.FileData)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendMarshal appends what marshal makes of v.
func appendMarshal(b []byte, v any) ([]byte, error) {
	out, err := marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, out...), nil
}
