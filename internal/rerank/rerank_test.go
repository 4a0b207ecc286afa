package rerank

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestParse(t *testing.T) {
	many := "[" + strings.Repeat(`"x",`, MaxDocuments) + `"x"]`
	tests := []struct {
		name   string
		body   string
		want   *Request
		status int
		field  string
	}{
		{"strings", `{"model":"bge","query":"q","documents":["a","b"]}`,
			&Request{Model: "bge", Query: "q", Documents: []string{"a", "b"}, ReturnDocuments: true}, 0, ""},
		{"objects and options", `{"model":"bge","query":"q","documents":[{"text":"a"},"b"],"top_n":1,"return_documents":false,"truncate":true}`,
			&Request{Model: "bge", Query: "q", Documents: []string{"a", "b"}, TopN: 1}, 0, ""},
		{"an empty document", `{"model":"bge","query":"q","documents":[""]}`,
			&Request{Model: "bge", Query: "q", Documents: []string{""}, ReturnDocuments: true}, 0, ""},
		{"malformed", `{"model":`, nil, 400, ""},
		{"empty body", ``, nil, 400, ""},
		{"not an object", `[1]`, nil, 422, "body"},
		{"null", `null`, nil, 422, "body"},
		{"no model", `{"query":"q","documents":["a"]}`, nil, 422, "model"},
		{"model not a string", `{"model":5,"query":"q","documents":["a"]}`, nil, 422, "model"},
		{"no query", `{"model":"bge","documents":["a"]}`, nil, 422, "query"},
		{"query not a string", `{"model":"bge","query":["q"],"documents":["a"]}`, nil, 422, "query"},
		{"empty query", `{"model":"bge","query":"","documents":["a"]}`, nil, 422, "query"},
		{"no documents", `{"model":"bge","query":"q"}`, nil, 422, "documents"},
		{"documents not a list", `{"model":"bge","query":"q","documents":"a"}`, nil, 422, "documents"},
		{"no document", `{"model":"bge","query":"q","documents":[]}`, nil, 422, "documents"},
		{"too many", `{"model":"bge","query":"q","documents":` + many + `}`, nil, 422, "documents"},
		{"a number", `{"model":"bge","query":"q","documents":["a",5]}`, nil, 422, "documents.1"},
		{"a null", `{"model":"bge","query":"q","documents":[null]}`, nil, 422, "documents.0"},
		{"an object without text", `{"model":"bge","query":"q","documents":[{"title":"a"}]}`, nil, 422, "documents.0.text"},
		{"a text not a string", `{"model":"bge","query":"q","documents":["a",{"text":1}]}`, nil, 422, "documents.1.text"},
		{"top_n zero", `{"model":"bge","query":"q","documents":["a"],"top_n":0}`, nil, 422, "top_n"},
		{"top_n fraction", `{"model":"bge","query":"q","documents":["a"],"top_n":1.5}`, nil, 422, "top_n"},
		{"top_n a string", `{"model":"bge","query":"q","documents":["a"],"top_n":"2"}`, nil, 422, "top_n"},
		{"return_documents not a boolean", `{"model":"bge","query":"q","documents":["a"],"return_documents":"yes"}`, nil, 422, "return_documents"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.body))
			if tt.status == 0 {
				if err != nil || r.Model != tt.want.Model || r.Query != tt.want.Query || !slices.Equal(r.Documents, tt.want.Documents) ||
					r.TopN != tt.want.TopN || r.ReturnDocuments != tt.want.ReturnDocuments {
					t.Fatalf("Parse = %+v, %v; want %+v", r, err, tt.want)
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

// A whole number written as a float is one, and goes on as an integer;
// a body needing no change goes on as it came.
func TestParseWholeNumbers(t *testing.T) {
	r, err := Parse([]byte(`{"model":"bge","query":"q","documents":["a","b"],"top_n":1.0}`))
	if err != nil || r.TopN != 1 || string(r.Body) != `{"documents":["a","b"],"model":"bge","query":"q","top_n":1}` {
		t.Fatalf("Parse = %+v, %v", r, err)
	}
	body := `{"model":"bge","query":"q","documents":["a"],"top_n":1}`
	if r, err := Parse([]byte(body)); err != nil || string(r.Body) != body {
		t.Fatalf("Parse = %+v, %v", r, err)
	}
	_, err = Parse([]byte(`{"model":"bge","query":"q","documents":["a"],"top_n":"2"}`))
	if ae := api.ErrorOf(err); len(ae.Fields) != 1 || ae.Fields[0].Type != api.FieldWrongType {
		t.Fatalf("a string: %v", err)
	}
}

// Every field that fails is named, not only the first.
func TestParseNamesEveryField(t *testing.T) {
	_, err := Parse([]byte(`{"documents":[1,{"text":2}],"top_n":-1}`))
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatal(err)
	}
	var fields []string
	for _, f := range ae.Fields {
		fields = append(fields, f.Field)
	}
	if want := []string{"model", "query", "documents.0", "documents.1.text", "top_n"}; !slices.Equal(fields, want) {
		t.Fatalf("fields %v, want %v", fields, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"model":"m","query":"q","documents":["a",{"text":"b"}],"top_n":1}`, `{"documents":[{}]}`, `[`, `null`,
		`{"model":"m","query":"q","documents":[{"text":null}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body)
		if err == nil {
			if r.Model == "" || r.Query == "" || len(r.Documents) == 0 || len(r.Documents) > MaxDocuments || r.TopN < 0 {
				t.Fatalf("Parse(%q) = %+v", body, r)
			}
			return
		}
		var ae *api.Error
		if !errors.As(err, &ae) || (ae.HTTPStatus() != 400 && ae.HTTPStatus() != 422) || ae.Message == "" {
			t.Fatalf("Parse(%q) = %v", body, err)
		}
	})
}
