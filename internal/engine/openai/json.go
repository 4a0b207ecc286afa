package openai

import (
	"encoding/json"
	"maps"
	"slices"
	"unicode/utf8"
)

// The adapter edits engine JSON by decoding only the levels it touches into
// map[string]json.RawMessage and writing them back. encoding/json would
// re-validate and re-compact every raw value on the way out, which is most
// of the cost of a rewritten chunk; the values came out of the decoder, so
// they are valid JSON already and are written as they are.

// encodeObject writes m as a JSON object, keys sorted.
func encodeObject(m map[string]json.RawMessage) []byte {
	return appendObject(nil, m)
}

// encodeObjects writes a JSON array of objects.
func encodeObjects(objs []map[string]json.RawMessage) []byte {
	b := []byte{'['}
	for i, m := range objs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendObject(b, m)
	}
	return append(b, ']')
}

func appendObject(b []byte, m map[string]json.RawMessage) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendKey(b, k)
		b = append(b, ':')
		if v := m[k]; len(v) > 0 {
			b = append(b, v...)
		} else {
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
}

// appendKey writes a quoted object key. Keys are nearly always plain
// ASCII; anything else goes through encoding/json.
func appendKey(b []byte, k string) []byte {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			q, _ := json.Marshal(k) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, k...)
	return append(b, '"')
}
