package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Most chunks of a stream are a single token of content and need no
// change at all. The functions here decide that from the raw bytes, so
// those chunks are forwarded without being decoded and encoded again.
//
// The byte scans rely on a property of JSON: a quote inside a string is
// always escaped, so `"key"` followed by a colon can only be an object
// key, never text the model wrote.

const (
	keyUsage     = `"usage"`
	keyTimings   = `"timings"`
	keyMetrics   = `"metrics"`
	keyReasoning = `"reasoning` // reasoning and reasoning_content
	keyError     = `"error"`
)

// needsRewrite reports whether a chunk may carry a field the adapter
// removes (usage, llama.cpp timings, vLLM metrics) or mirrors (reasoning).
func needsRewrite(p []byte) bool {
	return bytes.Contains(p, []byte(keyUsage)) || bytes.Contains(p, []byte(keyTimings)) ||
		bytes.Contains(p, []byte(keyReasoning)) || bytes.Contains(p, []byte(keyMetrics))
}

// isErrorPayload reports whether a stream payload is an engine error:
// {"error": ...} (OpenAI, llama.cpp, SGLang) or vLLM's flat
// {"object":"error", ...}.
func isErrorPayload(p []byte) bool {
	if !bytes.Contains(p, []byte(keyError)) {
		return false
	}
	var v struct {
		Error  json.RawMessage `json:"error"`
		Object string          `json:"object"`
	}
	if json.Unmarshal(p, &v) != nil {
		return false
	}
	return !isNull(v.Error) || v.Object == "error"
}

// errorStatus is the HTTP status an error payload asks for: its numeric
// code when that is an error status, else 500.
func errorStatus(p []byte) int {
	var v struct {
		Error json.RawMessage `json:"error"`
		Code  json.RawMessage `json:"code"`
	}
	_ = json.Unmarshal(p, &v)
	code := v.Code
	if len(v.Error) > 0 && v.Error[0] == '{' {
		var e struct {
			Code json.RawMessage `json:"code"`
		}
		if json.Unmarshal(v.Error, &e) == nil {
			code = e.Code
		}
	}
	var n float64
	if json.Unmarshal(code, &n) == nil && n >= 400 && n < 600 {
		return int(n)
	}
	return 500
}

// carriesToken reports whether a chunk carries generated output: non-empty
// content or reasoning text, or tool calls.
func carriesToken(p []byte) bool {
	for _, key := range []string{`"content"`, `"reasoning_content"`, `"reasoning"`} {
		found := false
		eachValue(p, key, func(v []byte) bool {
			found = len(v) >= 2 && v[0] == '"' && v[1] != '"'
			return !found
		})
		if found {
			return true
		}
	}
	found := false
	eachValue(p, `"tool_calls"`, func(v []byte) bool {
		if len(v) > 0 && v[0] == '[' {
			rest := skipSpace(v[1:])
			found = len(rest) > 0 && rest[0] != ']'
		}
		return !found
	})
	return found
}

// carriesText reports whether a text completion's chunk carries output:
// a choice's non-empty text.
func carriesText(p []byte) bool {
	found := false
	eachValue(p, `"text"`, func(v []byte) bool {
		found = len(v) >= 2 && v[0] == '"' && v[1] != '"'
		return !found
	})
	return found
}

// lastFinishReason is the last non-null finish_reason in p, or "".
func lastFinishReason(p []byte) string {
	reason := ""
	eachValue(p, `"finish_reason"`, func(v []byte) bool {
		if len(v) == 0 || v[0] != '"' {
			return true
		}
		end := bytes.IndexByte(v[1:], '"')
		if end < 0 {
			return true
		}
		s := v[1 : end+1]
		if bytes.IndexByte(s, '\\') >= 0 {
			// Escapes are unheard of in finish reasons, but decode
			// properly rather than guess.
			var dec string
			if json.NewDecoder(bytes.NewReader(v)).Decode(&dec) == nil {
				reason = dec
			}
			return true
		}
		if len(s) > 0 {
			reason = reasonString(s)
		}
		return true
	})
	return reason
}

// reasonString is a finish reason as a string, the common ones without
// copying.
func reasonString(s []byte) string {
	for _, r := range [...]string{"stop", "length", "tool_calls", "content_filter"} {
		if string(s) == r {
			return r
		}
	}
	return string(s)
}

