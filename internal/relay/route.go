package relay

import "bytes"

// Route reads the top-level "model" and "stream" members of a JSON
// request body without decoding it, so that a request can be refused
// before it is parsed. It answers ok only when the model is certain: the
// body is one JSON object, no member name is escaped (it might spell
// "model"), "model" appears once as a non-empty string without escapes.
// Anything else is for the full parse to judge.
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
			s.value()
		default:
			s.value()
		}
	}
	if s.end(); s.bad || model == nil {
		return nil, false, false
	}
	return model, stream, true
}
