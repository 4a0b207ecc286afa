package embeddings

import (
	"errors"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestParse(t *testing.T) {
	many := "[" + strings.Repeat(`"x",`, MaxInputs) + `"x"]`
	tests := []struct {
		name   string
		body   string
		model  string
		status int
		field  string
	}{
		{"string", `{"model":"e5","input":"hello"}`, "e5", 0, ""},
		{"strings", `{"model":"e5","input":["a","b"],"user":"u-1"}`, "e5", 0, ""},
		{"tokens", `{"model":"e5","input":[1,2,3]}`, "e5", 0, ""},
		{"token arrays", `{"model":"e5","input":[[1,2],[3]],"encoding_format":"base64","dimensions":256}`, "e5", 0, ""},
		{"malformed", `{"model":`, "", 400, ""},
		{"a field under two cases", `{"model":"e5","MODEL":"other","input":"x"}`, "", 400, ""},
		{"empty body", ``, "", 400, ""},
		{"not an object", `[1]`, "", 422, "body"},
		{"null", `null`, "", 422, "body"},
		{"no model", `{"input":"x"}`, "", 422, "model"},
		{"model not a string", `{"model":5,"input":"x"}`, "", 422, "model"},
		{"no input", `{"model":"e5"}`, "", 422, "input"},
		{"empty input", `{"model":"e5","input":""}`, "", 422, "input"},
		{"empty list", `{"model":"e5","input":[]}`, "", 422, "input"},
		{"too many", `{"model":"e5","input":` + many + `}`, "", 422, "input"},
		{"empty item", `{"model":"e5","input":["a",""]}`, "", 422, "input.1"},
		{"empty token array", `{"model":"e5","input":[[1],[]]}`, "", 422, "input.1"},
		{"strings and token ids", `{"model":"e5","input":["a",1]}`, "", 422, "input.1"},
		{"token ids and arrays", `{"model":"e5","input":[1,[2,3]]}`, "", 422, "input.1"},
		{"strings and token arrays", `{"model":"e5","input":["a",[1]]}`, "", 422, "input.1"},
		{"negative token id", `{"model":"e5","input":[-5,2]}`, "", 422, "input.0"},
		{"negative id in an array", `{"model":"e5","input":[[1],[2,-1]]}`, "", 422, "input.1"},
		{"object item", `{"model":"e5","input":[{"a":1}]}`, "", 422, "input.0"},
		{"bad format", `{"model":"e5","input":"x","encoding_format":"int8"}`, "", 422, "encoding_format"},
		{"bad dimensions", `{"model":"e5","input":"x","dimensions":0}`, "", 422, "dimensions"},
		{"dimensions a fraction", `{"model":"e5","input":"x","dimensions":1.5}`, "", 422, "dimensions"},
		{"dimensions a string", `{"model":"e5","input":"x","dimensions":"4"}`, "", 422, "dimensions"},
		{"user a number", `{"model":"e5","input":"x","user":5}`, "", 422, "user"},
		{"user null", `{"model":"e5","input":"x","user":null}`, "e5", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model, out, err := Parse([]byte(tt.body))
			if tt.status == 0 {
				if err != nil || model != tt.model || string(out) != tt.body {
					t.Fatalf("Parse = %q, %s, %v", model, out, err)
				}
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.HTTPStatus() != tt.status {
				t.Fatalf("err = %v, want status %d", err, tt.status)
			}
			if tt.field != "" && (len(ae.Fields) == 0 || ae.Fields[0].Field != tt.field) {
				t.Fatalf("fields = %+v, want %s", ae.Fields, tt.field)
			}
		})
	}
}

// A whole number written as a float is one, and goes on as an integer,
// which engines' integer fields read; a wrong type is said to be one.
func TestParseWholeNumbers(t *testing.T) {
	model, out, err := Parse([]byte(`{"model":"e5","input":"x","dimensions":8.0}`))
	if err != nil || model != "e5" || string(out) != `{"dimensions":8,"input":"x","model":"e5"}` {
		t.Fatalf("Parse = %q, %s, %v", model, out, err)
	}
	for body, typ := range map[string]string{
		`{"model":"e5","input":"x","dimensions":"4"}`:  api.FieldWrongType,
		`{"model":"e5","input":"x","dimensions":1.5}`:  api.FieldWrongType,
		`{"model":"e5","input":"x","dimensions":-1}`:   api.FieldOutOfRange,
		`{"model":"e5","input":"x","dimensions":1e99}`: api.FieldOutOfRange,
	} {
		_, _, err := Parse([]byte(body))
		if ae := api.ErrorOf(err); len(ae.Fields) != 1 || ae.Fields[0].Type != typ {
			t.Errorf("%s: %v, want %s", body, err, typ)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"model":"e5","input":"x"}`, `{"input":[[1],[2,3]]}`, `[`, `null`, `{"model":"e5","input":[{}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_, _, err := Parse(body)
		if err == nil {
			return
		}
		var ae *api.Error
		if !errors.As(err, &ae) || (ae.HTTPStatus() != 400 && ae.HTTPStatus() != 422) || ae.Message == "" {
			t.Fatalf("Parse(%q) = %v", body, err)
		}
	})
}
