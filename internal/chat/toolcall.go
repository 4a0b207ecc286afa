package chat

import "github.com/svc-dev/svc/internal/jsontext"

// ToolCall is one of a chat message's tool_calls, as the translations
// that build chat requests from other APIs' write it.
type ToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function ToolCallFunction `json:"function"`
}

// ToolCallFunction is the function a ToolCall calls.
type ToolCallFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// FunctionCall is the ToolCall of function name with arguments.
func FunctionCall(id, name, arguments string) ToolCall {
	return ToolCall{ID: id, Type: "function", Function: ToolCallFunction{Name: name, Arguments: arguments}}
}

// AppendToolCalls writes a message's tool_calls member, with the comma
// before it, as encoding/json writes a []ToolCall field tagged omitempty
// without escaping for HTML: nothing for none. For the translations that
// write chat requests by hand.
func AppendToolCalls(b []byte, calls []ToolCall) []byte {
	if len(calls) == 0 {
		return b
	}
	b = append(b, `,"tool_calls":[`...)
	for i := range calls {
		if i > 0 {
			b = append(b, ',')
		}
		tc := &calls[i]
		b = jsontext.AppendStringNoHTML(append(b, `{"id":`...), tc.ID)
		b = jsontext.AppendStringNoHTML(append(b, `,"type":`...), tc.Type)
		b = jsontext.AppendStringNoHTML(append(b, `,"function":{"name":`...), tc.Function.Name)
		b = jsontext.AppendStringNoHTML(append(b, `,"arguments":`...), tc.Function.Arguments)
		b = append(b, "}}"...)
	}
	return append(b, ']')
}
