package anthropic

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/svc-dev/svc/internal/jsonraw"
	"github.com/svc-dev/svc/internal/jsontext"
)

// The Messages reply. Field order is Anthropic's.
type message struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	Role         string          `json:"role"`
	Model        string          `json:"model"`
	Content      []any           `json:"content"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence *string         `json:"stop_sequence"`
	Usage        usage           `json:"usage"`
	Svc          json.RawMessage `json:"svc,omitempty"`
}

type usage struct {
	InputTokens          int64  `json:"input_tokens"`
	OutputTokens         int64  `json:"output_tokens"`
	CacheReadInputTokens *int64 `json:"cache_read_input_tokens,omitempty"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type thinkingBlock struct {
	Type      string `json:"type"`
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
}

type toolUseBlock struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// The chat side is read loosely, member by member: an engine's odd member
// (an object where a string was expected) must cost that member, not the
// whole reply.

type chatUsage struct {
	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64
}

// readUsage reads an OpenAI usage object; ok is false when raw is none.
func readUsage(raw json.RawMessage) (chatUsage, bool) {
	o, ok := jsonraw.DecodeObject(raw)
	if !ok {
		return chatUsage{}, false
	}
	u := chatUsage{PromptTokens: count(o["prompt_tokens"]), CompletionTokens: count(o["completion_tokens"])}
	if d, ok := jsonraw.DecodeObject(o["prompt_tokens_details"]); ok {
		u.CachedTokens = count(d["cached_tokens"])
	}
	return u, true
}

// count reads a token count; anything but a non-negative integer is 0.
func count(raw json.RawMessage) int64 {
	if jsonraw.KindOf(raw) != jsonraw.Number {
		return 0
	}
	n, res := jsonraw.Int(string(raw))
	if res != jsonraw.IntOK || n < 0 {
		return 0
	}
	return n
}

// anthropicUsage splits the prompt as Anthropic does: input_tokens are the
// tokens not read from the cache.
func (u chatUsage) anthropic() usage {
	out := usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if c := u.CachedTokens; c > 0 && c <= u.PromptTokens {
		out.InputTokens -= c
		out.CacheReadInputTokens = &c
	}
	return out
}

// stringField is raw as a string, "" when it is not one.
func stringField(raw json.RawMessage) string {
	s, _ := jsonraw.DecodeString(raw)
	return s
}

// reasoningOf reads a message or delta's reasoning text: reasoning_content,
// or reasoning from engines that only send that. The gateway mirrors one on
// the other, so only one is read.
func reasoningOf(o jsonraw.Members) string {
	if raw, ok := o.Field("reasoning_content"); ok {
		return stringField(raw)
	}
	return stringField(o["reasoning"])
}

// matchedStop is the stop string an engine says ended the reply: vLLM's
// stop_reason, SGLang's matched_stop. Token ids (numbers) and the end of
// text (null) are not stop sequences.
func matchedStop(choice jsonraw.Members) string {
	if s := stringField(choice["stop_reason"]); s != "" {
		return s
	}
	return stringField(choice["matched_stop"])
}

// stopReason maps a finish_reason. A reply that calls tools is tool_use
// even when the engine says stop, as some do: agent loops run the tools
// only on tool_use.
func stopReason(finish, matched string, calledTools bool) (reason string, sequence *string) {
	switch finish {
	case "length":
		return "max_tokens", nil
	case "tool_calls", "function_call":
		return "tool_use", nil
	case "content_filter":
		return "refusal", nil
	}
	if calledTools {
		return "tool_use", nil
	}
	if finish == "stop" && matched != "" {
		return "stop_sequence", &matched
	}
	return "end_turn", nil
}

// contentText reads a message's content: a string, or text parts.
func contentText(raw json.RawMessage) string {
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		return stringField(raw)
	case jsonraw.Array:
		var parts []json.RawMessage
		if json.Unmarshal(raw, &parts) != nil {
			return ""
		}
		var b strings.Builder
		for _, p := range parts {
			if o, ok := jsonraw.DecodeObject(p); ok && stringField(o["type"]) == "text" {
				b.WriteString(stringField(o["text"]))
			}
		}
		return b.String()
	}
	return ""
}

// toolInput is a tool call's arguments as the input object Anthropic
// clients expect. Arguments that are not a JSON object (a model can emit
// anything) become {} so the reply still reaches the client.
func toolInput(raw json.RawMessage) json.RawMessage {
	args := []byte(raw)
	if jsonraw.KindOf(raw) == jsonraw.String {
		args = []byte(stringField(raw))
	}
	if jsonraw.KindOf(args) != jsonraw.Object || !jsontext.Valid(args) {
		return json.RawMessage("{}")
	}
	return json.RawMessage(args)
}

// FromChat turns a complete chat.completion body, as the gateway answers it
// (with usage and its svc object), into an Anthropic message. id is the
// gateway's request id; the message id is "msg_"+id. model, the model the
// client asked for, names the message when the completion names none, as
// a stream's message_start does. svc is carried over as a top-level svc
// member.
func FromChat(chat []byte, id, model string) ([]byte, error) {
	top, ok := jsonraw.DecodeObject(chat)
	if !ok {
		return nil, errors.New("anthropic: the chat completion is not a JSON object")
	}
	var choices []json.RawMessage
	if jsonraw.KindOf(top["choices"]) == jsonraw.Array {
		_ = json.Unmarshal(top["choices"], &choices)
	}
	if len(choices) == 0 {
		return nil, errors.New("anthropic: the chat completion has no choices")
	}
	choice, ok := jsonraw.DecodeObject(choices[0])
	if !ok {
		return nil, errors.New("anthropic: the chat completion's choice is not an object")
	}
	msg, _ := jsonraw.DecodeObject(choice["message"])

	out := message{
		ID: "msg_" + id, Type: "message", Role: "assistant",
		Model:   cmp.Or(stringField(top["model"]), model),
		Content: []any{},
	}
	if r := reasoningOf(msg); r != "" {
		out.Content = append(out.Content, thinkingBlock{Type: "thinking", Thinking: r})
	}
	var calls []any
	var toolCalls []json.RawMessage
	if jsonraw.KindOf(msg["tool_calls"]) == jsonraw.Array {
		_ = json.Unmarshal(msg["tool_calls"], &toolCalls)
	}
	for i, raw := range toolCalls {
		tc, ok := jsonraw.DecodeObject(raw)
		if !ok {
			continue
		}
		fn, _ := jsonraw.DecodeObject(tc["function"])
		callID := stringField(tc["id"])
		if callID == "" {
			callID = fmt.Sprintf("toolu_%s_%d", id, i)
		}
		calls = append(calls, toolUseBlock{Type: "tool_use", ID: callID, Name: stringField(fn["name"]), Input: toolInput(fn["arguments"])})
	}
	// An answer of nothing at all keeps a text block, which clients read
	// as content[0]; one that thought, or called tools, has no empty one.
	if text := contentText(msg["content"]); text != "" || len(calls) == 0 && len(out.Content) == 0 {
		out.Content = append(out.Content, textBlock{Type: "text", Text: text})
	}
	out.Content = append(out.Content, calls...)

	reason, seq := stopReason(stringField(choice["finish_reason"]), matchedStop(choice), len(calls) > 0)
	out.StopReason, out.StopSequence = &reason, seq
	if u, ok := readUsage(top["usage"]); ok {
		out.Usage = u.anthropic()
	}
	if jsonraw.KindOf(top["svc"]) == jsonraw.Object {
		out.Svc = top["svc"]
	}
	return marshal(&out)
}