// eachValue calls f with the text from the start of each value of
// quotedKey (the key with its quotes, `"content"`) in p to the end of p,
// until f returns false.
func eachValue(p []byte, quotedKey string, f func(v []byte) bool) {
	needle := []byte(quotedKey)
	for i := 0; ; {
		j := bytes.Index(p[i:], needle)
		if j < 0 {
			return
		}
		i += j + len(needle)
		rest := skipSpace(p[i:])
		if len(rest) == 0 || rest[0] != ':' {
			continue // a string value that happens to equal key
		}
		if !f(skipSpace(rest[1:])) {
			return
		}
	}
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

// rewriteChunk normalises one chat.completion.chunk: it removes usage,
// timings and metrics (capturing them into st) and mirrors the reasoning
// fields of each choice's delta. forward is false for a chunk that only
// carried usage or statistics. Fields the adapter does not touch are kept;
// only the levels it edits are decoded.
func rewriteChunk(p []byte, st *stats) (out []byte, forward bool, err error) {
	if !bytes.Contains(p, []byte(keyUsage)) && !bytes.Contains(p, []byte(keyTimings)) && !bytes.Contains(p, []byte(keyMetrics)) {
		if out, ok := mirrorInPlace(p); ok {
			return out, true, nil
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p, &m); err != nil {
		return nil, false, fmt.Errorf("decode chunk: %w", err)
	}
	changed, captured := takeStats(m, st, true)
	choices := m["choices"]
	if captured && noChoices(choices) {
		return nil, false, nil
	}
	if bytes.Contains(choices, []byte(keyReasoning)) {
		if c, ok := mirrorChoices(choices, "delta"); ok {
			m["choices"], changed = c, true
		}
	}
	if !changed {
		return p, true, nil
	}
	return encodeObject(m), true, nil
}

// takeStats moves timings and metrics out of a response object into st,
// and usage too when dropUsage is set; otherwise usage is captured but
// stays in the body. It reports whether m changed and whether anything
// non-null was captured.
func takeStats(m map[string]json.RawMessage, st *stats, dropUsage bool) (changed, captured bool) {
	if raw, ok := m["usage"]; ok {
		if !isNull(raw) {
			st.captureUsage(raw)
			captured = true
		}
		if dropUsage {
			delete(m, "usage")
			changed = true
		}
	}
	if raw, ok := m["timings"]; ok {
		st.captureTimings(raw)
		captured = captured || !isNull(raw)
		delete(m, "timings")
		changed = true
	}
	// vLLM's metrics object only holds engine statistics; an object of
	// that name is removed, anything else is not the adapter's business.
	if raw, ok := m["metrics"]; ok && (isNull(raw) || bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{"))) {
		st.captureMetrics(raw)
		captured = captured || !isNull(raw)
		delete(m, "metrics")
		changed = true
	}
	return changed, captured
}

// noChoices reports whether a choices value is absent, null or [].
func noChoices(raw json.RawMessage) bool {
	if isNull(raw) {
		return true
	}
	raw = bytes.TrimSpace(raw)
	if raw[0] != '[' {
		return false
	}
	rest := skipSpace(raw[1:])
	return len(rest) > 0 && rest[0] == ']'
}

// mirrorChoices makes reasoning and reasoning_content both present in the
// given member ("delta" or "message") of each choice. ok is false when
// nothing changed.
func mirrorChoices(raw json.RawMessage, member string) (json.RawMessage, bool) {
	var choices []map[string]json.RawMessage
	if json.Unmarshal(raw, &choices) != nil {
		return raw, false
	}
	changed := false
	for _, c := range choices {
		inner, ok := c[member]
		if !ok || isNull(inner) {
			continue
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(inner, &m) != nil || !mirrorReasoning(m) {
			continue
		}
		c[member], changed = encodeObject(m), true
	}
	if !changed {
		return raw, false
	}
	return encodeObjects(choices), true
}

// mirrorInPlace mirrors reasoning without decoding the chunk, for the
// chunks that make up most of a reasoning model's stream: when the chunk
// uses only one of the two names and every value is a string or null, the
// other name is inserted right after each with the same value. ok is false
// when the chunk needs the general path.
func mirrorInPlace(p []byte) (out []byte, ok bool) {
	from, to := `"reasoning"`, `"reasoning_content"`
	hasFrom, hasTo := hasKey(p, from), hasKey(p, to)
	if hasFrom == hasTo {
		return nil, false
	}
	if hasTo {
		from, to = to, from
	}
	ok = true
	last := 0
	eachValue(p, from, func(v []byte) bool {
		start := len(p) - len(v)
		end := scalarEnd(p, start)
		if end < 0 {
			ok = false
			return false
		}
		out = append(out, p[last:end]...)
		out = append(out, ',')
		out = append(out, to...)
		out = append(out, ':')
		out = append(out, p[start:end]...)
		last = end
		return true
	})
	if !ok {
		return nil, false
	}
	return append(out, p[last:]...), true
}

func hasKey(p []byte, quotedKey string) bool {
	found := false
	eachValue(p, quotedKey, func([]byte) bool {
		found = true
		return false
	})
	return found
}

// scalarEnd is the end of the string or null starting at p[start], or -1
// for anything else.
func scalarEnd(p []byte, start int) int {
	if bytes.HasPrefix(p[start:], []byte("null")) {
		return start + len("null")
	}
	if n := stringEnd(p[start:]); n >= 0 {
		return start + n
	}
	return -1
}

// mirrorReasoning copies reasoning to reasoning_content or the other way
// round: engines use either name (vLLM and Ollama reasoning, llama.cpp and
// SGLang reasoning_content) and clients read either. When both are present
// but one is null, the text wins.
func mirrorReasoning(m map[string]json.RawMessage) bool {
	r, hasR := m["reasoning"]
	rc, hasRC := m["reasoning_content"]
	switch {
	case hasR && !hasRC:
		m["reasoning_content"] = r
	case hasRC && !hasR:
		m["reasoning"] = rc
	case hasR && hasRC && isNull(r) && !isNull(rc):
		m["reasoning"] = rc
	case hasR && hasRC && isNull(rc) && !isNull(r):
		m["reasoning_content"] = r
	default:
		return false
	}
	return true
}
