// Package images checks POST /v1/images/generations requests and
// completes their answers. Images come back base64-encoded in the reply
// (response_format b64_json): the gateway keeps no storage to serve the
// URLs of response_format url from, so that is refused.
package images

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonbody"
)

const (
	// MaxImages is the most images one request may ask for.
	MaxImages = 10
	// MaxPrompt is the longest prompt, in characters: gpt-image-1's.
	MaxPrompt = 32000
	// MinSide and MaxSide bound each side of a requested size, in pixels.
	MinSide = 64
	MaxSide = 4096
)

// CodeURLNotSupported is the code of the 400 for response_format url.
const CodeURLNotSupported = "response_format_not_supported"

// Request is a checked image generation request.
type Request struct {
	Model  string
	Prompt string
	// N is how many images to make, 1 by default.
	N int
	// Size is "auto" (the default) or WIDTHxHEIGHT; Width and Height are
	// 0 for auto.
	Size          string
	Width, Height int
	// Body is the request for the worker: as the client sent it, with n
	// and response_format b64_json set, so that every engine makes the
	// number asked and answers in the one form the gateway relays.
	Body []byte
}

// Parse checks a request. Malformed JSON and response_format url are a
// 400; missing or mistyped fields a 422 naming each. Other fields
// (quality, style, user, and engine extensions such as seed or
// negative_prompt) are forwarded as they are.
func Parse(body []byte) (*Request, error) {
	// The members checked here are named for the case check: sent in
	// another case, an engine could obey them where this did not look.
	raw, err := jsonbody.Members(body, "model", "prompt", "n", "size", "quality", "style", "response_format", "stream", "user")
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "expected an object"})
	}
	r := &Request{N: 1, Size: "auto"}
	var v api.Validator
	switch m := raw["model"]; {
	case !jsonbody.Present(m):
		v.Add("model", api.FieldMissing, "required")
	case json.Unmarshal(m, &r.Model) != nil || r.Model == "":
		v.Add("model", api.FieldWrongType, "expected a model id")
	}
	switch p := raw["prompt"]; {
	case !jsonbody.Present(p):
		v.Add("prompt", api.FieldMissing, "required: a description of the image")
	case json.Unmarshal(p, &r.Prompt) != nil:
		v.Add("prompt", api.FieldWrongType, "expected a string")
	case strings.TrimSpace(r.Prompt) == "":
		v.Add("prompt", api.FieldInvalid, "must not be empty")
	case utf8.RuneCountInString(r.Prompt) > MaxPrompt:
		v.Add("prompt", api.FieldTooLong, "must be at most %d characters", MaxPrompt)
	}
	if jsonbody.Present(raw["n"]) {
		n, _, _ := jsonbody.Whole(&v, raw, "n", 1, MaxImages, "a whole number from 1 to "+strconv.Itoa(MaxImages))
		r.N = int(n)
	}
	if s := raw["size"]; jsonbody.Present(s) {
		if json.Unmarshal(s, &r.Size) != nil {
			v.Add("size", api.FieldWrongType, "expected a string such as 1024x1024, or auto")
		} else if !r.readSize() {
			v.Add("size", api.FieldInvalid, "expected WIDTHxHEIGHT with each side %d to %d pixels (1024x1024), or auto", MinSide, MaxSide)
		}
	}
	for _, f := range []string{"quality", "style", "user"} {
		var s string
		if x := raw[f]; jsonbody.Present(x) && json.Unmarshal(x, &s) != nil {
			v.Add(f, api.FieldWrongType, "expected a string")
		}
	}
	// Engines answer with whole images; streamed partial images are not
	// served, and a client that asked for them must not wait for events
	// that never come.
	var stream bool
	if st := raw["stream"]; jsonbody.Present(st) {
		if json.Unmarshal(st, &stream) != nil {
			v.Add("stream", api.FieldWrongType, "expected a boolean")
		} else if stream {
			v.Add("stream", api.FieldNotSupported, "streamed image generation is not served; leave stream out or false")
		}
	}
	url := false
	if f := raw["response_format"]; jsonbody.Present(f) {
		var s string
		switch {
		case json.Unmarshal(f, &s) != nil:
			v.Add("response_format", api.FieldWrongType, "expected a string")
		case s == "url":
			url = true
		case s != "b64_json":
			v.Add("response_format", api.FieldEnum, "one of b64_json, url")
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if url {
		return nil, &api.Error{Kind: api.KindInvalidRequest, Code: CodeURLNotSupported, Param: "response_format",
			Message: "response_format url is not served: the gateway keeps no image storage to serve URLs from; ask for b64_json, the default"}
	}
	raw["n"] = json.RawMessage(strconv.Itoa(r.N))
	raw["response_format"] = json.RawMessage(`"b64_json"`)
	out, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	r.Body = out
	return r, nil
}

// readSize reads r.Size into Width and Height, reporting whether it is
// auto or a size within bounds.
func (r *Request) readSize() bool {
	if r.Size == "auto" {
		return true
	}
	w, h, ok := strings.Cut(r.Size, "x")
	if !ok {
		return false
	}
	var err error
	if r.Width, err = strconv.Atoi(w); err != nil || r.Width < MinSide || r.Width > MaxSide {
		return false
	}
	if r.Height, err = strconv.Atoi(h); err != nil || r.Height < MinSide || r.Height > MaxSide {
		return false
	}
	return true
}

// Reply checks a worker's answer and completes it with svc: the images
// as b64_json, the answer's other members (created, usage) kept. It
// returns the reply and the number of images in it.
func Reply(answer []byte, svc json.RawMessage) ([]byte, int, error) {
	var a struct {
		Data []struct {
			B64JSON json.RawMessage `json:"b64_json"`
		} `json:"data"`
	}
	trimmed := bytes.TrimSpace(answer)
	if err := json.Unmarshal(trimmed, &a); err != nil {
		return nil, 0, err
	}
	if len(trimmed) < 2 || trimmed[0] != '{' || a.Data == nil {
		return nil, 0, errors.New("no data array of images")
	}
	for i, d := range a.Data {
		var s string
		if json.Unmarshal(d.B64JSON, &s) != nil || s == "" {
			return nil, 0, fmt.Errorf("image %d has no b64_json", i)
		}
	}
	out := make([]byte, 0, len(trimmed)+len(svc)+8)
	out = append(out, bytes.TrimSpace(trimmed[:len(trimmed)-1])...)
	if len(out) > 1 {
		out = append(out, ',')
	}
	out = append(out, `"svc":`...)
	out = append(out, svc...)
	return append(out, '}'), len(a.Data), nil
}
