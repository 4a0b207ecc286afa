package relay

import (
	"bytes"

	"github.com/svc-dev/svc/internal/jsontext"
)

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
	var s jsontext.Scanner
	s.Reset(body)
	if s.Peek() != '{' {
		return nil, false, false
	}
	s.Open()
	for n := 0; s.Next(n, '}'); n++ {
		k, kind := s.Key()
		if kind == jsontext.Escaped {
			return nil, false, false
		}
		switch {
		case bytes.Equal(k, []byte("model")):
			if model != nil || s.Peek() != '"' {
				return nil, false, false
			}
			m, kind := s.Str()
			if kind == jsontext.Escaped || len(m) == 0 {
				return nil, false, false
			}
			model = m
		case bytes.Equal(k, []byte("stream")):
			stream = s.Peek() == 't'
			s.Skim()
		default:
			s.Skim()
		}
	}
	if s.End(); s.Bad() || model == nil {
		return nil, false, false
	}
	return model, stream, true
}
