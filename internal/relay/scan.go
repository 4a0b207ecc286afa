package relay

import (
	"encoding/json"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The relay reads a few fields of every chunk it passes on, and of every
// non-streaming answer it completes. Decoding them with encoding/json cost
// a tenth of a stream's CPU, most of it reflection and copies of text the
// gateway only counts. The scanner here reads the same fields in one pass
// over the bytes, and reads them as encoding/json did: the same input is
// rejected (invalid JSON, a value of the wrong type for a field), names
// match the same way (exactly, else folding case, escapes decoded), a
// repeated member overwrites the earlier one, null leaves a string as it
// was, and text is unescaped to the same bytes.

// maxDepth is encoding/json's limit on nesting; deeper input is invalid.
const maxDepth = 10000

// How a string's bytes between its quotes relate to its text.
const (
	strASCII   = iota // printable ASCII, no escapes: the text itself
	strUTF8           // no escapes, valid UTF-8: the text itself
	strEscaped        // escapes or invalid UTF-8: the text needs decoding
)

// scanner walks one JSON value. A syntax error sets bad and moves to the
// end, so every loop over the input stops there.
type scanner struct {
	b        []byte
	i        int
	depth    int
	bad      bool // not JSON
	mistyped bool // JSON, but with a value its field cannot hold
	// text holds the strings that needed decoding. It is only appended to
	// while a value is read, so text handed out earlier stays valid.
	text []byte
}

func (s *scanner) reset(b []byte) {
	s.b, s.i, s.depth, s.bad, s.mistyped = b, 0, 0, false, false
	s.text = s.text[:0]
}

func (s *scanner) fail() {
	s.bad = true
	s.i = len(s.b)
}

// peek skips whitespace and returns the next byte, 0 at the end.
func (s *scanner) peek() byte {
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

// end checks that nothing but whitespace follows the value.
func (s *scanner) end() {
	if s.peek(); s.i != len(s.b) {
		s.fail()
	}
}

// open enters the object or array at s.i.
func (s *scanner) open() {
	s.i++
	if s.depth++; s.depth > maxDepth {
		s.fail()
	}
}

// next reports whether another member or element follows, the n already
// read considered, and moves to it; false at the closing byte or an error.
func (s *scanner) next(n int, closing byte) bool {
	if s.bad {
		return false
	}
	c := s.peek()
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

// key reads a member's name and the colon after it.
func (s *scanner) key() ([]byte, int) {
	if s.peek() != '"' {
		s.fail()
		return nil, strASCII
	}
	k, kind := s.str()
	if s.peek() != ':' {
		s.fail()
		return nil, strASCII
	}
	s.i++
	return k, kind
}

// str reads the string at s.i and returns the bytes between its quotes.
func (s *scanner) str() ([]byte, int) {
	b := s.b
	start := s.i + 1
	kind := strASCII
	for i := start; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return b[start:i], kind
		case c == '\\':
			kind = strEscaped
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
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				kind = strEscaped
			} else if kind == strASCII {
				kind = strUTF8
			}
			i += n
		}
	}
	s.fail()
	return nil, kind
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// literal reads true, false or null.
func (s *scanner) literal(word string) {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		s.fail()
		return
	}
	s.i += len(word)
}

