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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model, err := Parse([]byte(tt.body))
			if tt.status == 0 {
				if err != nil || model != tt.model {
					t.Fatalf("Parse = %q, %v", model, err)
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

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"model":"e5","input":"x"}`, `{"input":[[1],[2,3]]}`, `[`, `null`, `{"model":"e5","input":[{}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_, err := Parse(body)
		if err == nil {
			return
		}
		var ae *api.Error
		if !errors.As(err, &ae) || (ae.HTTPStatus() != 400 && ae.HTTPStatus() != 422) || ae.Message == "" {
			t.Fatalf("Parse(%q) = %v", body, err)
		}
	})
}
