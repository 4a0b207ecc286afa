package jsonraw

import (
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsontext"
)

// CaseTwins is the 400 of a body whose object has two member names, of
// its n, name(i) each, that differ only in case as encoding/json folds
// them, or nil. Engines written in Go read a member under any case, the
// last spelling winning: MAX_TOKENS sent after max_tokens would be what
// they obey, not what the gateway checked.
func CaseTwins(n int, name func(int) string) *api.Error {
	a, b := caseTwins(n, name)
	if a == "" && b == "" {
		return nil
	}
	if b == strings.ToLower(b) && a != strings.ToLower(a) {
		a, b = b, a
	}
	return AmbiguousField(a, b)
}

// AmbiguousField is the 400 of a body that names field also as other,
// which differs from it only in case.
func AmbiguousField(field, other string) *api.Error {
	return &api.Error{Kind: api.KindInvalidRequest, Code: "ambiguous_field", Param: field,
		Message: "The field " + strconv.Quote(other) + " is " + strconv.Quote(field) + " in another case: field names are case-sensitive here, and an engine could read either; send " + strconv.Quote(field) + " alone"}
}

// caseTwins is such a pair; a name sent twice alike is not one (its last
// value is read, by the gateway and engines alike).
func caseTwins(n int, name func(int) string) (string, string) {
	if n < 16 {
		// Names of ASCII alone are equal under folding only at one
		// length, which spares most pairs the folding comparison.
		var names [16]struct {
			s     string
			ascii bool
		}
		for i := range n {
			names[i].s = name(i)
			names[i].ascii = isASCII(names[i].s)
		}
		for i := range n {
			a := &names[i]
			for j := i + 1; j < n; j++ {
				b := &names[j]
				if a.ascii && b.ascii && len(a.s) != len(b.s) || a.s == b.s {
					continue
				}
				if strings.EqualFold(a.s, b.s) {
					return a.s, b.s
				}
			}
		}
		return "", ""
	}
	seen := make(map[string]string, n)
	for i := range n {
		b := name(i)
		f := string(jsontext.AppendFoldedName(nil, []byte(b)))
		if a, ok := seen[f]; ok && a != b {
			return a, b
		}
		seen[f] = b
	}
	return "", ""
}

// MayFold reports a name that encoding/json's folding could make equal
// to another: one with a capital, or a byte outside ASCII. A body whose
// names are all of lower-case ASCII has no pair (nor a name read in
// another case, the names read being lower case).
func MayFold(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' || c >= 0x80 {
			return true
		}
	}
	return false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
