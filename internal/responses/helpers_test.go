package responses_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// decode reads JSON keeping numbers exact, so comparisons are by value.
func decode(t testing.TB, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return v
}

// sameJSON fails unless got and want hold the same JSON value.
func sameJSON(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !reflect.DeepEqual(decode(t, got), decode(t, want)) {
		t.Errorf("%s:\n got: %s\nwant: %s", what, got, want)
	}
}

// member returns one top-level member of a JSON object, compacted.
func member(t testing.TB, obj []byte, key string) []byte {
	t.Helper()
	var o map[string]json.RawMessage
	if err := json.Unmarshal(obj, &o); err != nil {
		t.Fatalf("not an object: %v\n%s", err, obj)
	}
	v, ok := o[key]
	if !ok {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// apiError asserts err is an *api.Error answered with status.
func apiError(t testing.TB, err error, status int) *api.Error {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an *api.Error", err, err)
	}
	if ae.HTTPStatus() != status {
		t.Fatalf("status %d, want %d: %v", ae.HTTPStatus(), status, ae)
	}
	return ae
}

// fields renders an error's field list as "path:type" entries.
func fields(ae *api.Error) []string {
	var out []string
	for _, f := range ae.Fields {
		out = append(out, f.Field+":"+f.Type)
	}
	return out
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

const tinyPNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// req builds a request body from members.
func req(members ...string) string {
	return "{" + strings.Join(append([]string{`"model":"m"`}, members...), ",") + "}"
}
