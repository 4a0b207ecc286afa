package anthropic

import (
	"bytes"
	"encoding/json"

	"github.com/svc-dev/svc/internal/jsonraw"
)

// object is an object of a request, read as a view of its body: the
// translation is done with it before the body is reused.
type object = jsonraw.Fields

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
