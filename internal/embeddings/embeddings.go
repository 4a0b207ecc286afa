// Package embeddings checks POST /v1/embeddings requests. The body goes to
// the worker as it came; only what every engine needs is checked here.
package embeddings

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonbody"
	"github.com/svc-dev/svc/internal/jsonraw"
)

// MaxInputs is the most inputs one request may embed.
const MaxInputs = 2048

// Parse checks a request: model, and input as a string, strings, a token
// array or token arrays. Other fields are forwarded as they are. It
// returns the model asked for and the request to send on: body, or body
// written anew when dimensions came as a whole number in another form
// (8.0), which engines' integer fields refuse.
func Parse(body []byte) (model string, out []byte, err error) {
	// The members checked here are named for the case check: sent in
	// another case, an engine could obey them where this did not look.
	req, err := jsonbody.Members(body, "model", "input", "user", "dimensions", "encoding_format")
	if err != nil {
		return "", nil, err
	}
	if req == nil {
		return "", nil, api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "expected an object"})
	}
	var v api.Validator
	switch raw := req["model"]; {
	case !jsonbody.Present(raw):
		v.Add("model", api.FieldMissing, "required")
	default:
		if model, _ = jsonraw.DecodeString(raw); model == "" {
			v.Add("model", api.FieldWrongType, "expected a model id")
		}
	}
	checkInput(&v, req["input"])
	rewritten := checkOutput(&v, req)
	if raw := req["user"]; jsonbody.Present(raw) && jsonraw.KindOf(raw) != jsonraw.String {
		// Engines type it a string and would refuse the request in their
		// own words, once it had waited for a slot.
		v.Add("user", api.FieldWrongType, "expected a string")
	}
	if err := v.Err(); err != nil {
		return model, nil, err
	}
	if !rewritten {
		return model, body, nil
	}
	if out, err = json.Marshal(req); err != nil {
		return "", nil, err
	}
	return model, out, nil
}

// checkOutput checks the fields that shape the vectors, encoding_format
// and dimensions; rewritten says dimensions must be written anew.
func checkOutput(v *api.Validator, req map[string]json.RawMessage) (rewritten bool) {
	if raw := req["encoding_format"]; jsonbody.Present(raw) {
		var f string
		if json.Unmarshal(raw, &f) != nil || (f != "float" && f != "base64") {
			v.Add("encoding_format", api.FieldEnum, "one of float, base64")
		}
	}
	if jsonbody.Present(req["dimensions"]) {
		_, _, rewritten = jsonbody.Whole(v, req, "dimensions", 1, math.MaxInt32, "a whole number of at least 1")
	}
	return rewritten
}

func checkInput(v *api.Validator, raw json.RawMessage) {
	if !jsonbody.Present(raw) {
		v.Add("input", api.FieldMissing, "required")
		return
	}
	var items []json.RawMessage
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		if s, _ := jsonraw.DecodeString(raw); s == "" {
			v.Add("input", api.FieldInvalid, "must not be empty")
		}
		return
	case jsonraw.Array:
		items, _ = jsonraw.CheckedArray(raw)
	default:
		v.Add("input", api.FieldWrongType, "expected a string, an array of strings, or token arrays")
		return
	}
	if len(items) == 0 || len(items) > MaxInputs {
		v.Add("input", api.FieldOutOfRange, "must hold 1 to %d items", MaxInputs)
		return
	}
	// The input is one of three forms, and every item of it the same:
	// strings, the token ids of one text, or token id arrays.
	const (
		texts = iota + 1
		tokens
		tokenArrays
	)
	form := 0
	field := func(i int) string { return "input." + strconv.Itoa(i) }
	for i, it := range items {
		var tok int64
		var toks []int64
		is := 0
		switch kind := jsonraw.KindOf(it); {
		case kind == jsonraw.String || kind == jsonraw.Null:
			// null reads as an empty string, as encoding/json reads it.
			is = texts
			if s, _ := jsonraw.DecodeString(it); s == "" {
				v.Add(field(i), api.FieldInvalid, "must not be empty")
			}
		case json.Unmarshal(it, &tok) == nil:
			is = tokens
			if tok < 0 {
				v.Add(field(i), api.FieldOutOfRange, "token ids are 0 or more")
			}
		case json.Unmarshal(it, &toks) == nil:
			is = tokenArrays
			if len(toks) == 0 {
				v.Add(field(i), api.FieldInvalid, "must not be empty")
			}
			if slices.ContainsFunc(toks, func(t int64) bool { return t < 0 }) {
				v.Add(field(i), api.FieldOutOfRange, "token ids are 0 or more")
			}
		default:
			v.Add(field(i), api.FieldWrongType, "expected a string or token ids")
			continue
		}
		switch {
		case form == 0:
			form = is
		case is != form:
			v.Add(field(i), api.FieldWrongType, "every item of input is of one kind: strings, token ids, or arrays of token ids")
		}
	}
}
