// Package jsonraw reads JSON values kept raw: a request translated into
// another keeps the members it does not own byte for byte, so it is read a
// value at a time rather than decoded into structs, and a value's kind is
// known before it is decoded, so that a wrong type is reported by its path
// instead of failing the whole body.
package jsonraw

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsontext"
)

// Kind is the JSON type of a raw value.
type Kind int

// The kinds of JSON values; Invalid is none of them.
const (
	Invalid Kind = iota
	Null
	Bool
	Number
	String
	Array
	Object
)

// KindOf is raw's kind, from its first byte; raw is trusted to be valid
// JSON past it.
func KindOf(raw []byte) Kind {
	// A loop rather than bytes.TrimLeft, which builds its set of the
	// cutset's bytes on every call: a body's check asks the kind of each
	// value it reads, and the set was a twentieth of parsing a chat body.
	i := 0
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\r' || raw[i] == '\n') {
		i++
	}
	if i == len(raw) {
		return Invalid
	}
	switch raw[i] {
	case 'n':
		return Null
	case 't', 'f':
		return Bool
	case '"':
		return String
	case '[':
		return Array
	case '{':
		return Object
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return Number
	}
	return Invalid
}

// Members is a decoded JSON object. A map keeps key matching exact, which
// decoding into structs would not (encoding/json folds case), so "Model"
// is not mistaken for "model"; a repeated key keeps its last value, as
// encoding/json reads it.
type Members map[string]json.RawMessage

// Field is the value of key, null read as not sent: every optional member
// of a request reads null that way.
func (m Members) Field(key string) (json.RawMessage, bool) {
	v, ok := m[key]
	if !ok || KindOf(v) == Null {
		return nil, false
	}
	return v, true
}

// DecodeObject decodes raw when it is an object, as json.Unmarshal into
// Members would: each value a copy of its text. It reads raw once, where
// json.Unmarshal reads it twice with a state machine's function call for
// each byte, and a conversation is decoded at each level that holds it.
func DecodeObject(raw []byte) (Members, bool) { return decodeObject(raw, false, true) }

// CheckedObject is DecodeObject for a value of a body that has been
// checked whole (jsontext.Valid): its members' values are found by their
// brackets and quotes and not checked again, as they would be at each
// level of the body that holds them.
func CheckedObject(raw []byte) (Members, bool) { return decodeObject(raw, true, true) }

// CheckedObjectView is CheckedObject with each value a part of raw, not a
// copy, for a reader done with them before raw is reused or changed: a
// translation that writes what it read into a body of its own. It spares
// a copy of every member at every level of a conversation.
func CheckedObjectView(raw []byte) (Members, bool) { return decodeObject(raw, true, false) }

func decodeObject(raw []byte, checked, clone bool) (Members, bool) {
	if KindOf(raw) != Object {
		return nil, false
	}
	var s jsontext.Scanner
	s.Reset(raw)
	s.Peek()
	s.Open()
	m := Members{}
	for n := 0; s.Next(n, '}'); n++ {
		name := s.Name()
		v := value(&s, checked)
		if s.Bad() {
			return nil, false
		}
		if clone {
			v = bytes.Clone(v)
		}
		m[string(name)] = v
	}
	if s.End(); s.Bad() {
		return nil, false
	}
	return m, true
}

// DecodeArray decodes raw when it is an array, as json.Unmarshal into a
// slice of json.RawMessage would, in one pass (see DecodeObject).
func DecodeArray(raw []byte) ([]json.RawMessage, bool) { return decodeArray(raw, false, true) }

// CheckedArray is DecodeArray for a value of a checked body (see
// CheckedObject).
func CheckedArray(raw []byte) ([]json.RawMessage, bool) { return decodeArray(raw, true, true) }

// CheckedArrayView is CheckedArray with each element a part of raw (see
// CheckedObjectView).
func CheckedArrayView(raw []byte) ([]json.RawMessage, bool) { return decodeArray(raw, true, false) }

