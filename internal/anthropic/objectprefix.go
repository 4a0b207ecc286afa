package anthropic

// objectPrefix follows a tool call's arguments as they stream in, byte by
// byte, and tells how much of each piece keeps them the beginning of one
// JSON object. Anthropic's input_json_delta pieces must add up to the
// call's input object: the SDKs parse what they have so far after every
// piece, and throw on text that can no longer be JSON, losing the whole
// message. A model can emit anything as arguments, so a stream passes on
// the part that is still an object's beginning and drops the rest, where
// a whole reply gives {} for arguments that are not an object.
//
// The check is JSON's grammar, not its meaning: numbers are checked for
// their shape as RFC 8259 gives it, strings for their escapes and control
// characters; the zero value expects the object's opening brace.
type objectPrefix struct {
	stack []byte // the open containers, '{' or '['
	state prefixState
	lit   string // what is left of a literal (true, false, null) being read
	hex   int    // the hex digits of a \u escape read so far
	inKey bool   // the string being read is a key
	bad   bool
}

type prefixState uint8

const (
	psStart        prefixState = iota // before the object
	psValue                           // a value is due (after ':' or ',' in an array, or '[')
	psValueOrEnd                      // after '[': a value or ']'
	psKey                             // a key is due (after ',' in an object)
	psKeyOrEnd                        // after '{': a key or '}'
	psColon                           // after a key
	psAfter                           // after a value: ',' or the container's end
	psString                          // in a string value
	psKeyString                       // in a key
	psEscape                          // after a backslash
	psUnicode                         // in a \u escape
	psLiteral                         // in true, false or null
	psNumSign                         // after a '-'
	psNumZero                         // after a leading 0
	psNumInt                          // in the integer part
	psNumDot                          // after '.'
	psNumFrac                         // in the fraction
	psNumExp                          // after 'e'
	psNumExpSign                      // after the exponent's sign
	psNumExpDigits                    // in the exponent
	psDone                            // the object closed: only space may follow
)

// take returns how many bytes of p keep what was taken the beginning of a
// JSON object: all of p, or up to the first byte that cannot be. Once one
// could not be, it takes nothing more.
func (o *objectPrefix) take(p string) int {
	if o.bad {
		return 0
	}
	for i := 0; i < len(p); i++ {
		if !o.step(p[i]) {
			o.bad = true
			return i
		}
	}
	return len(p)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// step takes one byte; false when it cannot follow what came before.
func (o *objectPrefix) step(c byte) bool {
	switch o.state {
	case psStart:
		if isSpace(c) {
			return true
		}
		if c != '{' {
			return false
		}
		o.stack = append(o.stack, '{')
		o.state = psKeyOrEnd
		return true
	case psDone:
		return isSpace(c)
	case psString, psKeyString:
		switch {
		case c == '"':
			if o.state == psKeyString {
				o.state = psColon
			} else {
				o.state = psAfter
			}
		case c == '\\':
			o.inKey = o.state == psKeyString
			o.state = psEscape
		case c < 0x20:
			return false
		}
		return true
	case psEscape:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			o.state = o.stringState()
		case 'u':
			o.state, o.hex = psUnicode, 0
		default:
			return false
		}
		return true
	case psUnicode:
		if !isHex(c) {
			return false
		}
		if o.hex++; o.hex == 4 {
			o.state = o.stringState()
		}
		return true
	case psLiteral:
		if c != o.lit[0] {
			return false
		}
		if o.lit = o.lit[1:]; o.lit == "" {
			o.state = psAfter
		}
		return true
	case psColon:
		if isSpace(c) {
			return true
		}
		if c != ':' {
			return false
		}
		o.state = psValue
		return true
	case psKey, psKeyOrEnd:
		switch {
		case isSpace(c):
			return true
		case c == '"':
			o.state = psKeyString
			return true
		case c == '}' && o.state == psKeyOrEnd:
			return o.end()
		}
		return false
	case psValue, psValueOrEnd:
		if isSpace(c) {
			return true
		}
		if c == ']' && o.state == psValueOrEnd {
			return o.end()
		}
		return o.value(c)
	case psAfter:
		return o.after(c)
	}
	return o.number(c)
}

// stringState is the state an escape returns to.
func (o *objectPrefix) stringState() prefixState {
	if o.inKey {
		return psKeyString
	}
	return psString
}

// value starts a value with its first byte.
func (o *objectPrefix) value(c byte) bool {
	switch {
	case c == '{':
		o.stack = append(o.stack, '{')
		o.state = psKeyOrEnd
	case c == '[':
		o.stack = append(o.stack, '[')
		o.state = psValueOrEnd
	case c == '"':
		o.state = psString
	case c == 't':
		o.state, o.lit = psLiteral, "rue"
	case c == 'f':
		o.state, o.lit = psLiteral, "alse"
	case c == 'n':
		o.state, o.lit = psLiteral, "ull"
	case c == '-':
		o.state = psNumSign
	default:
		return o.integer(c)
	}
	return true
}

// integer starts a number's integer part with c, a digit.
func (o *objectPrefix) integer(c byte) bool {
	switch {
	case c == '0':
		o.state = psNumZero
	case isDigit(c):
		o.state = psNumInt
	default:
		return false
	}
	return true
}

// after takes the byte after a value: space, a comma, or its container's
// end.
func (o *objectPrefix) after(c byte) bool {
	top := o.stack[len(o.stack)-1]
	switch {
	case isSpace(c):
		return true
	case c == ',':
		if top == '{' {
			o.state = psKey
		} else {
			o.state = psValue
		}
		return true
	case c == '}' && top == '{', c == ']' && top == '[':
		return o.end()
	}
	return false
}

// end closes the innermost container.
func (o *objectPrefix) end() bool {
	o.stack = o.stack[:len(o.stack)-1]
	if len(o.stack) == 0 {
		o.state = psDone
	} else {
		o.state = psAfter
	}
	return true
}

// number takes a byte in a number: one that goes on with it, or the first
// after it, which a complete number lets follow.
func (o *objectPrefix) number(c byte) bool {
	switch o.state {
	case psNumSign:
		return o.integer(c)
	case psNumZero, psNumInt:
		switch {
		case isDigit(c) && o.state == psNumInt:
			return true
		case c == '.':
			o.state = psNumDot
			return true
		case c == 'e' || c == 'E':
			o.state = psNumExp
			return true
		}
	case psNumDot:
		if !isDigit(c) {
			return false
		}
		o.state = psNumFrac
		return true
	case psNumFrac:
		switch {
		case isDigit(c):
			return true
		case c == 'e' || c == 'E':
			o.state = psNumExp
			return true
		}
	case psNumExp:
		switch {
		case c == '+' || c == '-':
			o.state = psNumExpSign
		case isDigit(c):
			o.state = psNumExpDigits
		default:
			return false
		}
		return true
	case psNumExpSign:
		if !isDigit(c) {
			return false
		}
		o.state = psNumExpDigits
		return true
	case psNumExpDigits:
		if isDigit(c) {
			return true
		}
	}
	// The number is complete: c comes after it.
	o.state = psAfter
	return o.after(c)
}
