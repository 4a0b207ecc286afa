// Package jsontext reads and writes JSON by hand where encoding/json's
// reflection costs too much: the fields the relay reads of every chunk
// and answer, and the messages of every request on the link. The Scanner
// reads values as encoding/json does: the same input is rejected (invalid
// JSON, a value of the wrong type for a field), names match the same way
// (exactly, else folding case, escapes decoded), a repeated member
// overwrites the earlier one, null leaves a value as it was, and text is
// unescaped to the same bytes. The Append functions write encoding/json's
// bytes.
package jsontext

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is encoding/json's limit on nesting; deeper input is invalid.
const MaxDepth = 10000

// Kind says how a string's bytes between its quotes relate to its text.
type Kind int

// The kinds of string.
const (
	ASCII   Kind = iota // printable ASCII, no escapes: the text itself
	UTF8                // no escapes, valid UTF-8: the text itself
	Escaped             // escapes or invalid UTF-8: the text needs decoding
)

// Scanner walks one JSON value. A syntax error marks it bad and moves to
// the end, so every loop over the input stops there. The zero value is
// ready for Reset.
type Scanner struct {
	b        []byte
	i        int
	depth    int
	bad      bool // not JSON
	mistyped bool // JSON, but with a value its field cannot hold
	// text holds the strings that needed decoding. It is only appended to
	// while a value is read, so text handed out earlier stays valid.
	text []byte
}

// Reset starts reading b; Reset(nil) lets go of the last input.
func (s *Scanner) Reset(b []byte) {
	s.b, s.i, s.depth, s.bad, s.mistyped = b, 0, 0, false, false
	s.text = s.text[:0]
}

// Bad reports whether the input is not JSON.
func (s *Scanner) Bad() bool { return s.bad }

// Mistyped reports whether a value read did not fit its field: a string
// read from a number, say, which encoding/json refuses too.
func (s *Scanner) Mistyped() bool { return s.mistyped }

func (s *Scanner) fail() {
	s.bad = true
	s.i = len(s.b)
}

// Peek skips whitespace and returns the next byte, 0 at the end.
func (s *Scanner) Peek() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// Offset is where the next value starts in the input, whitespace skipped:
// for a caller that replaces one value in place.
func (s *Scanner) Offset() int {
	s.Peek()
	return s.i
}

// End checks that nothing but whitespace follows the value.
func (s *Scanner) End() {
	if s.Peek(); s.i != len(s.b) {
		s.fail()
	}
}

// Open enters the object or array at the current position.
func (s *Scanner) Open() {
	s.i++
	if s.depth++; s.depth > MaxDepth {
		s.fail()
	}
}

// Next reports whether another member or element follows, the n already
// read considered, and moves to it; false at the closing byte or an error.
func (s *Scanner) Next(n int, closing byte) bool {
	if s.bad {
		return false
	}
	c := s.Peek()
	if c == closing {
		s.i++
		s.depth--
		return false
	}
	if n > 0 {
		if c != ',' {
			s.fail()
			return false
		}
		s.i++
	}
	return true
}

// Key reads a member's name and the colon after it.
func (s *Scanner) Key() ([]byte, Kind) {
	if s.Peek() != '"' {
		s.fail()
		return nil, ASCII
	}
	k, kind := s.Str()
	if s.Peek() != ':' {
		s.fail()
		return nil, ASCII
	}
	s.i++
	return k, kind
}

// Name reads a member's name and the colon after it, and returns the
// name's text, escapes decoded as encoding/json decodes a map's keys. The
// text of an escaped name stays valid until the next Reset.
func (s *Scanner) Name() []byte {
	k, kind := s.Key()
	if kind == Escaped && !s.bad {
		k = s.unescape(k)
	}
	return k
}

// Str reads the string at the current position and returns the bytes between its quotes.
func (s *Scanner) Str() ([]byte, Kind) {
	b := s.b
	start := s.i + 1
	kind := ASCII
	// run counts the printable ASCII bytes just read one at a time. Eight
	// in a row are text like most of a body's, which is then read eight
	// bytes at a time while they stay plain; a short string, or text in
	// another script, never pays for testing a word.
	run := 0
	for i := start; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return b[start:i], kind
		case c == '\\':
			kind = Escaped
			if i+1 >= len(b) {
				s.fail()
				return nil, kind
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					s.fail()
					return nil, kind
				}
				i += 6
			default:
				s.fail()
				return nil, kind
			}
		case c < ' ':
			s.fail()
			return nil, kind
		case c < utf8.RuneSelf:
			i++
			if run++; run == 8 {
				for i+8 <= len(b) && plain8(binary.LittleEndian.Uint64(b[i:])) {
					i += 8
				}
				run = 0
			}
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				kind = Escaped
			} else if kind == ASCII {
				kind = UTF8
			}
			i += n
			run = 0
		}
	}
	s.fail()
	return nil, kind
}

