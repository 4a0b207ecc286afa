package relay

import "bytes"

// Route reads the top-level "model" and "stream" members of a JSON
// request body without decoding it, so that a request can be refused
// before it is parsed. It answers ok only when the model is certain: the
// body is one object, no member name is escaped (it might spell "model"),
// and "model" appears once, as a non-empty string without escapes. The
// other members' values are skimmed, not checked: strings, most of a
// request's bytes, are passed over by their quotes alone. So a body that
// is not JSON inside another member may be refused for its model's queue,
// where the parse would have answered 400; its retry learns that instead.
func Route(body []byte) (model []byte, stream, ok bool) {
	var s scanner
	s.reset(body)
	if s.peek() != '{' {
		return nil, false, false
	}
	s.open()
	for n := 0; s.next(n, '}'); n++ {
		k, kind := s.key()
		if kind == strEscaped {
			return nil, false, false
		}
		switch {
		case bytes.Equal(k, []byte("model")):
			if model != nil || s.peek() != '"' {
				return nil, false, false
			}
			m, kind := s.str()
			if kind == strEscaped || len(m) == 0 {
				return nil, false, false
			}
			model = m
		case bytes.Equal(k, []byte("stream")):
			stream = s.peek() == 't'
			s.skim()
		default:
			s.skim()
		}
	}
	if s.end(); s.bad || model == nil {
		return nil, false, false
	}
	return model, stream, true
}

// skim moves past the value at s.i to the comma or closing bracket after
// it, knowing only brackets and quotes.
func (s *scanner) skim() {
	s.peek()
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

// skimString moves past the string at s.i to the quote that closes it: the
// first not escaped by an odd run of backslashes.
func (s *scanner) skimString() {
	for j := s.i + 1; ; {
		k := bytes.IndexByte(s.b[j:], '"')
		if k < 0 {
			s.fail()
			return
		}
		q := j + k
		back := 0
		for back < q-j && s.b[q-1-back] == '\\' {
			back++
		}
		if back%2 == 0 {
			s.i = q + 1
			return
		}
		j = q + 1
	}
}
