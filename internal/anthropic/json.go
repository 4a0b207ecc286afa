package anthropic

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/jsonraw"
)

// kind is the JSON type of a raw value, read from its first byte; the
// values it is used on have already been through json.Valid or a decoder.
// object is a decoded JSON object, its keys matched exactly.
type object = jsonraw.Members

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

// intResult says how a number literal failed to be an int64.
type intResult int

const (
	intOK intResult = iota
	intFraction
	intOverflow
)

// parseInt reads a JSON number literal as an exact integer, as the chat
// parser does: 5, 5.0 and 5e0 are 5, 5.5 is not an integer. It works on
// the digits, so a huge exponent costs nothing and no digit is lost to
// float64.
func parseInt(lit string) (int64, intResult) {
	neg := strings.HasPrefix(lit, "-")
	lit = strings.TrimPrefix(lit, "-")
	mant, expStr := lit, ""
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		mant, expStr = lit[:i], lit[i+1:]
	}
	intPart, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return 0, intOK
	}
	exp := 0
	if expStr != "" {
		expNeg := strings.HasPrefix(expStr, "-")
		expStr = strings.TrimLeft(strings.TrimLeft(expStr, "+-"), "0")
		if len(expStr) > 9 {
			if expNeg {
				return 0, intFraction
			}
			return 0, intOverflow
		}
		if expStr != "" {
			e, err := strconv.Atoi(expStr)
			if err != nil {
				return 0, intFraction
			}
			exp = e
			if expNeg {
				exp = -e
			}
		}
	}
	exp -= len(frac)
	for strings.HasSuffix(digits, "0") {
		digits = digits[:len(digits)-1]
		exp++
	}
	if exp < 0 {
		return 0, intFraction
	}
	if len(digits)+exp > 19 {
		return 0, intOverflow
	}
	u, err := strconv.ParseUint(digits+strings.Repeat("0", exp), 10, 64)
	switch {
	case err != nil:
		return 0, intOverflow
	case neg && u <= math.MaxInt64+1:
		return int64(-u), intOK
	case !neg && u <= math.MaxInt64:
		return int64(u), intOK
	}
	return 0, intOverflow
}
