// Package money keeps amounts in integer minor units so sums never drift.
package money

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// GBP is an amount of pounds sterling in pence.
type GBP int64

// ErrSyntax is returned for text that is not a decimal amount with at most
// two fractional digits.
var ErrSyntax = errors.New("not an amount with at most two decimal places")

// ErrRange is returned for amounts that do not fit.
var ErrRange = errors.New("amount out of range")

// Pounds builds an amount from whole pounds.
func Pounds(p int64) GBP { return GBP(p * 100) }

// Parse reads plain decimals such as "12", "12.5" or "-0.25" exactly,
// without passing through a float; exponents are refused.
func Parse(s string) (GBP, error) {
	s = strings.TrimSpace(s)
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" && (!hasDot || frac == "") {
		return 0, ErrSyntax
	}
	if len(frac) > 2 || (hasDot && frac == "") || !digits(whole) || !digits(frac) {
		return 0, ErrSyntax
	}
	var pounds int64
	if whole != "" {
		var err error
		if pounds, err = strconv.ParseInt(whole, 10, 64); err != nil {
			return 0, ErrRange
		}
	}
	for len(frac) < 2 {
		frac += "0"
	}
	pence, _ := strconv.ParseInt(frac, 10, 64)
	if pounds > (math.MaxInt64-pence)/100 {
		return 0, ErrRange
	}
	v := pounds*100 + pence
	if neg {
		v = -v
	}
	return GBP(v), nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String formats with exactly two decimals, e.g. "12.50" or "-0.05".
func (m GBP) String() string {
	v := int64(m)
	sign := ""
	// Negate through uint64 so the most negative value formats too.
	u := uint64(v)
	if v < 0 {
		sign, u = "-", uint64(-(v+1))+1
	}
	return fmt.Sprintf("%s%d.%02d", sign, u/100, u%100)
}

// Add returns m+o, or ErrRange when the sum overflows.
func (m GBP) Add(o GBP) (GBP, error) {
	s := m + o
	if (o > 0 && s < m) || (o < 0 && s > m) {
		return 0, ErrRange
	}
	return s, nil
}

// MarshalJSON writes a JSON number with two decimals.
func (m GBP) MarshalJSON() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalJSON accepts a JSON number or a string holding one. Failures are
// *json.UnmarshalTypeError so the decoder names the field.
func (m *GBP) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := Parse(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[GBP]()}
	}
	*m = v
	return nil
}
