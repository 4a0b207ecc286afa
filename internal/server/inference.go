package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strconv"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
)

// chatCompletions is POST /v1/chat/completions: validate, fit the request
// to the model, relay.
func (s *Server) chatCompletions(c *call) error {
	if sealed(c) {
		return s.privateInference(c, api.KindChat)
	}
	req, err := chat.Parse(c.ctx.PostBody(), chat.Options{AllowRemoteImages: c.org.Settings.AllowRemoteImageURLs})
	if err != nil {
		return err
	}
	r := s.newRelay(c, api.KindChat, req.Model, req.Stream, nil)
	r.chat = req
	r.model = s.fleet.Model(c.principal.OrgID, req.Model)
	if err := req.Prepare(r.model); err != nil {
		r.done(err)
		return err
	}
	r.body = req.Body
	r.need.Affinity = affinity(req.Model, req.Messages)
	if c.principal.ContentFilter || c.org.Settings.ContentFiltering {
		r.filterWith(cmp.Or(c.org.Settings.ModerationModel, api.DefaultModerationModel))
	}
	if req.Stream {
		return r.startStream(c)
	}
	return r.unary(c)
}

// embeddings is POST /v1/embeddings.
func (s *Server) embeddings(c *call) error {
	if sealed(c) {
		return s.privateInference(c, api.KindEmbeddings)
	}
	body := append([]byte(nil), c.ctx.PostBody()...)
	model, err := checkEmbeddings(body)
	if err != nil {
		return err
	}
	r := s.newRelay(c, api.KindEmbeddings, model, false, nil)
	r.model = s.fleet.Model(c.principal.OrgID, model)
	r.body = body
	return r.unary(c)
}

// checkEmbeddings validates an embeddings request: model, and input as a
// string, strings, a token array or token arrays. Other fields are
// forwarded as they are.
func checkEmbeddings(body []byte) (string, error) {
	var req map[string]json.RawMessage
	if err := decodeLenient(body, &req); err != nil {
		return "", err
	}
	if req == nil {
		return "", api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "expected an object"})
	}
	var v api.Validator
	var model string
	switch raw := req["model"]; {
	case !present(raw):
		v.Add("model", api.FieldMissing, "required")
	case json.Unmarshal(raw, &model) != nil || model == "":
		v.Add("model", api.FieldWrongType, "expected a model id")
	}
	checkEmbeddingInput(&v, req["input"])
	if raw := req["encoding_format"]; present(raw) {
		var f string
		if json.Unmarshal(raw, &f) != nil || (f != "float" && f != "base64") {
			v.Add("encoding_format", api.FieldEnum, "one of float, base64")
		}
	}
	if raw := req["dimensions"]; present(raw) {
		var n int
		if json.Unmarshal(raw, &n) != nil || n < 1 {
			v.Add("dimensions", api.FieldOutOfRange, "must be a whole number of at least 1")
		}
	}
	return model, v.Err()
}

const maxEmbeddingInputs = 2048

func checkEmbeddingInput(v *api.Validator, raw json.RawMessage) {
	if !present(raw) {
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
	if len(items) == 0 || len(items) > maxEmbeddingInputs {
		v.Add("input", api.FieldOutOfRange, "must hold 1 to %d items", maxEmbeddingInputs)
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

// present reports whether a field was sent with a value other than null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}
