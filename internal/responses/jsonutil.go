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