// plain8 reports whether none of the eight bytes in x ends a string,
// escapes or needs checking: no quote, backslash, control character or
// byte from 0x80. The tests are the classic one for a byte below n,
// (v − n·0x01…01) &^ v & 0x80…80: with n = 1 it finds a zero byte, so a
// quote or a backslash in x is a zero byte of x xor eight of them, and
// with n = 0x20 a control character. A borrow may mark the wrong byte of
// a word, but the test never misses a word that has one, and that is all
// a yes or no needs.
func plain8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote := x ^ (ones * '"')
	backslash := x ^ (ones * '\\')
	special := (quote-ones)&^quote | (backslash-ones)&^backslash | (x-ones*' ')&^x | x
	return special&highs == 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// literal reads true, false or null.
func (s *Scanner) literal(word string) {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		s.fail()
		return
	}
	s.i += len(word)
}

func (s *Scanner) number() {
	b, i := s.b, s.i
	digits := func() bool {
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		s.fail()
		return
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			s.fail()
			return
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			s.fail()
			return
		}
	}
	s.i = i
}

// Value reads past any value, checking it.
func (s *Scanner) Value() {
	switch c := s.Peek(); {
	case c == '{':
		s.Open()
		for n := 0; s.Next(n, '}'); n++ {
			s.Key()
			s.Value()
		}
	case c == '[':
		s.Open()
		for n := 0; s.Next(n, ']'); n++ {
			s.Value()
		}
	case c == '"':
		s.Str()
	case c == 't':
		s.literal("true")
	case c == 'f':
		s.literal("false")
	case c == 'n':
		s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		s.number()
	default:
		s.fail()
	}
}

// Null reads the value at the current position and reports whether it was null.
func (s *Scanner) Null() bool {
	if s.Peek() == 'n' {
		s.literal("null")
		return !s.bad
	}
	s.Value()
	return false
}

// Raw reads the value at the current position and returns its bytes.
func (s *Scanner) Raw() []byte {
	s.Peek()
	start := s.i
	s.Value()
	return s.b[start:s.i]
}

// Text reads the value of a string field: its text, or false for null
// (which leaves the field as it was, or clears a *string).
func (s *Scanner) Text() ([]byte, bool) {
	switch s.Peek() {
	case '"':
		t, kind := s.Str()
		if kind == Escaped && !s.bad {
			t = s.unescape(t)
		}
		return t, true
	case 'n':
		s.literal("null")
	default:
		s.mistyped = true
		s.Value()
	}
	return nil, false
}

// Object reports whether the value at the current position is an object to read member by
// member; null, which leaves a struct as it was, and anything else are
// read past.
func (s *Scanner) Object() bool {
	switch s.Peek() {
	case '{':
		s.Open()
		return true
	case 'n':
		s.literal("null")
	default:
		s.mistyped = true
		s.Value()
	}
	return false
}

// Array is Object for a slice: null empties it, reported by the second
// result.
func (s *Scanner) Array() (elements, null bool) {
	switch s.Peek() {
	case '[':
		s.Open()
		return true, false
	case 'n':
		s.literal("null")
		return false, true
	default:
		s.mistyped = true
		s.Value()
	}
	return false, false
}

