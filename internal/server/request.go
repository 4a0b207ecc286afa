package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/money"
)

// decodeJSON reads the body into v: malformed JSON is a 400, a well-formed
// body with wrong types or unknown fields a 422 naming the field.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return api.BadRequest("Request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			return api.BadRequest("Malformed JSON: unexpected data after the top-level value")
		}
		return nil
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return api.BadRequest("Malformed JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return api.BadRequest("Malformed JSON: the body ends before the value does")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "expected " + describe(typ.Type)})
		}
		return api.Invalid(api.FieldError{Field: typ.Field, Type: api.FieldWrongType, Message: "expected " + describe(typ.Type)})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return api.Invalid(api.FieldError{Field: name, Type: api.FieldUnknown, Message: "unknown field"})
	default:
		return api.BadRequest("Malformed JSON: %v", err)
	}
}

// decodeLenient reads a body whose unknown fields are forwarded: only
// syntax and the types of the fields read here are checked.
func decodeLenient(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax), len(bytes.TrimSpace(body)) == 0:
			return decodeJSON(body, v) // the strict decoder words the 400
		case errors.As(err, &typ):
			field := typ.Field
			if field == "" {
				field = "body"
			}
			return api.Invalid(api.FieldError{Field: field, Type: api.FieldWrongType, Message: "expected " + describe(typ.Type)})
		default:
			return api.BadRequest("Malformed JSON: %v", err)
		}
	}
	return nil
}

// describe names a Go type the way a JSON author thinks of it.
func describe(t reflect.Type) string {
	if t == reflect.TypeFor[money.GBP]() {
		return "an amount with at most two decimal places"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a different type"
}

// query reads and validates query parameters, collecting failures as a 422.
type query struct {
	c *call
	v api.Validator
}

// intRange reads an optional integer parameter within [lo, hi].
func (q *query) intRange(name string, def, lo, hi int) int {
	raw := q.c.ctx.QueryArgs().Peek(name)
	if raw == nil {
		return def
	}
	n, err := strconv.Atoi(string(raw))
	switch {
	case err != nil:
		q.v.Add(name, api.FieldWrongType, "expected an integer")
	case n < lo || n > hi:
		q.v.Add(name, api.FieldOutOfRange, "must be between %d and %d", lo, hi)
	default:
		return n
	}
	return def
}

// oneOf reads an optional parameter that must be one of allowed.
func (q *query) oneOf(name, def string, allowed ...string) string {
	raw := q.c.ctx.QueryArgs().Peek(name)
	if raw == nil {
		return def
	}
	for _, a := range allowed {
		if string(raw) == a {
			return a
		}
	}
	q.v.Add(name, api.FieldEnum, "one of %s", strings.Join(allowed, ", "))
	return def
}

// powerQuery checks the power endpoint's range.
func powerQuery(q *query) { q.oneOf("range", "1h", "1h", "24h", "7d", "30d") }

// validated checks the query with check before calling next.
func validated(check func(*query), next func(*call) error) func(*call) error {
	return func(c *call) error {
		q := query{c: c}
		check(&q)
		if err := q.v.Err(); err != nil {
			return err
		}
		return next(c)
	}
}
