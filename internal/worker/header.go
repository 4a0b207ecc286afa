package worker

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
)

// decodeHeader reads the header the gateway sends ahead of a request's
// body. Nearly every header is a flat object of plain strings and
// booleans, read here in one pass: encoding/json's reflection, and the
// stack growth it causes in a request's new goroutine, were a tenth of
// the worker's CPU per request. Anything else (parameters, escapes,
// nulls, a member this reader does not know, malformed JSON) is left to
// encoding/json, which decides.
func decodeHeader(b []byte) (api.LinkRequest, error) {
	var req api.LinkRequest
	if readHeader(b, &req) {
		return req, nil
	}
	// A variable of its own, so that only this path allocates one.
	var decoded api.LinkRequest
	err := json.Unmarshal(b, &decoded)
	return decoded, err
}

// readHeader is decodeHeader's one pass; ok is false when encoding/json
// must decide.
func readHeader(b []byte, req *api.LinkRequest) (ok bool) {
	b = skipSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return false
	}
	b = skipSpace(b[1:])
	if len(b) > 0 && b[0] == '}' {
		return len(skipSpace(b[1:])) == 0
	}
	for {
		var key []byte
		if key, b, ok = plainString(b); !ok {
			return false
		}
		b = skipSpace(b)
		if len(b) == 0 || b[0] != ':' {
			return false
		}
		b = skipSpace(b[1:])
		var v []byte
		switch string(key) {
		case "request_id":
			v, b, ok = plainString(b)
			req.RequestID = string(v)
		case "kind":
			v, b, ok = plainString(b)
			req.Kind = kind(v)
		case "model":
			v, b, ok = plainString(b)
			req.Model = string(v)
		case "content_filter":
			v, b, ok = plainString(b)
			req.ContentFilter = string(v)
		case "stream":
			req.Stream, b, ok = boolean(b)
		case "e2e":
			req.E2E, b, ok = boolean(b)
		default:
			return false
		}
		if !ok {
			return false
		}
		b = skipSpace(b)
		if len(b) == 0 {
			return false
		}
		switch b[0] {
		case ',':
			b = skipSpace(b[1:])
		case '}':
			return len(skipSpace(b[1:])) == 0
		default:
			return false
		}
	}
}

// plainString reads the JSON string that starts b, if it holds no escape,
// control character or invalid UTF-8, and returns its text and what
// follows it.
func plainString(b []byte) (s, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, b, false
	}
	ascii := true
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			if !ascii && !utf8.Valid(b[1:i]) {
				return nil, b, false
			}
			return b[1:i], b[i+1:], true
		case c == '\\' || c < 0x20:
			return nil, b, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, b, false
}

// kind is a request kind as a string, the common ones without copying.
func kind(b []byte) string {
	for _, k := range [...]string{api.KindChat, api.KindEmbeddings, api.KindCompletion} {
		if string(b) == k {
			return k
		}
	}
	return string(b)
}

// boolean reads the JSON true or false that starts b.
func boolean(b []byte) (v bool, rest []byte, ok bool) {
	switch {
	case len(b) >= 4 && string(b[:4]) == "true":
		return true, b[4:], true
	case len(b) >= 5 && string(b[:5]) == "false":
		return false, b[5:], true
	}
	return false, b, false
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}
