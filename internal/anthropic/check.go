package anthropic

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonraw"
)

// Generic checks, worded as internal/chat words them. Each reports its own
// failure and returns ok only for a usable value; "opt" helpers treat absent
// and null alike, "required" helpers report both as missing.

func (t *translator) str(path string, raw json.RawMessage) (string, bool) {
	s, ok := jsonraw.DecodeString(raw)
	if !ok {
		t.v.Add(path, api.FieldWrongType, "must be a string")
	}
	return s, ok
}

func (t *translator) boolean(path string, raw json.RawMessage) (bool, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Bool {
		t.v.Add(path, api.FieldWrongType, "must be true or false")
		return false, false
	}
	return raw[0] == 't', true
}

func (t *translator) object(path string, raw json.RawMessage) (object, bool) {
	o, ok := jsonraw.CheckedObjectView(raw)
	if !ok {
		t.v.Add(path, api.FieldWrongType, "must be an object")
	}
	return o, ok
}

func (t *translator) array(path string, raw json.RawMessage) ([]json.RawMessage, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Array {
		t.v.Add(path, api.FieldWrongType, "must be an array")
		return nil, false
	}
	elems, ok := jsonraw.CheckedArrayView(raw)
	if !ok {
		t.v.Add(path, api.FieldWrongType, "must be an array")
	}
	return elems, ok
}

// integer accepts any number without a fractional part that fits int64.
func (t *translator) integer(path string, raw json.RawMessage) (int64, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Number {
		t.v.Add(path, api.FieldWrongType, "must be an integer")
		return 0, false
	}
	n, res := jsonraw.Int(string(raw))
	switch res {
	case jsonraw.IntFraction:
		t.v.Add(path, api.FieldWrongType, "must be a whole number")
		return 0, false
	case jsonraw.IntOverflow:
		t.v.Add(path, api.FieldOutOfRange, "is too large")
		return 0, false
	}
	return n, true
}

func (t *translator) enum(path, s string, allowed ...string) bool {
	if contains(allowed, s) {
		return true
	}
	if len(allowed) == 1 {
		t.v.Add(path, api.FieldEnum, "must be %s", allowed[0])
	} else {
		t.v.Add(path, api.FieldEnum, "one of %s", strings.Join(allowed, ", "))
	}
	return false
}

func (t *translator) missing(o object, path, key string) (json.RawMessage, bool) {
	raw, ok := o.Field(key)
	if !ok {
		t.v.Add(join(path, key), api.FieldMissing, "required")
	}
	return raw, ok
}

func (t *translator) optString(o object, path, key string) (string, bool) {
	raw, ok := o.Field(key)
	if !ok {
		return "", false
	}
	return t.strAt(path, key, raw)
}

func (t *translator) optBool(o object, path, key string) (bool, bool) {
	raw, ok := o.Field(key)
	if !ok {
		return false, false
	}
	return t.booleanAt(path, key, raw)
}

func (t *translator) optObject(o object, path, key string) (object, bool) {
	raw, ok := o.Field(key)
	if !ok {
		return nil, false
	}
	return t.objectAt(path, key, raw)
}

func (t *translator) optArray(o object, path, key string) ([]json.RawMessage, bool) {
	raw, ok := o.Field(key)
	if !ok {
		return nil, false
	}
	return t.arrayAt(path, key, raw)
}

func (t *translator) optEnum(o object, path, key string, allowed ...string) (string, bool) {
	s, ok := t.optString(o, path, key)
	if !ok {
		return "", false
	}
	return t.enumAt(path, key, s, allowed...)
}

func (t *translator) requiredString(o object, path, key string) (string, bool) {
	raw, ok := t.missing(o, path, key)
	if !ok {
		return "", false
	}
	return t.strAt(path, key, raw)
}

func (t *translator) requiredObject(o object, path, key string) (object, bool) {
	raw, ok := t.missing(o, path, key)
	if !ok {
		return nil, false
	}
	return t.objectAt(path, key, raw)
}

func (t *translator) requiredEnum(o object, path, key string, allowed ...string) (string, bool) {
	s, ok := t.requiredString(o, path, key)
	if !ok {
		return "", false
	}
	return t.enumAt(path, key, s, allowed...)
}

// The keyed checks below are str, boolean, object, array and enum for the
// member key of path, which they join only to report a failure: a valid
// body, member after member, builds no paths.

func (t *translator) strAt(path, key string, raw json.RawMessage) (string, bool) {
	if s, ok := jsonraw.DecodeString(raw); ok {
		return s, true
	}
	return t.str(join(path, key), raw)
}

func (t *translator) booleanAt(path, key string, raw json.RawMessage) (bool, bool) {
	if jsonraw.KindOf(raw) == jsonraw.Bool {
		return raw[0] == 't', true
	}
	return t.boolean(join(path, key), raw)
}

func (t *translator) arrayAt(path, key string, raw json.RawMessage) ([]json.RawMessage, bool) {
	if a, ok := jsonraw.CheckedArrayView(raw); ok {
		return a, true
	}
	return t.array(join(path, key), raw)
}

func (t *translator) objectAt(path, key string, raw json.RawMessage) (object, bool) {
	if o, ok := jsonraw.CheckedObjectView(raw); ok {
		return o, true
	}
	return t.object(join(path, key), raw)
}

func (t *translator) enumAt(path, key, s string, allowed ...string) (string, bool) {
	if contains(allowed, s) || t.enum(join(path, key), s, allowed...) {
		return s, true
	}
	return "", false
}

func base64DecodedLen(s string) int {
	return base64.RawStdEncoding.DecodedLen(len(strings.TrimRight(s, "=")))
}

func base64Decode(s string) (string, bool) {
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	return string(b), err == nil
}

func base64Encode(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
