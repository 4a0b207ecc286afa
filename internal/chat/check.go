package chat

import (
	"encoding/json"
	"math"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonraw"
)

// Generic checks. Each reports its own failure and returns ok only for a
// usable value; "opt" helpers treat absent and null alike, "required"
// helpers report both as missing.

// The checks below take a value's path as its parent's and its key (""
// for the parent itself), and spell it out only to report a failure: a
// valid body builds no paths.

func (c *checker) str(path *api.Path, key string, raw json.RawMessage) (string, bool) {
	if jsonraw.KindOf(raw) != jsonraw.String {
		c.v.AddAt(path.Key(key), api.FieldWrongType, "must be a string")
		return "", false
	}
	return decodeString(raw)
}

func (c *checker) boolean(path *api.Path, key string, raw json.RawMessage) (bool, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Bool {
		c.v.AddAt(path.Key(key), api.FieldWrongType, "must be true or false")
		return false, false
	}
	return raw[0] == 't', true
}

func (c *checker) object(path *api.Path, key string, raw json.RawMessage) (*object, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Object {
		c.v.AddAt(path.Key(key), api.FieldWrongType, "must be an object")
		return nil, false
	}
	o, err := parseObject(raw)
	return o, err == nil
}

func (c *checker) array(path *api.Path, key string, raw json.RawMessage) ([]json.RawMessage, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Array {
		c.v.AddAt(path.Key(key), api.FieldWrongType, "must be an array")
		return nil, false
	}
	elems, err := parseArray(raw)
	return elems, err == nil
}

// integer accepts any JSON number without a fractional part that fits int64.
func (c *checker) integer(path *api.Path, key string, raw json.RawMessage) (int64, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Number {
		c.v.AddAt(path.Key(key), api.FieldWrongType, "must be an integer")
		return 0, false
	}
	n, res := jsonraw.Int(string(raw))
	switch res {
	case jsonraw.IntFraction:
		c.v.AddAt(path.Key(key), api.FieldWrongType, "must be a whole number")
		return 0, false
	case jsonraw.IntOverflow:
		c.v.AddAt(path.Key(key), api.FieldOutOfRange, "is too large")
		return 0, false
	}
	return n, true
}

func (c *checker) number(path *api.Path, key string, raw json.RawMessage) (float64, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Number {
		c.v.AddAt(path.Key(key), api.FieldWrongType, "must be a number")
		return 0, false
	}
	return jsonraw.Float(string(raw)), true
}

// enum returns the allowed value s is, which unlike s holds nothing of
// the body.
func (c *checker) enum(path *api.Path, key, s string, allowed ...string) (string, bool) {
	for _, a := range allowed {
		if s == a {
			return a, true
		}
	}
	if len(allowed) == 1 {
		c.v.AddAt(path.Key(key), api.FieldEnum, "must be %s", allowed[0])
	} else {
		c.v.AddAt(path.Key(key), api.FieldEnum, "one of %s", strings.Join(allowed, ", "))
	}
	return "", false
}

// field is o's member key, null read as absent, as the engine will read
// it: an engine written in Go takes a member under any case, so a body
// that names key in another case, beside it or instead of it, would be
// obeyed in a way this check did not see, and is refused.
func (c *checker) field(o *object, path *api.Path, key string) (json.RawMessage, bool) {
	raw, ok := o.field(key)
	if o.folds && c.ambiguous == nil {
		if !o.twinsChecked {
			if err := o.caseTwins(); err != nil {
				// Named by its place in the body, as a field error is.
				err.Param = path.Key(err.Param).String()
				c.ambiguous = err
			}
		}
		if twin := o.caseTwin(key); twin != "" && c.ambiguous == nil {
			c.ambiguous = jsonraw.AmbiguousField(path.Key(key).String(), twin)
		}
	}
	return raw, ok
}

func (c *checker) optString(o *object, path *api.Path, key string) (string, bool) {
	raw, ok := c.field(o, path, key)
	if !ok {
		return "", false
	}
	return c.str(path, key, raw)
}

func (c *checker) optBool(o *object, path *api.Path, key string) (bool, bool) {
	raw, ok := c.field(o, path, key)
	if !ok {
		return false, false
	}
	return c.boolean(path, key, raw)
}

func (c *checker) optObject(o *object, path *api.Path, key string) (*object, bool) {
	raw, ok := c.field(o, path, key)
	if !ok {
		return nil, false
	}
	return c.object(path, key, raw)
}

func (c *checker) optArray(o *object, path *api.Path, key string) ([]json.RawMessage, bool) {
	raw, ok := c.field(o, path, key)
	if !ok {
		return nil, false
	}
	return c.array(path, key, raw)
}

func (c *checker) optEnum(o *object, path *api.Path, key string, allowed ...string) (string, bool) {
	s, ok := c.optString(o, path, key)
	if !ok {
		return "", false
	}
	return c.enum(path, key, s, allowed...)
}

func (c *checker) missing(o *object, path *api.Path, key string) (json.RawMessage, bool) {
	raw, ok := c.field(o, path, key)
	if !ok {
		c.v.AddAt(path.Key(key), api.FieldMissing, "required")
	}
	return raw, ok
}

func (c *checker) requiredString(o *object, path *api.Path, key string) (string, bool) {
	raw, ok := c.missing(o, path, key)
	if !ok {
		return "", false
	}
	return c.str(path, key, raw)
}

func (c *checker) requiredObject(o *object, path *api.Path, key string) (*object, bool) {
	raw, ok := c.missing(o, path, key)
	if !ok {
		return nil, false
	}
	return c.object(path, key, raw)
}

func (c *checker) requiredEnum(o *object, path *api.Path, key string, allowed ...string) (string, bool) {
	s, ok := c.requiredString(o, path, key)
	if !ok {
		return "", false
	}
	return c.enum(path, key, s, allowed...)
}

// clampInt converts n for int fields on platforms where int is 32 bits.
func clampInt(n int64) int {
	switch {
	case n > math.MaxInt:
		return math.MaxInt
	case n < math.MinInt:
		return math.MinInt
	}
	return int(n)
}
