package jsontext

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// The package's promise is encoding/json's behaviour; each fuzz target
// holds one part of it to encoding/json itself.

var valueSeeds = []string{
	``, ` `, `null`, `true`, `false`, `nul`, `0`, `-0`, `01`, `-`, `1.`, `1.5e+3`, `1e400`, `-12`,
	`""`, `"a\"b"`, `"\u00e9\ud83d\ude00"`, `"\ud800"`, `"\x"`, "\"\x01\"", "\"\xff\"", `"é"`,
	`[]`, `[1,]`, `[1 2]`, `{}`, `{"a":1,}`, `{"a" 1}`, `{1:2}`, `{"a":[{"b":null}]}`, `{} x`, ` [ ] `,
	strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
}

func addSeeds(f *testing.F, seeds []string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
}

// FuzzValue holds Value's checking to json.Valid, nesting limit included.
func FuzzValue(f *testing.F) {
	addSeeds(f, valueSeeds)
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Scanner
		s.Reset(b)
		s.Value()
		s.End()
		if got, want := !s.Bad(), json.Valid(b); got != want {
			t.Fatalf("%q: valid %v, encoding/json says %v", b, got, want)
		}
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("%q: Valid %v, encoding/json says %v", b, got, want)
		}
	})
}

// FuzzText holds Text to encoding/json's decoding of a string, and a
// string Str calls ASCII or UTF8 to being its own text.
func FuzzText(f *testing.F) {
	addSeeds(f, valueSeeds)
	f.Fuzz(checkText)
}

// TestTextAcrossWords puts each kind of byte Str must stop at, and a
// string's end, at every offset of a long ASCII string, so that each
// falls in every place of the eight-byte words it is read in.
func TestTextAcrossWords(t *testing.T) {
	const text = "The quick brown fox jumps over the lazy dog"
	for _, special := range []string{`\"`, `\\`, `\n`, `\u00e9`, `\ud83d\ude00`, "\x01", "\x1f", "\x7f", "é", "日本", "\xff", "\xc3", `"`, `\`, `\x`} {
		for at := 0; at <= 24; at++ {
			b := []byte(`"` + text[:at] + special + text[at:] + `"`)
			checkText(t, b)
			checkText(t, b[:len(b)-1])
			if got, want := Valid(b), json.Valid(b); got != want {
				t.Fatalf("%q: Valid %v, encoding/json says %v", b, got, want)
			}
		}
	}
}

// checkText holds Text and Str to encoding/json on b.
func checkText(t *testing.T, b []byte) {
	var want *string
	err := json.Unmarshal(b, &want)
	var s Scanner
	s.Reset(b)
	got, isText := s.Text()
	s.End()
	switch {
	case !json.Valid(b):
		if !s.Bad() {
			t.Fatalf("%q: not JSON, but read as %q", b, got)
		}
	case err != nil:
		if !s.Mistyped() {
			t.Fatalf("%q: encoding/json refuses it as a string (%v), but it was read as %q", b, err, got)
		}
	case want == nil:
		if isText || s.Mistyped() {
			t.Fatalf("%q: null read as text %q", b, got)
		}
	case !isText || string(got) != *want:
		t.Fatalf("%q: text %q, encoding/json decodes %q", b, got, *want)
	}
	if err == nil && want != nil {
		s.Reset(b)
		s.Peek()
		raw, kind := s.Str()
		if kind != Escaped && string(raw) != *want {
			t.Fatalf("%q: kind %v, but its bytes %q are not its text %q", b, kind, raw, *want)
		}
	}
}

// FuzzNumbers holds Int, Float and Bool to decoding into int64, float64
// and bool: the same values, null leaving the field, the same refusals.
func FuzzNumbers(f *testing.F) {
	addSeeds(f, valueSeeds)
	addSeeds(f, []string{`9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `1e3`, `2.5`, `"1"`})
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := json.Valid(b)
		check := func(kind string, err error, s *Scanner, ok bool, same bool) {
			t.Helper()
			s.End()
			switch {
			case !valid:
				if !s.Bad() {
					t.Fatalf("%q as %s: not JSON, but read", b, kind)
				}
			case err != nil:
				if !s.Mistyped() {
					t.Fatalf("%q as %s: encoding/json refuses it (%v), the scanner does not", b, kind, err)
				}
			case s.Mistyped() || s.Bad():
				t.Fatalf("%q as %s: encoding/json takes it, the scanner refuses it", b, kind)
			case ok != (string(bytes.TrimSpace(b)) != "null") || !same:
				t.Fatalf("%q as %s: read differently from encoding/json", b, kind)
			}
		}
		var s Scanner

		var i int64
		err := json.Unmarshal(b, &i)
		s.Reset(b)
		n, ok := s.Int()
		check("int64", err, &s, ok, !ok || n == i)

		var fl float64
		err = json.Unmarshal(b, &fl)
		s.Reset(b)
		x, ok := s.Float()
		check("float64", err, &s, ok, !ok || x == fl || math.IsNaN(x) && math.IsNaN(fl))

		var bo bool
		err = json.Unmarshal(b, &bo)
		s.Reset(b)
		v, ok := s.Bool()
		check("bool", err, &s, ok, !ok || v == bo)
	})
}