func (s *scanner) number() {
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

// value reads past any value, checking it.
func (s *scanner) value() {
	switch c := s.peek(); {
	case c == '{':
		s.open()
		for n := 0; s.next(n, '}'); n++ {
			s.key()
			s.value()
		}
	case c == '[':
		s.open()
		for n := 0; s.next(n, ']'); n++ {
			s.value()
		}
	case c == '"':
		s.str()
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

// null reads the value at s.i and reports whether it was null.
func (s *scanner) null() bool {
	if s.peek() == 'n' {
		s.literal("null")
		return !s.bad
	}
	s.value()
	return false
}

// raw reads the value at s.i and returns its bytes.
func (s *scanner) raw() []byte {
	s.peek()
	start := s.i
	s.value()
	return s.b[start:s.i]
}

// string reads the value of a string field: its text, or false for null
// (which leaves the field as it was, or clears a *string).
func (s *scanner) string() ([]byte, bool) {
	switch s.peek() {
	case '"':
		t, kind := s.str()
		if kind == strEscaped && !s.bad {
			t = s.unescape(t)
		}
		return t, true
	case 'n':
		s.literal("null")
	default:
		s.mistyped = true
		s.value()
	}
	return nil, false
}

// object reports whether the value at s.i is an object to read member by
// member; null, which leaves a struct as it was, and anything else are
// read past.
func (s *scanner) object() bool {
	switch s.peek() {
	case '{':
		s.open()
		return true
	case 'n':
		s.literal("null")
	default:
		s.mistyped = true
		s.value()
	}
	return false
}

// array is object for a slice: null empties it, reported by the second
// result.
func (s *scanner) array() (elements, null bool) {
	switch s.peek() {
	case '[':
		s.open()
		return true, false
	case 'n':
		s.literal("null")
		return false, true
	default:
		s.mistyped = true
		s.value()
	}
	return false, false
}

// unescape decodes a checked string's bytes onto s.text as encoding/json
// does: invalid UTF-8 and unpaired surrogates become U+FFFD.
func (s *scanner) unescape(q []byte) []byte {
	start := len(s.text)
	t := s.text
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
			t = append(t, c)
			r++
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

// is reports whether a member's name, as read by key, names the field:
// encoding/json takes a name that matches exactly or, failing that, one
// equal under its case folding ("ID", "Content", or an escaped spelling).
// Field names are lower-case ASCII.
func (s *scanner) is(key []byte, kind int, field string) bool {
	if kind == strASCII {
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
	if kind == strEscaped {
		key = s.unescape(key)
	}
	var arr [32]byte
	folded := appendFoldedName(arr[:0], key)
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

// appendFoldedName is encoding/json's folding of a member's name.
func appendFoldedName(out, in []byte) []byte {
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

// chunkChoice is what the relay reads of a streamed chunk's choice.
type chunkChoice struct {
	content, reasoning []byte
	toolCalls          bool // delta.tool_calls present and not null
	finish             []byte
	finished           bool // finish_reason a string, not null
}

// chunkScan reads streamed chunks; one serves a whole stream.
type chunkScan struct {
	scanner
	id      []byte
	choices []chunkChoice
}

// read takes what the relay needs from a chunk, false when encoding/json
// would not have decoded it (the chunk is then passed on unread).
func (s *chunkScan) read(msg []byte) bool {
	s.reset(msg)
	defer func() { s.b = nil }()
	s.id, s.choices = nil, s.choices[:0]
	again := false
	seen := false
	if s.object() {
		for n := 0; s.next(n, '}'); n++ {
			k, kind := s.key()
			switch {
			case s.is(k, kind, "id"):
				if t, ok := s.string(); ok {
					s.id = t
				}
			case s.is(k, kind, "choices"):
				again, seen = seen, true
				s.readChoices()
			default:
				s.value()
			}
		}
	}
	s.end()
	if s.bad || s.mistyped {
		return false
	}
	if again {
		return s.decode(msg)
	}
	return true
}

func (s *chunkScan) readChoices() {
	elements, null := s.array()
	if elements || null {
		s.choices = s.choices[:0]
	}
	if !elements {
		return
	}
	for n := 0; s.next(n, ']'); n++ {
		s.choices = append(s.choices, chunkChoice{})
		ch := &s.choices[n]
		if !s.object() {
			continue
		}
		for m := 0; s.next(m, '}'); m++ {
			k, kind := s.key()
			switch {
			case s.is(k, kind, "delta"):
				s.readDelta(ch)
			case s.is(k, kind, "finish_reason"):
				ch.finish, ch.finished = s.string()
			default:
				s.value()
			}
		}
	}
}

func (s *chunkScan) readDelta(ch *chunkChoice) {
	if !s.object() {
		return
	}
	for n := 0; s.next(n, '}'); n++ {
		k, kind := s.key()
		switch {
		case s.is(k, kind, "content"):
			if t, ok := s.string(); ok {
				ch.content = t
			}
		case s.is(k, kind, "reasoning_content"):
			if t, ok := s.string(); ok {
				ch.reasoning = t
			}
		case s.is(k, kind, "tool_calls"):
			ch.toolCalls = !s.null()
		default:
			s.value()
		}
	}
}

// streamChunk is a chunk as encoding/json decodes it, for the chunk that
// repeats its choices: encoding/json decodes the second array into the
// first one's elements, spare capacity included, which is not worth
// copying for something no engine sends.
type streamChunk struct {
	ID      string `json:"id"`
	Choices []struct {
		Delta struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

func (s *chunkScan) decode(msg []byte) bool {
	var ch streamChunk
	if json.Unmarshal(msg, &ch) != nil {
		return false
	}
	s.id, s.choices = []byte(ch.ID), s.choices[:0]
	for _, c := range ch.Choices {
		d := c.Delta
		out := chunkChoice{content: []byte(d.Content), reasoning: []byte(d.ReasoningContent), toolCalls: present(d.ToolCalls)}
		if c.FinishReason != nil {
			out.finish, out.finished = []byte(*c.FinishReason), true
		}
		s.choices = append(s.choices, out)
	}
	return true
}

// answerChoice is what the relay reads of a non-streaming answer's choice.
type answerChoice struct {
	content, reasoning []byte
	toolCalls          bool
	finish             []byte
}

// answerScan is what the relay reads of a non-streaming answer.
type answerScan struct {
	scanner
	choices      []answerChoice
	usage        bool   // usage present and not null
	webToolSteps []byte // as sent, null included
}

// read takes what the relay needs from an answer; false when
// encoding/json would not have decoded it.
func (s *answerScan) read(body []byte) bool {
	s.reset(body)
	s.choices, s.usage, s.webToolSteps = s.choices[:0], false, nil
	again, seen := false, false
	if s.object() {
		for n := 0; s.next(n, '}'); n++ {
			k, kind := s.key()
			switch {
			case s.is(k, kind, "choices"):
				again, seen = seen, true
				s.readChoices()
			case s.is(k, kind, "usage"):
				s.usage = !s.null()
			case s.is(k, kind, "web_tool_steps"):
				s.webToolSteps = s.raw()
			default:
				s.value()
			}
		}
	}
	s.end()
	if s.bad || s.mistyped {
		return false
	}
	if again {
		return s.decode(body) == nil
	}
	return true
}

func (s *answerScan) readChoices() {
	elements, null := s.array()
	if elements || null {
		s.choices = s.choices[:0]
	}
	if !elements {
		return
	}
	for n := 0; s.next(n, ']'); n++ {
		s.choices = append(s.choices, answerChoice{})
		ch := &s.choices[n]
		if !s.object() {
			continue
		}
		for m := 0; s.next(m, '}'); m++ {
			k, kind := s.key()
			switch {
			case s.is(k, kind, "message"):
				s.readMessage(ch)
			case s.is(k, kind, "finish_reason"):
				if t, ok := s.string(); ok {
					ch.finish = t
				}
			default:
				s.value()
			}
		}
	}
}

func (s *answerScan) readMessage(ch *answerChoice) {
	if !s.object() {
		return
	}
	for n := 0; s.next(n, '}'); n++ {
		k, kind := s.key()
		switch {
		case s.is(k, kind, "content"):
			ch.content, _ = s.string()
		case s.is(k, kind, "reasoning_content"):
			ch.reasoning, _ = s.string()
		case s.is(k, kind, "tool_calls"):
			ch.toolCalls = !s.null()
		default:
			s.value()
		}
	}
}

// completionBody is an answer as encoding/json decodes it: for the answer
// that repeats its choices (see streamChunk), and for saying what is wrong
// with one the scanner turned down.
type completionBody struct {
	Choices []struct {
		Message struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage        json.RawMessage `json:"usage"`
	WebToolSteps json.RawMessage `json:"web_tool_steps"`
}

func (s *answerScan) decode(body []byte) error {
	var cb completionBody
	if err := json.Unmarshal(body, &cb); err != nil {
		return err
	}
	s.choices = s.choices[:0]
	for _, c := range cb.Choices {
		m := c.Message
		out := answerChoice{toolCalls: present(m.ToolCalls), finish: []byte(c.FinishReason)}
		if m.Content != nil {
			out.content = []byte(*m.Content)
		}
		if m.ReasoningContent != nil {
			out.reasoning = []byte(*m.ReasoningContent)
		}
		s.choices = append(s.choices, out)
	}
	s.usage, s.webToolSteps = present(cb.Usage), cb.WebToolSteps
	return nil
}
