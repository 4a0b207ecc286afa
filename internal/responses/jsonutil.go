package responses

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/jsonraw"
)

// jsonraw.Kind is the type of a raw JSON value, read from its first byte; the
// values it is used on were decoded by encoding/json and so are valid.
// object is a decoded JSON object, its keys matched exactly.
type object = jsonraw.Members

// appendString appends s as a JSON string. HTML characters stay as they
// are (the text is for programs, not browsers); invalid UTF-8 becomes
// U+FFFD, as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(s) != nil { // cannot happen for a string
		return append(b, `""`...)
	}
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

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

// parseInt reads a JSON number literal as an exact integer: 5, 5.0 and 5e0
// are 5, 5.5 is not an integer, and nothing outside int64 is accepted. It
// works on the digits, never through float64, so that a large value keeps
// every digit and a huge exponent costs nothing; this is the rule the chat
// side applies to the integer it will be sent.
func parseInt(lit string) (n int64, whole, fits bool) {
	neg := strings.HasPrefix(lit, "-")
	lit = strings.TrimPrefix(lit, "-")
	mant, expStr, _ := strings.Cut(strings.ToLower(lit), "e")
	intPart, fracPart, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+fracPart, "0")
	if digits == "" {
		return 0, true, true
	}
	exp := 0
	if expStr != "" {
		expNeg := strings.HasPrefix(expStr, "-")
		expStr = strings.TrimLeft(strings.TrimLeft(expStr, "+-"), "0")
		if len(expStr) > 9 {
			return 0, !expNeg, false
		}
		if expStr != "" {
			e, err := strconv.Atoi(expStr)
			if err != nil {
				return 0, false, false
			}
			exp = e
			if expNeg {
				exp = -e
			}
		}
	}
	exp -= len(fracPart)
	for strings.HasSuffix(digits, "0") {
		digits = digits[:len(digits)-1]
		exp++
	}
	if exp < 0 {
		return 0, false, false
	}
	if len(digits)+exp > 19 {
		return 0, true, false
	}
	u, err := strconv.ParseUint(digits+strings.Repeat("0", exp), 10, 64)
	switch {
	case err != nil:
		return 0, true, false
	case neg && u <= math.MaxInt64+1:
		return int64(-u), true, true // -u wraps to the right value for MinInt64
	case !neg && u <= math.MaxInt64:
		return int64(u), true, true
	}
	return 0, true, false
}

// parseFloat reads a JSON number literal; values beyond float64 become
// ±Inf, which every range check rejects.
func parseFloat(lit string) float64 {
	f, _ := strconv.ParseFloat(lit, 64)
	return f
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
