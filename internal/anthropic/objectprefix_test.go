package anthropic

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestObjectPrefix(t *testing.T) {
	tests := []struct {
		name   string
		pieces []string
		want   string // what is passed on, all pieces together
	}{
		{"an object in pieces", []string{`{"city":`, ` "Par`, `is", "days": [1, 2.5e3, -0.1], "ok": true, "x": null}`}, `{"city": "Paris", "days": [1, 2.5e3, -0.1], "ok": true, "x": null}`},
		{"escapes across pieces", []string{`{"q": "a\`, `"b\u00`, `e9\n", "k\`, `t": {}}`}, `{"q": "a\"b\u00e9\n", "k\t": {}}`},
		{"space around", []string{"  \n{ }", " \t"}, "  \n{ } \t"},
		{"an object cut short", []string{`{"city": "Pa`}, `{"city": "Pa`},
		{"not JSON", []string{`not json`}, ``},
		{"not an object", []string{`["a"]`}, ``},
		{"a string", []string{`"{}"`}, ``},
		{"text after the object", []string{`{"a": 1} and more`, `{"b": 2}`}, `{"a": 1} `},
		{"a bad value, nothing after it", []string{`{"a": Paris}`, `, "b": 1}`}, `{"a": `},
		{"single quotes", []string{`{'a': 1}`}, `{`},
		{"a trailing comma", []string{`{"a": 1,}`}, `{"a": 1,`},
		{"a leading zero", []string{`{"a": 01}`}, `{"a": 0`},
		{"a bad escape", []string{`{"a": "\x"}`}, `{"a": "\`},
		{"a raw newline in a string", []string{"{\"a\": \"x\ny\"}"}, `{"a": "x`},
		{"a number ends the object", []string{`{"a": 12}`}, `{"a": 12}`},
		{"a key without a colon", []string{`{"a" 1}`}, `{"a" `},
		{"an empty key", []string{`{"": []}`}, `{"": []}`},
		{"nested", []string{`{"a": [{"b": [[]]}, {}]}`}, `{"a": [{"b": [[]]}, {}]}`},
		{"a mismatched end", []string{`{"a": [1}`}, `{"a": [1`},
		{"a bad literal", []string{`{"a": tru`, `e, "b": nul`, `x}`}, `{"a": true, "b": nul`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o objectPrefix
			var got strings.Builder
			for _, p := range tt.pieces {
				got.WriteString(p[:o.take(p)])
			}
			if got.String() != tt.want {
				t.Fatalf("passed on %q, want %q", got.String(), tt.want)
			}
		})
	}
}

// FuzzObjectPrefix holds objectPrefix to encoding/json: a whole object is
// passed on whole, taken in any two pieces; what is passed on of anything
// else is the beginning of some object, which finishing finishes; and
// what it takes as finished is JSON.
func FuzzObjectPrefix(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.5e-3, "x\u00e9"], "b": {"c": null}}`, `{}`, ` { "k" : true } `, `{"a": tru}`,
		`[1]`, `{"a": -}`, `{"a": 1e}`, `{"a\"": "\\"}`, `{"a": 0.}`} {
		f.Add(s, len(s)/2)
	}
	f.Fuzz(func(t *testing.T, s string, cut int) {
		cut = min(max(cut, 0), len(s))
		var o objectPrefix
		n := o.take(s[:cut])
		if n == cut {
			n += o.take(s[cut:])
		}
		valid := json.Valid([]byte(s)) && strings.HasPrefix(strings.TrimLeft(s, " \t\r\n"), "{")
		if valid && n != len(s) {
			t.Fatalf("%q: passed on %d bytes of a whole object", s, n)
		}
		if o.state == psDone && !o.bad && !valid {
			t.Fatalf("%q: taken as a whole object", s)
		}
		if whole := s[:n] + finishing(&o); !json.Valid([]byte(whole)) {
			t.Fatalf("%q: passed on %q, which %q does not finish", s, s[:n], whole)
		}
	})
}

// finishing is what finishes an object whose beginning o has taken.
func finishing(o *objectPrefix) string {
	var b strings.Builder
	key := false
	switch o.state {
	case psStart:
		return "{}"
	case psString:
	case psKeyString:
		key = true
	case psEscape:
		b.WriteString("n")
		key = o.inKey
	case psUnicode:
		b.WriteString(strings.Repeat("0", 4-o.hex))
		key = o.inKey
	case psLiteral:
		b.WriteString(o.lit)
	case psNumSign, psNumDot, psNumExp, psNumExpSign:
		b.WriteString("0")
	case psColon:
		b.WriteString(":null")
	case psValue:
		b.WriteString("null")
	case psKey:
		b.WriteString(`"k":null`)
	}
	switch o.state {
	case psString, psKeyString, psEscape, psUnicode:
		b.WriteString(`"`)
		if key {
			b.WriteString(":null")
		}
	}
	for i := len(o.stack) - 1; i >= 0; i-- {
		if o.stack[i] == '{' {
			b.WriteByte('}')
		} else {
			b.WriteByte(']')
		}
	}
	return b.String()
}
