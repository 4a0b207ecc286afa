package embeddings

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonbody"
)

// FuzzParseAsDecoded holds Parse to referenceParse, which reads the body
// with encoding/json at every level: the same model, and the same
// failures, field by field.
func FuzzParseAsDecoded(f *testing.F) {
	for _, s := range []string{
		`{"model":"e5","input":"x"}`, `{"model":"e5","input":["a",null,"",1,1.5,[1],[],[1.5],{}]}`,
		`{"model":"e\u0035","input":"\u00e9","encoding_format":"base64","dimensions":3}`,
		`{"model":5,"input":null,"encoding_format":1,"dimensions":1.5}`, `{"model":"","input":[]}`,
		`{"model":"a","model":"b","input":"x"} `, `[1]`, `null`, `{`, ``, "{\"model\":\"\xff\",\"input\":\"x\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		model, _, err := Parse(body)
		wantModel, wantErr := referenceParse(body)
		if model != wantModel || (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: Parse %q, %v; encoding/json %q, %v", body, model, err, wantModel, wantErr)
		}
		if err == nil {
			return
		}
		var got, want *api.Error
		if !errors.As(err, &got) || !errors.As(wantErr, &want) || got.HTTPStatus() != want.HTTPStatus() || !reflect.DeepEqual(got.Fields, want.Fields) {
			t.Fatalf("%q: Parse %v, encoding/json %v", body, err, wantErr)
		}
	})
}

// BenchmarkParse is a batch of 256 texts of 225 bytes.
func BenchmarkParse(b *testing.B) {
	item := `"` + strings.Repeat("The quick brown fox jumps over the lazy dog. ", 5) + `"`
	body := []byte(`{"model":"m","input":[` + strings.Repeat(item+",", 255) + item + `]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}

func referenceParse(body []byte) (string, error) {
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
	referenceInput(&v, req["input"])
	checkOutput(&v, req)
	return model, v.Err()
}

func referenceInput(v *api.Validator, raw json.RawMessage) {
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
	first := ""
	for i, it := range items {
		field := "input." + strconv.Itoa(i)
		var str string
		var tok int64
		var toks []int64
		kind := ""
		switch {
		case json.Unmarshal(it, &str) == nil:
			kind = "text"
			if str == "" {
				v.Add(field, api.FieldInvalid, "must not be empty")
			}
		case json.Unmarshal(it, &tok) == nil:
			kind = "token"
			if tok < 0 {
				v.Add(field, api.FieldOutOfRange, "token ids are 0 or more")
			}
		case json.Unmarshal(it, &toks) == nil:
			kind = "tokens"
			if len(toks) == 0 {
				v.Add(field, api.FieldInvalid, "must not be empty")
			}
			for _, t := range toks {
				if t < 0 {
					v.Add(field, api.FieldOutOfRange, "token ids are 0 or more")
					break
				}
			}
		default:
			v.Add(field, api.FieldWrongType, "expected a string or token ids")
			continue
		}
		if first == "" {
			first = kind
		} else if kind != first {
			v.Add(field, api.FieldWrongType, "every item of input is of one kind: strings, token ids, or arrays of token ids")
		}
	}
}
