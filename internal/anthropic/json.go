package anthropic

import (
	"bytes"
	"encoding/json"

	"github.com/svc-dev/svc/internal/jsonraw"
)

// object is an object of a request, read as a view of its body: the
// translation is done with it before the body is reused.
type object = jsonraw.Fields

// member is one key of an object, in the order it was sent.
type member struct {
	key   string
	value json.RawMessage
}

// members reads an object's members in order, which a map would lose; the
// svc object is merged this way so that its members keep the gateway's
// order.
func members(raw []byte) ([]member, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Object {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, ok := tok.(string)
		if !ok {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, member{key: key, value: v})
	}
	return out, true
}

// marshal is json.Marshal without HTML escaping: the text is for SDKs and
// engines, not browsers, and code is full of <, > and &.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
