package jsonbody

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/money"
)

func TestStrict(t *testing.T) {
	tests := []struct {
		body   string
		status int
		field  string
	}{
		{`{"name":"acme","plan":"pro"}`, 0, ""},
		{``, 400, ""},
		{`   `, 400, ""},
		{`{"name":`, 400, ""},
		{`{name:1}`, 400, ""},
		{`{"name":"a"}{"name":"b"}`, 400, ""},
		{`{"name":"a"} x`, 400, ""},
		{`[1,2]`, 422, "body"},
		{`{"name": 5}`, 422, "name"},
		{`{"name":"a","extra":1}`, 422, "extra"},
		{`{"amount_gbp": "1.005"}`, 422, "amount_gbp"},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			var v struct {
				Name   string     `json:"name"`
				Plan   api.Plan   `json:"plan"`
				Amount *money.GBP `json:"amount_gbp"`
			}
			err := Strict([]byte(tt.body), &v)
			if tt.status == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.HTTPStatus() != tt.status {
				t.Fatalf("err = %v, want status %d", err, tt.status)
			}
			if tt.field != "" && (len(ae.Fields) != 1 || ae.Fields[0].Field != tt.field) {
				t.Fatalf("fields = %+v, want %s", ae.Fields, tt.field)
			}
		})
	}
}

func FuzzStrict(f *testing.F) {
	for _, s := range []string{`{}`, `{"name":"x","plan":"pro"}`, `{"monthly_budget_gbp":1.5}`, `[`, `{"plan":null}`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var p api.OrgPatch
		err := Strict(body, &p)
		if err == nil {
			return
		}
		var ae *api.Error
		if !errors.As(err, &ae) || (ae.HTTPStatus() != 400 && ae.HTTPStatus() != 422) || ae.Message == "" {
			t.Fatalf("Strict(%q) = %v", body, err)
		}
	})
}

// FuzzMembers holds Members to Lenient into a map: the same members, or
// the same answer to a body that is not an object of them.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":"x","b":[{"c":null}]}`, ` {"\u00e9":true} `, `null`, `[1]`, `"s"`, `{`, ``, `{"a":1} x`, "{\"\xff\":1}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := Members(body)
		var want map[string]json.RawMessage
		wantErr := Lenient(body, &want)
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("%q: Members %v, Lenient %v", body, err, wantErr)
		case err != nil && err.Error() != wantErr.Error():
			t.Fatalf("%q: Members %v, Lenient %v", body, err, wantErr)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("%q: Members %q, Lenient %q", body, got, want)
		}
	})
}