// unescape decodes a checked string's bytes onto s.text as encoding/json
// does: invalid UTF-8 and unpaired surrogates become U+FFFD.
func (s *Scanner) unescape(q []byte) []byte {
	start := len(s.text)
	// The text is at most as long as q, but for invalid bytes, each of
	// which becomes the three of U+FFFD: room for q is room enough, most
	// of the time, for one allocation rather than one for each doubling.
	t := slices.Grow(s.text, len(q))
	for r := 0; r < len(q); {
		switch c := q[r]; {
		case c == '\\':
			switch e := q[r+1]; e {
			case 'b':
				t = append(t, '\b')
			case 'f':
				t = append(t, '\f')
			case 'n':
				t = append(t, '\n')
			case 'r':
				t = append(t, '\r')
			case 't':
				t = append(t, '\t')
			case 'u':
				rr := getu4(q[r:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if dec := utf16.DecodeRune(rr, getu4(q[r:])); dec != unicode.ReplacementChar {
						r += 6
						t = utf8.AppendRune(t, dec)
						continue
					}
					rr = unicode.ReplacementChar
				}
				t = utf8.AppendRune(t, rr)
				continue
			default:
				t = append(t, e)
			}
			r += 2
		case c < utf8.RuneSelf:
			// The run of plain ASCII up to the next escape or other byte,
			// copied whole: a long text has few escapes.
			end := r + 1
			for end < len(q) && q[end] < utf8.RuneSelf && q[end] != '\\' {
				end++
			}
			t = append(t, q[r:end]...)
			r = end
		default:
			rr, n := utf8.DecodeRune(q[r:])
			t = utf8.AppendRune(t, rr)
			r += n
		}
	}
	s.text = t
	return t[start:len(t):len(t)]
}

// getu4 decodes \uXXXX at the start of q, or returns -1.
func getu4(q []byte) rune {
	if len(q) < 6 || q[0] != '\\' || q[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range q[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// Is reports whether a member's name, as read by key, names the field:
// encoding/json takes a name that matches exactly or, failing that, one
// equal under its case folding ("ID", "Content", or an escaped spelling).
// Field names are lower-case ASCII.
func (s *Scanner) Is(key []byte, kind Kind, field string) bool {
	if kind == ASCII {
		if len(key) != len(field) {
			return false
		}
		for i, c := range key {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != field[i] {
				return false
			}
		}
		return true
	}
	mark := len(s.text)
	if kind == Escaped {
		key = s.unescape(key)
	}
	var arr [32]byte
	folded := AppendFoldedName(arr[:0], key)
	s.text = s.text[:mark]
	if len(folded) != len(field) {
		return false
	}
	for i, c := range folded {
		if f := field[i]; c != f && !('a' <= f && f <= 'z' && c == f-('a'-'A')) {
			return false
		}
	}
	return true
}

// AppendFoldedName appends in as encoding/json folds a member's name:
// names equal under its case folding are equal after.
func AppendFoldedName(out, in []byte) []byte {
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return out
}

func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// Skim moves past the value at the current position to the comma or closing bracket after
// it, knowing only brackets and quotes.
func (s *Scanner) Skim() {
	s.Peek()
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			s.skimString()
			if depth == 0 {
				return
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return
			}
			if depth--; depth == 0 {
				s.i++
				return
			}
		case ',':
			if depth == 0 {
				return
			}
		}
		s.i++
	}
	s.fail()
}

// SkimRaw is Raw for input already checked to be JSON: the bytes of the
// value at the current position, found by its brackets and quotes alone,
// so that a value read at each level of a body is checked once, not at
// each.
func (s *Scanner) SkimRaw() []byte {
	s.Peek()
	start := s.i
	s.Skim()
	end := s.i
	// Skim leaves a number or a literal at the comma or bracket after it.
	for end > start && (s.b[end-1] == ' ' || s.b[end-1] == '\t' || s.b[end-1] == '\r' || s.b[end-1] == '\n') {
		end--
	}
	return s.b[start:end]
}

// skimString moves past the string at the current position to the quote that closes it.
func (s *Scanner) skimString() {
	end := StringEnd(s.b, s.i)
	if end < 0 {
		s.fail()
		return
	}
	s.i = end
}

// StringEnd returns the index just past the string whose opening quote is
// b[i]: past the first quote after it that an even run of backslashes
// (none, mostly) precedes; -1 when no quote closes it. It knows nothing
// else of JSON, and finds quotes with bytes.IndexByte, so that a reader
// that only moves past a string's text costs a fraction of one that looks
// at each of its bytes.
func StringEnd(b []byte, i int) int {
	for j := i + 1; j <= len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		back := 0
		for q-1-back > i && b[q-1-back] == '\\' {
			back++
		}
		if back%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return -1
}

// Int reads the value of an integer field as encoding/json does: a number
// without fraction or exponent that fits; false for null, which leaves
// the field as it was.
func (s *Scanner) Int() (int64, bool) {
	n := s.numberText()
	if n == nil {
		return 0, false
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		s.mistyped = true
		return 0, false
	}
	return v, true
}

// Float reads the value of a float64 field; false for null.
func (s *Scanner) Float() (float64, bool) {
	n := s.numberText()
	if n == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		s.mistyped = true
		return 0, false
	}
	return v, true
}

// numberText reads the value of a number field and returns its bytes:
// nil for null, and for anything else, which marks the scanner mistyped.
func (s *Scanner) numberText() []byte {
	switch c := s.Peek(); {
	case c == '-' || '0' <= c && c <= '9':
		start := s.i
		if s.number(); s.bad {
			return nil
		}
		return s.b[start:s.i]
	case c == 'n':
		s.literal("null")
	default:
		s.mistyped = true
		s.Value()
	}
	return nil
}

// Bool reads the value of a bool field; false for null.
func (s *Scanner) Bool() (v, ok bool) {
	switch s.Peek() {
	case 't':
		s.literal("true")
		return true, !s.bad
	case 'f':
		s.literal("false")
		return false, !s.bad
	case 'n':
		s.literal("null")
	default:
		s.mistyped = true
		s.Value()
	}
	return false, false
}

// Valid reports whether b is one JSON value, as json.Valid does. It
// reads bytes in loops of its own, where json.Valid makes a state
// machine's function call for each, and a string's plain text eight bytes
// at a time: a request's body is checked whole before its fields are read,
// and this takes a quarter of json.Valid's time on a chat body of 20 KB
// with some text in other scripts (BenchmarkValid), a tenth on plain
// ASCII.
func Valid(b []byte) bool {
	var s Scanner
	s.Reset(b)
	s.Value()
	s.End()
	return !s.bad
}
