// Package embeddings checks POST /v1/embeddings requests. The body goes to
// the worker as it came; only what every engine needs is checked here.
package embeddings

import (
	"encoding/json"
	"strconv"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonbody"
)

// MaxInputs is the most inputs one request may embed.
const MaxInputs = 2048

// Parse checks a request: model, and input as a string, strings, a token
// array or token arrays. Other fields are forwarded as they are. It
// returns the model asked for.
func Parse(body []byte) (string, error) {
	var req map[string]json.RawMessage
	if err := jsonbody.Lenient(body, &req); err != nil {
		return "", err
	}
	if req == nil {
		return "", api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "expected an object"})
	}
	var v api.Validator
	var model string
	switch raw := req["model"]; {
	case !jsonbody.Present(raw):
		v.Add("model", api.FieldMissing, "required")
	case json.Unmarshal(raw, &model) != nil || model == "":
		v.Add("model", api.FieldWrongType, "expected a model id")
	}
	checkInput(&v, req["input"])
	if raw := req["encoding_format"]; jsonbody.Present(raw) {
		var f string
		if json.Unmarshal(raw, &f) != nil || (f != "float" && f != "base64") {
			v.Add("encoding_format", api.FieldEnum, "one of float, base64")
		}
	}
	if raw := req["dimensions"]; jsonbody.Present(raw) {
		var n int
		if json.Unmarshal(raw, &n) != nil || n < 1 {
			v.Add("dimensions", api.FieldOutOfRange, "must be a whole number of at least 1")
		}
	}
	return model, v.Err()
}

func checkInput(v *api.Validator, raw json.RawMessage) {
	if !jsonbody.Present(raw) {
		v.Add("input", api.FieldMissing, "required")
		return
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			v.Add("input", api.FieldInvalid, "must not be empty")
		}
		return
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		v.Add("input", api.FieldWrongType, "expected a string, an array of strings, or token arrays")
		return
	}
	if len(items) == 0 || len(items) > MaxInputs {
		v.Add("input", api.FieldOutOfRange, "must hold 1 to %d items", MaxInputs)
		return
	}
	for i, it := range items {
		field := "input." + strconv.Itoa(i)
		var str string
		var tok int64
		var toks []int64
		switch {
		case json.Unmarshal(it, &str) == nil:
			if str == "" {
				v.Add(field, api.FieldInvalid, "must not be empty")
			}
		case json.Unmarshal(it, &tok) == nil:
		case json.Unmarshal(it, &toks) == nil:
			if len(toks) == 0 {
				v.Add(field, api.FieldInvalid, "must not be empty")
			}
		default:
			v.Add(field, api.FieldWrongType, "expected a string or token ids")
		}
	}
}
