// Package rerank checks POST /v1/rerank requests, in the shape vLLM,
// llama-server, Jina and Cohere share: a query, the documents to order by
// their relevance to it, and optionally how many of the best to return.
// The body goes to the worker as it came; engine adapters send each engine
// the documents in the form it reads.
package rerank

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonbody"
)

// MaxDocuments is the most documents one request may rank, as Cohere's
// and Jina's APIs allow.
const MaxDocuments = 1000

// Request is what the gateway and the engines read of a rerank request.
type Request struct {
	Model string
	Query string
	// Documents are the texts, in order, whether sent as strings or as
	// {"text": ...} objects.
	Documents []string
	// TopN is how many results to return, best first; 0 returns all.
	TopN int
	// ReturnDocuments puts each document's text in its result; the
	// default is true, as engines do.
	ReturnDocuments bool
	// Body is the request to send on: the body as it came, or written
	// anew when a whole number came in another form (top_n 2.0).
	Body []byte
}

// Parse checks a request and reads it. Malformed JSON is a 400; missing
// or mistyped fields a 422 naming each by its path (documents.3.text).
// Other fields are forwarded as they are.
func Parse(body []byte) (*Request, error) {
	// The members checked here are named for the case check: sent in
	// another case, an engine could obey them where this did not look.
	raw, err := jsonbody.Members(body, "model", "query", "documents", "top_n", "return_documents")
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "expected an object"})
	}
	r := &Request{ReturnDocuments: true}
	var v api.Validator
	switch m := raw["model"]; {
	case !jsonbody.Present(m):
		v.Add("model", api.FieldMissing, "required")
	case json.Unmarshal(m, &r.Model) != nil || r.Model == "":
		v.Add("model", api.FieldWrongType, "expected a model id")
	}
	switch q := raw["query"]; {
	case !jsonbody.Present(q):
		v.Add("query", api.FieldMissing, "required: the text to rank the documents against")
	case json.Unmarshal(q, &r.Query) != nil:
		v.Add("query", api.FieldWrongType, "expected a string")
	case r.Query == "":
		v.Add("query", api.FieldInvalid, "must not be empty")
	}
	r.Documents = documents(&v, raw["documents"])
	rewritten := false
	if jsonbody.Present(raw["top_n"]) {
		n, _, rw := jsonbody.Whole(&v, raw, "top_n", 1, math.MaxInt32, "a whole number of at least 1")
		r.TopN, rewritten = int(n), rw
	}
	if d := raw["return_documents"]; jsonbody.Present(d) {
		if json.Unmarshal(d, &r.ReturnDocuments) != nil {
			v.Add("return_documents", api.FieldWrongType, "expected a boolean")
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	r.Body = body
	if rewritten {
		out, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		r.Body = out
	}
	return r, nil
}

// documents reads the documents: strings, or objects with a text.
func documents(v *api.Validator, raw json.RawMessage) []string {
	if !jsonbody.Present(raw) {
		v.Add("documents", api.FieldMissing, "required: the texts to rank")
		return nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		v.Add("documents", api.FieldWrongType, "expected an array of strings or of objects with a text")
		return nil
	}
	if len(items) == 0 || len(items) > MaxDocuments {
		v.Add("documents", api.FieldOutOfRange, "must hold 1 to %d documents", MaxDocuments)
		return nil
	}
	out := make([]string, len(items))
	for i, it := range items {
		field := "documents." + strconv.Itoa(i)
		if jsonbody.Present(it) && json.Unmarshal(it, &out[i]) == nil {
			continue
		}
		var obj struct {
			Text *json.RawMessage `json:"text"`
		}
		switch {
		case !jsonbody.Present(it) || it[0] != '{' || json.Unmarshal(it, &obj) != nil:
			v.Add(field, api.FieldWrongType, "expected a string or an object with a text")
		case obj.Text == nil || !jsonbody.Present(*obj.Text):
			v.Add(field+".text", api.FieldMissing, "required")
		case json.Unmarshal(*obj.Text, &out[i]) != nil:
			v.Add(field+".text", api.FieldWrongType, "expected a string")
		}
	}
	return out
}
