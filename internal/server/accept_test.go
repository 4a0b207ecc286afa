package server

import (
	"slices"
	"strings"
	"testing"
)

func TestWantsJSON(t *testing.T) {
	for _, tc := range []struct {
		accept string
		want   bool
	}{
		{"", false},
		{"*/*", false},
		{"audio/wav", false},
		{"application/json", true},
		{"Application/JSON", true},
		{"application/json, */*", true},
		{"application/json, audio/wav", true},
		{"audio/wav, application/json;q=0.1", false},
		{"audio/*;q=0.5, application/json", true},
		{"application/json;q=0", false},
		{"application/json; charset=utf-8; q=0.8, audio/wav;q=0.2", true},
		{"application/json;q=2", false},
		{"application/json;q=abc, audio/wav;q=0.1", false},
		{"application/jsonx", false},
		{"text/html, application/json;q=0.9", true},
		// WAV refused, JSON taken.
		{"audio/mpeg, application/json;q=0.5", true},
		{"*/*, audio/wav;q=0", true},
		// The most specific range decides a form's weight.
		{"audio/*;q=0.9, audio/wav;q=0.1, application/json;q=0.5", true},
		{"application/*;q=0.2, audio/wav;q=0.5", false},
		{"application/*", true},
		// Neither form acceptable: WAV, as with no header.
		{"text/plain", false},
	} {
		if got := wantsJSON([]byte(tc.accept)); got != tc.want {
			t.Errorf("wantsJSON(%q) = %v, want %v", tc.accept, got, tc.want)
		}
	}
}

func FuzzWantsJSON(f *testing.F) {
	for _, s := range []string{"application/json;q=0.5, audio/*", "a;q=;;,", ";;q=1e400", "*/*, audio/wav;q=0"} {
		f.Add(s)
	}
	// The order of the ranges decides nothing.
	f.Fuzz(func(t *testing.T, accept string) {
		ranges := strings.Split(accept, ",")
		slices.Reverse(ranges)
		if a, b := wantsJSON([]byte(accept)), wantsJSON([]byte(strings.Join(ranges, ","))); a != b {
			t.Fatalf("wantsJSON(%q) = %v, reversed %v", accept, a, b)
		}
	})
}
