package jsonraw

import (
	"errors"
	"fmt"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestCaseTwins(t *testing.T) {
	many := func(extra ...string) []string {
		names := make([]string, 0, 40+len(extra))
		for i := range 40 {
			names = append(names, fmt.Sprintf("field_%d", i))
		}
		return append(names, extra...)
	}
	for _, tt := range []struct {
		name  string
		names []string
		param string // "" when there is no pair
	}{
		{"none", []string{"model", "messages", "max_tokens"}, ""},
		{"exact duplicates are another matter", []string{"model", "model"}, ""},
		{"upper after lower", []string{"model", "max_tokens", "MAX_TOKENS"}, "max_tokens"},
		{"lower after upper", []string{"Model", "model"}, "model"},
		{"Kelvin sign", []string{"k", "\u212a"}, "k"},
		{"long s", []string{"s", "\u017f"}, "s"},
		{"non-ASCII letters", []string{"é", "É"}, "é"},
		{"many, none", many(), ""},
		{"many, a pair", many("FIELD_7"), "field_7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CaseTwins(len(tt.names), func(i int) string { return tt.names[i] })
			if tt.param == "" {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.HTTPStatus() != 400 || ae.Code != "ambiguous_field" || ae.Param != tt.param {
				t.Fatalf("err = %+v, want a 400 ambiguous_field for %q", err, tt.param)
			}
		})
	}
}

// A chat request's top level: what every inference request pays.
func BenchmarkCaseTwins(b *testing.B) {
	names := []string{"model", "messages", "max_tokens", "temperature", "stream", "stream_options"}
	for b.Loop() {
		if CaseTwins(len(names), func(i int) string { return names[i] }) != nil {
			b.Fatal("a pair among distinct names")
		}
	}
}
