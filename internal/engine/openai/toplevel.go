package openai

import (
	"bytes"

	"github.com/svc-dev/svc/internal/jsontext"
)

// topMembers calls f with each member of the JSON object b, key without
// its quotes and value as raw text, until f returns false. b must be valid
// JSON (json.Valid); ok is false when it is not an object or a key holds
// an escape, which callers leave to encoding/json. It exists so the common
// completion, which needs no change, is read in one pass without building
// a map.
func topMembers(b []byte, f func(key, val []byte) bool) (ok bool) {
	b = skipSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return false
	}
	b = skipSpace(b[1:])
	for len(b) > 0 && b[0] != '}' {
		if b[0] == ',' {
			b = skipSpace(b[1:])
		}
		end := stringEnd(b)
		if end < 0 {
			return false
		}
		key := b[1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		b = skipSpace(b[end:])
		if len(b) == 0 || b[0] != ':' {
			return false
		}
		b = skipSpace(b[1:])
		n := valueEnd(b)
		if n <= 0 {
			return false
		}
		if !f(key, b[:n]) {
			return true
		}
		b = skipSpace(b[n:])
	}
	return len(b) > 0
}

// stringEnd is the end of the string that starts b, or -1.
func stringEnd(b []byte) int {
	if len(b) == 0 || b[0] != '"' {
		return -1
	}
	return jsontext.StringEnd(b, 0)
}

// valueEnd is the length of the JSON value that starts b, which must be
// valid, or -1.
func valueEnd(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	switch b[0] {
	case '"':
		return stringEnd(b)
	case '{', '[':
		depth := 0
		for i := 0; i < len(b); i++ {
			switch b[i] {
			case '"':
				n := stringEnd(b[i:])
				if n < 0 {
					return -1
				}
				i += n - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	for i, c := range b {
		switch c {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return len(b)
}
