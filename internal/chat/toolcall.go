package chat

import "github.com/svc-dev/svc/internal/jsontext"

// AppendToolCall writes one of a chat message's tool_calls as
// encoding/json writes {"id", "type", "function": {"name", "arguments"}}
// without escaping for HTML: for the translations that build chat
// requests by hand.
func AppendToolCall(b []byte, id, typ, name, arguments string) []byte {
	b = jsontext.AppendStringNoHTML(append(b, `{"id":`...), id)
	b = jsontext.AppendStringNoHTML(append(b, `,"type":`...), typ)
	b = jsontext.AppendStringNoHTML(append(b, `,"function":{"name":`...), name)
	b = jsontext.AppendStringNoHTML(append(b, `,"arguments":`...), arguments)
	return append(b, "}}"...)
}
