package server

import "testing"

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
	} {
		if got := wantsJSON([]byte(tc.accept)); got != tc.want {
			t.Errorf("wantsJSON(%q) = %v, want %v", tc.accept, got, tc.want)
		}
	}
}

func FuzzWantsJSON(f *testing.F) {
	for _, s := range []string{"application/json;q=0.5, audio/*", "a;q=;;,", ";;q=1e400"} {
		f.Add(s)
	}
	// A range refusing a type outright (q=0) adds nothing to a choice.
	f.Fuzz(func(t *testing.T, accept string) {
		got := wantsJSON([]byte(accept))
		for _, none := range []string{", audio/wav;q=0", ", application/json;q=0"} {
			if wantsJSON([]byte(accept+none)) != got {
				t.Fatalf("wantsJSON(%q) = %v, but %v with %q added", accept, got, !got, none)
			}
		}
	})
}
