// Package termsafe escapes text from elsewhere (a worker, the gateway,
// another user) before a terminal shows it, so that it cannot drive the
// terminal: clear the screen, retitle the window, recolour what follows,
// write over a line, or turn itself around with a bidi override.
//
// Such characters are written as strconv.Quote writes them, without the
// quotes: \x1b, \r, \u009b, \u202e; a byte that is not UTF-8 as \xff.
// The escapes are printable ASCII, so a table measures escaped text as it
// shows, and they say what was sent, as U+FFFD would not. A backslash is
// left alone: the text is read, not parsed back, and doubling every one
// would garble paths and patterns. All else (CJK, emoji and their
// joiners) is kept.
package termsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line escapes s for one line: a table cell, a label's value, a title.
// Tabs and newlines are escaped too, as they would break the layout.
func Line(s string) string { return escape(s, false) }

// Text escapes s for a message that may run over several lines, such as
// an error: it keeps newlines and tabs, which cannot write over what is
// already on the screen, and escapes the rest as Line does.
func Text(s string) string { return escape(s, true) }

func escape(s string, multiline bool) string {
	i := firstUnsafe(s, multiline)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			// A lone byte such as 0x9b is CSI to a terminal in an 8-bit
			// encoding.
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafe(r, multiline):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// firstUnsafe is the index of the first byte of s that needs escaping, or
// -1: most text needs none, and is returned without a copy.
func firstUnsafe(s string, multiline bool) int {
	for i := 0; i < len(s); {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafe(r, multiline) {
			return i
		}
		i += n
	}
	return -1
}

// unsafe says whether r must be escaped: the C0 and C1 controls and DEL,
// which terminals act on; the bidirectional embeddings, overrides and
// isolates, which can show a name as another; and the line and paragraph
// separators, which some terminals and viewers break lines at.
func unsafe(r rune, multiline bool) bool {
	switch {
	case multiline && (r == '\n' || r == '\t'):
		return false
	case unicode.IsControl(r):
		return true
	case r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
		return true
	case r == '\u2028', r == '\u2029':
		return true
	}
	return false
}
