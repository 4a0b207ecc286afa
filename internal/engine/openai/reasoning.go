package openai

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"
)

// The gateway passes a chat request's thinking controls on in its own
// canonical vocabulary:
//
//   - reasoning_effort: low, medium, high, or none/minimal for no thinking;
//   - reasoning: {max_tokens, effort}, max_tokens being a thinking budget
//     (0 turns thinking off) and effort another way to say reasoning_effort;
//   - enable_thinking: true or false.
//
// No engine understands all of these, so mapReasoning adds the switches
// each engine does read, by the flavour /v1/models reported:
//
//   - vllm: chat_template_kwargs.enable_thinking when thinking is turned on
//     or off; thinking_token_budget for a budget. reasoning_effort stays
//     (newer versions read it for some models).
//   - llamacpp: chat_template_kwargs.enable_thinking; a budget goes to
//     thinking_budget_tokens and reasoning_budget_tokens (the name older
//     builds read), and both are 0 when thinking is off.
//   - sglang: chat_template_kwargs.enable_thinking, and separate_reasoning
//     when thinking is on. reasoning_effort minimal becomes none: SGLang
//     takes none but rejects minimal.
//   - ollama: Ollama reads reasoning_effort itself, but reasoning.effort
//     first whenever the reasoning object is present, so the two are copied
//     to one another; off becomes "none" in both (older versions reject
//     minimal, newer ones take it for low).
//   - generic: chat_template_kwargs.enable_thinking, which most servers
//     pass to the chat template.
//
// Thinking is off when an effort is none or minimal, reasoning.max_tokens
// is 0 or enable_thinking is false; otherwise on when enable_thinking is
// true, an effort is low, medium or high or reasoning.max_tokens is
// positive; otherwise the engine's default is left alone.
//
// Nothing the client sent is removed: the servers ignore fields they do not
// know. A switch the client set itself (chat_template_kwargs.enable_thinking,
// thinking_token_budget, separate_reasoning, ...) is left as it is. Only the
// top level of the body and the objects written to are decoded; every other
// value goes out byte for byte.

// thinkMode is what a request asks of the model's thinking.
type thinkMode uint8

const (
	thinkDefault thinkMode = iota // not said: the engine's default applies
	thinkOn
	thinkOff
)

// reasoningControls is the request's reasoning fields, read leniently:
// the gateway has validated them, and a value of the wrong type counts as
// absent.
type reasoningControls struct {
	effort    string                     // reasoning_effort
	reasoning map[string]json.RawMessage // the reasoning object; nil when absent or not an object
	rEffort   string                     // reasoning.effort
	budget    int64                      // reasoning.max_tokens; -1 when absent
	enable    *bool                      // enable_thinking
}

// mode decides thinking: any request to turn it off wins, then any request
// to turn it on; otherwise the engine's default is left alone.
func (c *reasoningControls) mode() thinkMode {
	switch {
	case effortOff(c.effort) || effortOff(c.rEffort) || c.budget == 0 || (c.enable != nil && !*c.enable):
		return thinkOff
	case (c.enable != nil && *c.enable) || effortOn(c.effort) || effortOn(c.rEffort) || c.budget > 0:
		return thinkOn
	default:
		return thinkDefault
	}
}

func effortOff(e string) bool { return e == "none" || e == "minimal" }

func effortOn(e string) bool { return e == "low" || e == "medium" || e == "high" }

