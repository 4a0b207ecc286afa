package responses

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/svc-dev/svc/internal/jsonraw"
	"github.com/svc-dev/svc/internal/jsontext"
)

// object is an object of a request, read as a view of its body: what the
// request keeps of it is copied (see checker.object).
type object = jsonraw.Fields

// appendString appends s as a JSON string. HTML characters stay as they
// are (the text is for programs, not browsers); invalid UTF-8 becomes
// U+FFFD, as encoding/json writes it.
func appendString(b []byte, s string) []byte { return jsontext.AppendStringNoHTML(b, s) }

// marshal encodes v compactly without HTML escaping. v is always built of
// types that encode, and RawMessages that were decoded, so it cannot fail.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("responses: encoding a built value: " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// compact returns raw without insignificant white space, so echoed values
// read the same however the client spaced them.
func compact(raw []byte) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return json.RawMessage(raw)
	}
	return buf.Bytes()
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// member is one key of an object whose order matters.
type member struct {
	key   string
	value json.RawMessage
}

// mergeObject adds the members of the JSON object raw to ms: a key already
// there takes the new value in its old place, others are appended. The
// gateway sends its svc annotation in more than one chunk; their union, in
// the order sent, is the one annotation of the response. A value that is
// not an object is ignored.
func mergeObject(ms []member, raw []byte) []member {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ms
	}
	var add []member
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return ms
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return ms
		}
		add = append(add, member{key, compact(v)})
	}
next:
	for _, m := range add {
		for i := range ms {
			if ms[i].key == m.key {
				ms[i].value = m.value
				continue next
			}
		}
		ms = append(ms, m)
	}
	return ms
}

// appendMembers writes ms as a JSON object.
func appendMembers(b []byte, ms []member) []byte {
	b = append(b, '{')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, m.key)
		b = append(b, ':')
		b = append(b, m.value...)
	}
	return append(b, '}')
}