func decodeArray(raw []byte, checked, clone bool) ([]json.RawMessage, bool) {
	if KindOf(raw) != Array {
		return nil, false
	}
	var s jsontext.Scanner
	s.Reset(raw)
	s.Peek()
	s.Open()
	a := []json.RawMessage{}
	for n := 0; s.Next(n, ']'); n++ {
		v := value(&s, checked)
		if s.Bad() {
			return nil, false
		}
		if clone {
			v = bytes.Clone(v)
		}
		a = append(a, v)
	}
	if s.End(); s.Bad() {
		return nil, false
	}
	return a, true
}

// value reads the value at s's position: checked on the way, or, in a
// checked body, skimmed.
func value(s *jsontext.Scanner, checked bool) []byte {
	if checked {
		return s.SkimRaw()
	}
	return s.Raw()
}

// DecodeString decodes raw when it is a string, as json.Unmarshal would.
func DecodeString(raw []byte) (string, bool) {
	if KindOf(raw) != String {
		return "", false
	}
	var s jsontext.Scanner
	s.Reset(raw)
	text, _ := s.Text()
	if s.End(); s.Bad() {
		return "", false
	}
	return string(text), true
}

// Malformed is the 400 for a body that is not JSON, saying where and why
// as the server's decoder would.
func Malformed(body []byte) error {
	var v json.RawMessage
	err := json.Unmarshal(body, &v)
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		return api.BadRequest("Malformed JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return api.BadRequest("Malformed JSON: the body ends before the value does")
	case err != nil:
		return api.BadRequest("Malformed JSON: %v", err)
	}
	return api.BadRequest("Malformed JSON")
}

// IntResult says how a number literal failed to be an int64.
type IntResult int

// How Int read a literal: an integer, a fraction, or out of int64.
const (
	IntOK IntResult = iota
	IntFraction
	IntOverflow
)

// Int reads a JSON number literal as an exact integer: 5, 5.0 and 5e0
// are the integer 5, 5.5 is not an integer, and nothing outside int64 is
// accepted. It works on the decimal digits, never through float64, so large
// values keep every digit and huge exponents cost nothing.
func Int(lit string) (int64, IntResult) {
	neg := strings.HasPrefix(lit, "-")
	if neg {
		lit = lit[1:]
	}
	mant, expStr := lit, ""
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		mant, expStr = lit[:i], lit[i+1:]
	}
	intPart, fracPart := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, fracPart = mant[:i], mant[i+1:]
	}
	digits := strings.TrimLeft(intPart+fracPart, "0")
	if digits == "" {
		return 0, IntOK
	}
	exp := 0
	if expStr != "" {
		expNeg := strings.HasPrefix(expStr, "-")
		expStr = strings.TrimLeft(strings.TrimLeft(expStr, "+-"), "0")
		if len(expStr) > 9 { // beyond any int64 either way
			if expNeg {
				return 0, IntFraction
			}
			return 0, IntOverflow
		}
		if expStr != "" {
			e, err := strconv.Atoi(expStr)
			if err != nil {
				return 0, IntFraction
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
		return 0, IntFraction
	}
	if len(digits)+exp > 19 {
		return 0, IntOverflow
	}
	u, err := strconv.ParseUint(digits+strings.Repeat("0", exp), 10, 64)
	switch {
	case err != nil:
		return 0, IntOverflow
	case neg && u <= math.MaxInt64+1:
		return int64(-u), IntOK // -u wraps to the right value for MinInt64
	case !neg && u <= math.MaxInt64:
		return int64(u), IntOK
	}
	return 0, IntOverflow
}

// Float reads a JSON number literal; values beyond float64 become ±Inf,
// which every range check then rejects.
func Float(lit string) float64 {
	f, _ := strconv.ParseFloat(lit, 64)
	return f
}
