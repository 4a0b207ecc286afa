// Package jsonbody decodes JSON request bodies into the errors the API
// answers bad ones with: malformed JSON is a 400, a well-formed body with
// a wrong type or an unknown field a 422 naming the field.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonraw"
	"github.com/svc-dev/svc/internal/jsontext"
	"github.com/svc-dev/svc/internal/money"
)

// Strict reads body into v, refusing unknown fields and trailing data.
func Strict(body []byte, v any) error {
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

// Lenient reads a body whose unknown fields are forwarded: only syntax and
// the types of the fields read here are checked.
func Lenient(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax), len(bytes.TrimSpace(body)) == 0:
			return Strict(body, v) // the strict decoder words the 400
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

// Members reads a body whose unknown fields are forwarded into its
// top-level members, as Lenient into a map would: nil for null. A body
// that is a JSON object is read once by jsontext's scanner, its members
// found without reading their text again, where json.Unmarshal reads it
// twice with a function call for each byte; anything else is left to
// Lenient, which words the error.
//
// Members are matched exactly. An engine written in Go would not match
// them so, and would obey a spelling the gateway did not check: a body
// with two members that differ only in case, or with one of reads (the
// members the caller checks) in another case, is refused
// (jsonraw.CaseTwins).
func Members(body []byte, reads ...string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if jsonraw.KindOf(body) == jsonraw.Object && jsontext.Valid(body) {
		m, _ = jsonraw.CheckedObject(body)
	} else if err := Lenient(body, &m); err != nil {
		return nil, err
	}
	folds := false
	for k := range m {
		if folds = jsonraw.MayFold(k); folds {
			break
		}
	}
	if !folds {
		return m, nil
	}
	names := make([]string, 0, len(m)+len(reads))
	for k := range m {
		names = append(names, k)
	}
	// In order, so that the pair named is the same each time; the names
	// read are lower case, and named first when one is of a pair.
	slices.Sort(names)
	names = append(names, reads...)
	if err := jsonraw.CaseTwins(len(names), func(i int) string { return names[i] }); err != nil {
		return nil, err
	}
	return m, nil
}

// Present reports whether a field was sent with a value other than null.
func Present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// describe names a Go type the way a JSON author thinks of it.
func describe(t reflect.Type) string {
	if t == reflect.TypeFor[money.GBP]() {
		// Exponents are refused (the amount is read exactly, never as a
		// float), and so are amounts past what pence in an int64 hold.
		return "an amount of pounds with at most two decimal places, without an exponent, below 92233720368547758.08"
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

// Whole checks the member key of members as a whole number from lo to hi,
// however JSON writes one (2, 2.0, 2e0), and writes it back as an integer,
// which the engines' adapters and servers read: rewritten says it was
// sent otherwise, and the body must then be written from members. Anything
// else is added to v: a value that is not a number or has a fraction is of
// the wrong type, one outside the range out of range; both say what is
// wanted. ok is false then.
func Whole(v *api.Validator, members map[string]json.RawMessage, key string, lo, hi int64, want string) (n int64, ok, rewritten bool) {
	raw := members[key]
	if jsonraw.KindOf(raw) != jsonraw.Number {
		v.Add(key, api.FieldWrongType, "must be %s", want)
		return 0, false, false
	}
	n, res := jsonraw.Int(string(raw))
	switch {
	case res == jsonraw.IntFraction:
		v.Add(key, api.FieldWrongType, "must be %s", want)
		return 0, false, false
	case res == jsonraw.IntOverflow || n < lo || n > hi:
		v.Add(key, api.FieldOutOfRange, "must be %s", want)
		return 0, false, false
	}
	if canon := strconv.AppendInt(nil, n, 10); string(raw) != string(canon) {
		members[key] = canon
		return n, true, true
	}
	return n, true, false
}
