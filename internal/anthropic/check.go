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

func (t *translator) str(p *api.Path, raw json.RawMessage) (string, bool) {
	s, ok := jsonraw.DecodeString(raw)
	if !ok {
		t.v.AddAt(p, api.FieldWrongType, "must be a string")
	}
	return s, ok
}

func (t *translator) boolean(p *api.Path, raw json.RawMessage) (bool, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Bool {
		t.v.AddAt(p, api.FieldWrongType, "must be true or false")
		return false, false
	}
	return raw[0] == 't', true
}

func (t *translator) object(p *api.Path, raw json.RawMessage) (object, bool) {
	o, ok := t.members.Read(raw)
	if !ok {
		t.v.AddAt(p, api.FieldWrongType, "must be an object")
	}
	return o, ok
}

func (t *translator) array(p *api.Path, raw json.RawMessage) ([]json.RawMessage, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Array {
		t.v.AddAt(p, api.FieldWrongType, "must be an array")
		return nil, false
	}
	elems, ok := jsonraw.CheckedArrayView(raw)
	if !ok {
		t.v.AddAt(p, api.FieldWrongType, "must be an array")
	}
	return elems, ok
}

// integer accepts any number without a fractional part that fits int64.
func (t *translator) integer(p *api.Path, raw json.RawMessage) (int64, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Number {
		t.v.AddAt(p, api.FieldWrongType, "must be an integer")
		return 0, false
	}
	n, res := jsonraw.Int(string(raw))
	switch res {
	case jsonraw.IntFraction:
		t.v.AddAt(p, api.FieldWrongType, "must be a whole number")
		return 0, false
	case jsonraw.IntOverflow:
		t.v.AddAt(p, api.FieldOutOfRange, "is too large")
		return 0, false
	}
	return n, true
}

func (t *translator) enum(p *api.Path, s string, allowed ...string) bool {
	if contains(allowed, s) {
		return true
	}
	if len(allowed) == 1 {
		t.v.AddAt(p, api.FieldEnum, "must be %s", allowed[0])
	} else {
		t.v.AddAt(p, api.FieldEnum, "one of %s", strings.Join(allowed, ", "))
	}
	return false
}

func (t *translator) missing(o object, p *api.Path, key string) (json.RawMessage, bool) {
	raw, ok := o.Field(key)
	if !ok {
		t.v.AddAt(p.Key(key), api.FieldMissing, "required")
	}
	return raw, ok
}

func (t *translator) optString(o object, p *api.Path, key string) (string, bool) {
	raw, ok := o.Field(key)
	if !ok {
		return "", false
	}
	return t.strAt(p, key, raw)
}

func (t *translator) optBool(o object, p *api.Path, key string) (bool, bool) {
	raw, ok := o.Field(key)
	if !ok {
		return false, false
	}
	return t.booleanAt(p, key, raw)
}

func (t *translator) optObject(o object, p *api.Path, key string) (object, bool) {
	raw, ok := o.Field(key)
	if !ok {
		return nil, false
	}
	return t.objectAt(p, key, raw)
}

func (t *translator) optArray(o object, p *api.Path, key string) ([]json.RawMessage, bool) {
	raw, ok := o.Field(key)
	if !ok {
		return nil, false
	}
	return t.arrayAt(p, key, raw)
}

func (t *translator) optEnum(o object, p *api.Path, key string, allowed ...string) (string, bool) {
	s, ok := t.optString(o, p, key)
	if !ok {
		return "", false
	}
	return t.enumAt(p, key, s, allowed...)
}

func (t *translator) requiredString(o object, p *api.Path, key string) (string, bool) {
	raw, ok := t.missing(o, p, key)
	if !ok {
		return "", false
	}
	return t.strAt(p, key, raw)
}

func (t *translator) requiredObject(o object, p *api.Path, key string) (object, bool) {
	raw, ok := t.missing(o, p, key)
	if !ok {
		return nil, false
	}
	return t.objectAt(p, key, raw)
}

func (t *translator) requiredEnum(o object, p *api.Path, key string, allowed ...string) (string, bool) {
	s, ok := t.requiredString(o, p, key)
	if !ok {
		return "", false
	}
	return t.enumAt(p, key, s, allowed...)
}

// The keyed checks below are str, boolean, object, array and enum for the
// member key of p, whose path they make only to report a failure.

func (t *translator) strAt(p *api.Path, key string, raw json.RawMessage) (string, bool) {
	if s, ok := jsonraw.DecodeString(raw); ok {
		return s, true
	}
	return t.str(p.Key(key), raw)
}

func (t *translator) booleanAt(p *api.Path, key string, raw json.RawMessage) (bool, bool) {
	if jsonraw.KindOf(raw) == jsonraw.Bool {
		return raw[0] == 't', true
	}
	return t.boolean(p.Key(key), raw)
}

func (t *translator) arrayAt(p *api.Path, key string, raw json.RawMessage) ([]json.RawMessage, bool) {
	if a, ok := jsonraw.CheckedArrayView(raw); ok {
		return a, true
	}
	return t.array(p.Key(key), raw)
}

func (t *translator) objectAt(p *api.Path, key string, raw json.RawMessage) (object, bool) {
	if o, ok := t.members.Read(raw); ok {
		return o, true
	}
	return t.object(p.Key(key), raw)
}

func (t *translator) enumAt(p *api.Path, key, s string, allowed ...string) (string, bool) {
	if contains(allowed, s) {
		return s, true
	}
	t.enum(p.Key(key), s, allowed...)
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