// FuzzIs holds Is to the member names encoding/json takes for a field:
// exactly, folded, or escaped.
func FuzzIs(f *testing.F) {
	for _, k := range []string{`content`, `Content`, `CONTENT`, `conten`, `c\u006fntent`, `\u0043ontent`,
		"conte\u212at", `contents`, `ſ`, `id`, `ID`, `iD`, `i\u0064`, "\xff"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		doc := []byte(`{"` + key + `":1}`)
		if !json.Valid(doc) {
			return
		}
		var v struct {
			Content *int `json:"content"`
			ID      *int `json:"id"`
		}
		if err := json.Unmarshal(doc, &v); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		var s Scanner
		s.Reset(doc)
		s.Open()
		if !s.Next(0, '}') {
			t.Fatalf("%s: no member", doc)
		}
		k, kind := s.Key()
		for _, c := range []struct {
			field string
			set   bool
		}{{"content", v.Content != nil}, {"id", v.ID != nil}} {
			if got := s.Is(k, kind, c.field); got != c.set {
				t.Fatalf("%s: Is(%q) = %v, encoding/json sets the field: %v", doc, c.field, got, c.set)
			}
		}
	})
}

// FuzzAppendString holds AppendString to json.Marshal of a string, and
// AppendStringNoHTML to an Encoder that does not escape for HTML.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", `"\`, "<a&b>", "\x00\x1f\b\f\n\r\t", "\u2028\u2029", "\xff\xfe", "é😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("%q: %s, encoding/json writes %s", s, got[1:], want)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := AppendStringNoHTML(nil, s); string(got) != string(want) {
			t.Fatalf("%q without HTML escapes: %s, encoding/json writes %s", s, got, want)
		}
	})
}

// FuzzAppendFloat holds AppendFloat to json.Marshal of a finite float.
func FuzzAppendFloat(f *testing.F) {
	for _, x := range []float64{0, math.Copysign(0, -1), 1, -1.5, 1e-6, 9.99e-7, 1e20, 1e21, 123456789e-15,
		math.MaxFloat64, math.SmallestNonzeroFloat64} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return
		}
		want, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendFloat(nil, x); string(got) != string(want) {
			t.Fatalf("%v: %s, encoding/json writes %s", x, got, want)
		}
	})
}

// Skim finds the end of each element of valid JSON where Value does.
func TestSkimEndsWhereValueDoes(t *testing.T) {
	for _, doc := range []string{
		`[1, "a,b", {"c": [2, "]"]}, "\\\"]", [], {}, null]`,
		`{"a": "}", "b": [{"x": "\\\\"}], "c": 3}`,
	} {
		var v, k Scanner
		v.Reset([]byte(doc))
		k.Reset([]byte(doc))
		v.Open()
		k.Open()
		closing := byte(']')
		if doc[0] == '{' {
			closing = '}'
		}
		for n := 0; v.Next(n, closing); n++ {
			if !k.Next(n, closing) {
				t.Fatalf("%s: skimming ended after %d elements", doc, n)
			}
			if closing == '}' {
				v.Key()
				k.Key()
			}
			v.Value()
			k.Skim()
			if v.Offset() != k.Offset() || k.Bad() {
				t.Fatalf("%s: element %d ends at %d, skimmed to %d", doc, n, v.Offset(), k.Offset())
			}
		}
		if k.Next(1, closing) {
			t.Fatalf("%s: skimming found more elements", doc)
		}
	}
}

// BenchmarkValid sets Valid beside json.Valid on a chat body of 20 KB,
// which the gateway checks before it reads the body's fields.
func BenchmarkValid(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"You are a helpful assistant."},` +
		`{"role":"user","content":"` + strings.Repeat("The quick brown fox jumps over the lazy dog, 日本語. ", 400) + `"}]}`)
	for _, bc := range []struct {
		name  string
		valid func([]byte) bool
	}{{"json", json.Valid}, {"jsontext", Valid}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if !bc.valid(body) {
					b.Fatal("not valid")
				}
			}
		})
	}
}

// A string ends at the first quote after an even run of backslashes.
func TestStringEnd(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int // index past the string; -1 when it does not end
	}{
		{`"" x`, 2},
		{`"abc",`, 5},
		{`"a\"b" x`, 6},
		{`"a\\" x`, 5},
		{`"a\\\"b" x`, 8},
		{`"\\\\"`, 6},
		{`"\""`, 4},
		{`"日本語\u00e9" x`, 17},
		{`"`, -1},
		{`"abc`, -1},
		{`"a\"`, -1},
		{`"\\\"`, -1},
	} {
		if got := StringEnd([]byte(tt.in), 0); got != tt.want {
			t.Errorf("StringEnd(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