// mapReasoning adds the thinking switches of engine fl to a chat request
// body. A body without reasoning fields, or that cannot be decoded, is
// returned as it came; so is one that needs no change.
//
// Only the top-level members the mapping reads or writes are decoded, and
// the body is written again with those changed in place and those added
// at its end: the rest, a conversation's history, keeps its bytes and its
// order. Decoding and encoding the whole body took a worker 300 µs for a
// conversation of 24 KB. A body whose names cannot be read without
// decoding them (an escaped one) still goes the whole way.
func mapReasoning(body []byte, fl flavour) []byte {
	var m map[string]json.RawMessage
	reads := false
	plain := topMembers(body, func(key, val []byte) bool {
		switch string(key) {
		case "reasoning_effort", "reasoning", "enable_thinking":
			reads = true
		case "chat_template_kwargs", "thinking_token_budget", "thinking_budget_tokens", "reasoning_budget_tokens", "separate_reasoning":
		default:
			return true
		}
		if m == nil {
			m = make(map[string]json.RawMessage, 4)
		}
		m[string(key)] = val // a repeated name's last value, as decoding takes
		return true
	})
	switch {
	case !plain:
		return mapReasoningDecoded(body, fl)
	case !reads:
		return body
	}
	sent := maps.Clone(m)
	if !mapControls(m, fl) {
		return body
	}
	return rewriteTop(body, sent, m)
}

// mapReasoningDecoded is mapReasoning by way of the whole body decoded.
func mapReasoningDecoded(body []byte, fl flavour) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || m == nil {
		return body
	}
	if !mapControls(m, fl) {
		return body
	}
	return encodeObject(m)
}

// mapControls adds to the top-level members m the switches of engine fl
// for the reasoning fields among them, and reports whether it changed m.
func mapControls(m map[string]json.RawMessage, fl flavour) bool {
	c, ok := readReasoning(m)
	if !ok {
		return false
	}
	mode := c.mode()
	var changed bool
	switch fl {
	case flavourVLLM:
		changed = setEnableThinking(m, mode)
		if mode == thinkOn && c.budget > 0 {
			changed = setDefault(m, "thinking_token_budget", intRaw(c.budget)) || changed
		}
	case flavourLlamaCpp:
		changed = setEnableThinking(m, mode)
		budget := int64(-1)
		switch {
		case mode == thinkOff:
			budget = 0
		case mode == thinkOn && c.budget > 0:
			budget = c.budget
		}
		if budget >= 0 {
			// Older builds read reasoning_budget_tokens.
			changed = setDefault(m, "thinking_budget_tokens", intRaw(budget)) || changed
			changed = setDefault(m, "reasoning_budget_tokens", intRaw(budget)) || changed
		}
	case flavourSGLang:
		changed = setEnableThinking(m, mode)
		if mode == thinkOn {
			changed = setDefault(m, "separate_reasoning", json.RawMessage("true")) || changed
		}
		if c.effort == "minimal" {
			// SGLang's reasoning_effort takes none but rejects minimal.
			m["reasoning_effort"], changed = json.RawMessage(`"none"`), true
		}
	case flavourOllama:
		changed = mapOllamaEffort(m, &c, mode)
	default:
		changed = setEnableThinking(m, mode)
	}
	return changed
}

// rewriteTop writes body, a JSON object, again with the top-level members
// to: a member whose value differs from its value in from takes the new
// one where it stands, and one from lacks follows the last, in the order
// of their names. Every other byte is body's.
func rewriteTop(body []byte, from, to map[string]json.RawMessage) []byte {
	out := make([]byte, 0, len(body)+64)
	// end is where the object closes: past the last member's value, or
	// past the opening brace, then white space (topMembers has checked
	// that the brace is there).
	last, members, end := 0, 0, bytes.IndexByte(body, '{')+1
	topMembers(body, func(key, val []byte) bool {
		members++
		// val lies in body: its offset is what its capacity lacks of body's.
		at := cap(body) - cap(val)
		end = at + len(val)
		v, ok := to[string(key)]
		if !ok || bytes.Equal(v, from[string(key)]) {
			return true
		}
		out = append(append(out, body[last:at]...), rawOrNull(v)...)
		last = end
		return true
	})
	end = len(body) - len(skipSpace(body[end:]))
	out = append(out, body[last:end]...)
	for _, k := range slices.Sorted(maps.Keys(to)) {
		if _, had := from[k]; had {
			continue
		}
		if members > 0 {
			out = append(out, ',')
		}
		members++
		out = appendKey(out, k)
		out = append(append(out, ':'), rawOrNull(to[k])...)
	}
	return append(out, body[end:]...)
}

func rawOrNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

// readReasoning reads the canonical reasoning fields of a decoded body;
// ok is false when there are none.
func readReasoning(m map[string]json.RawMessage) (c reasoningControls, ok bool) {
	c.budget = -1
	if raw, has := m["reasoning_effort"]; has {
		ok = true
		_ = json.Unmarshal(raw, &c.effort)
	}
	if raw, has := m["reasoning"]; has {
		ok = true
		if json.Unmarshal(raw, &c.reasoning) != nil {
			c.reasoning = nil
		}
		if c.reasoning != nil {
			if e, has := c.reasoning["effort"]; has {
				_ = json.Unmarshal(e, &c.rEffort)
			}
			if n, has := c.reasoning["max_tokens"]; has {
				if v, whole := wholeNumber(n); whole && v >= 0 {
					c.budget = v
				}
			}
		}
	}
	if raw, has := m["enable_thinking"]; has {
		ok = true
		var b bool
		if json.Unmarshal(raw, &b) == nil && !isNull(raw) {
			c.enable = &b
		}
	}
	return c, ok
}

// mapOllamaEffort maps thinking onto the efforts Ollama's /v1 reads. It
// takes reasoning.effort when the reasoning object is present (even
// without an effort) and reasoning_effort otherwise; none turns thinking
// off, and older versions reject minimal.
func mapOllamaEffort(m map[string]json.RawMessage, c *reasoningControls, mode thinkMode) bool {
	changed := false
	setReasoningEffort := func(raw json.RawMessage) {
		if c.reasoning == nil {
			return
		}
		c.reasoning["effort"] = raw
		m["reasoning"] = encodeObject(c.reasoning)
		changed = true
	}
	switch {
	case mode == thinkOff:
		none := json.RawMessage(`"none"`)
		if c.effort != "none" {
			m["reasoning_effort"], changed = none, true
		}
		if c.rEffort != "none" {
			setReasoningEffort(none)
		}
	case c.effort == "" && c.rEffort != "":
		m["reasoning_effort"], changed = c.reasoning["effort"], true
	case c.effort != "" && c.rEffort == "":
		setReasoningEffort(m["reasoning_effort"])
	}
	return changed
}

// setEnableThinking sets chat_template_kwargs.enable_thinking when the
// request turns thinking on or off, keeping the object's other keys. A
// value the client put there wins, and kwargs that are not an object are
// left for the engine to reject.
func setEnableThinking(m map[string]json.RawMessage, mode thinkMode) bool {
	if mode == thinkDefault {
		return false
	}
	kw := map[string]json.RawMessage{}
	if raw, ok := m["chat_template_kwargs"]; ok && !isNull(raw) {
		if json.Unmarshal(raw, &kw) != nil || kw == nil {
			return false
		}
	}
	if !setDefault(kw, "enable_thinking", boolRaw(mode == thinkOn)) {
		return false
	}
	m["chat_template_kwargs"] = encodeObject(kw)
	return true
}

// setDefault sets m[key] unless it holds a value already (null counts as
// none).
func setDefault(m map[string]json.RawMessage, key string, v json.RawMessage) bool {
	if raw, ok := m[key]; ok && !isNull(raw) {
		return false
	}
	m[key] = v
	return true
}

func boolRaw(b bool) json.RawMessage {
	if b {
		return json.RawMessage("true")
	}
	return json.RawMessage("false")
}

func intRaw(n int64) json.RawMessage { return strconv.AppendInt(nil, n, 10) }

// wholeNumber reads a JSON number with no fractional part (2048, 2048.0,
// 2.048e3). Strings and null are not numbers.
func wholeNumber(raw json.RawMessage) (int64, bool) {
	s := string(bytes.TrimSpace(raw))
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}
