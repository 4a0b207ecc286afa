package engine

import "testing"

func TestPublicURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://127.0.0.1:8000", "http://127.0.0.1:8000"},
		{"http://user:secret@vllm:8000/v1", "http://user:xxxxx@vllm:8000/v1"},
		{"http://user@vllm:8000", "http://user@vllm:8000"},
		{"", ""},
		{"::not a url", "::not a url"},
	} {
		if got := PublicURL(tc.in); got != tc.want {
			t.Errorf("PublicURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
