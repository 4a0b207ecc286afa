package server

import (
	"slices"
	"strings"
	"testing"
)

func testMux() *mux {
	h := func(*call) error { return nil }
	return newMux([]*route{
		{method: "POST", path: "/api/v1/chat/completions", handle: h},
		{method: "POST", path: "/v1/chat/completions", handle: h},
		{method: "GET", path: "/api/v1/usage/logs", handle: h},
		{method: "GET", path: "/api/v1/workers/{worker_id}/power", handle: h},
		{method: "GET", path: "/api/v1/compute/instances/{id}", handle: h},
		{method: "DELETE", path: "/api/v1/compute/instances/{id}", handle: h},
		{method: "GET", path: "/api/v1/compute/instances/{id}/audit", handle: h},
		{method: "PUT", path: "/api/v1/console/orgs/{org}/members/{user}", handle: h},
		{method: "GET", path: "/v1/models/{model...}", handle: h},
	})
}

func TestMuxMatch(t *testing.T) {
	m := testMux()
	tests := []struct {
		method, path string
		want         string
		params       map[string]string
		allow        []string
	}{
		{"POST", "/v1/chat/completions", "/v1/chat/completions", nil, nil},
		{"GET", "/v1/chat/completions", "", nil, []string{"POST"}},
		{"GET", "/api/v1/workers/w-1/power", "/api/v1/workers/{worker_id}/power", map[string]string{"worker_id": "w-1"}, nil},
		{"GET", "/api/v1/workers//power", "", nil, nil},
		{"DELETE", "/api/v1/compute/instances/abc", "/api/v1/compute/instances/{id}", map[string]string{"id": "abc"}, nil},
		{"POST", "/api/v1/compute/instances/abc", "", nil, []string{"DELETE", "GET"}},
		{"GET", "/api/v1/compute/instances/abc/audit", "/api/v1/compute/instances/{id}/audit", map[string]string{"id": "abc"}, nil},
		{"PUT", "/api/v1/console/orgs/acme/members/bob", "/api/v1/console/orgs/{org}/members/{user}", map[string]string{"org": "acme", "user": "bob"}, nil},
		{"GET", "/api/v1/usage/logs/", "", nil, nil},
		{"GET", "/nope", "", nil, nil},
		{"GET", "/v1/models/sim-chat", "/v1/models/{model...}", map[string]string{"model": "sim-chat"}, nil},
		{"GET", "/v1/models/Qwen/Qwen3-8B", "/v1/models/{model...}", map[string]string{"model": "Qwen/Qwen3-8B"}, nil},
		{"DELETE", "/v1/models/a/b/c", "", nil, []string{"GET"}},
		{"GET", "/v1/models/", "", nil, nil},
		{"GET", "/v1/models/a//b", "", nil, nil},
		{"GET", "/v1/models/a/", "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			var p params
			r, allow := m.match(tt.method, tt.path, &p)
			got := ""
			if r != nil {
				got = r.path
			}
			if got != tt.want {
				t.Fatalf("route = %q, want %q", got, tt.want)
			}
			if !slices.Equal(allow, tt.allow) {
				t.Fatalf("allow = %v, want %v", allow, tt.allow)
			}
			// A method refused on a route is counted under its pattern.
			if pat := m.pattern(tt.path); len(tt.allow) > 0 && (pat == "" || !strings.HasPrefix(pat, "/")) ||
				got != "" && pat != got || got == "" && len(tt.allow) == 0 && pat != "" {
				t.Fatalf("pattern = %q", pat)
			}
			for k, v := range tt.params {
				if p.get(k) != v {
					t.Fatalf("param %s = %q, want %q", k, p.get(k), v)
				}
			}
		})
	}
}

func TestMuxSuggest(t *testing.T) {
	m := testMux()
	tests := []struct{ path, want string }{
		{"/chat/completions", "/api/v1/chat/completions"},
		{"/v1/usage/logs", "/api/v1/usage/logs"},
		{"/api/usage/logs", "/api/v1/usage/logs"},
		{"/api/v1/usage/logs/", "/api/v1/usage/logs"},
		{"/usage/logs", "/api/v1/usage/logs"},
		{"/v1/workers/w/power", "/api/v1/workers/w/power"},
		{"/totally/unknown", ""},
	}
	for _, tt := range tests {
		if got := m.suggest(tt.path); got != tt.want {
			t.Errorf("suggest(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}

func TestDuplicateRoutePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("duplicate route accepted")
		}
	}()
	newMux([]*route{{method: "GET", path: "/a"}, {method: "GET", path: "/a"}})
}

// The real table must build (no duplicates) and serve every spec alias.
func TestRouteTable(t *testing.T) {
	s := &Server{}
	m := newMux(s.routes())
	for _, p := range []string{"/chat/completions", "/embeddings", "/rerank", "/images/generations", "/models", "/audio/transcriptions", "/audio/speech", "/moderations"} {
		for _, prefix := range []string{"/api/v1", "/v1"} {
			if !m.exists(prefix + p) {
				t.Errorf("%s%s is not served", prefix, p)
			}
		}
	}
	for _, p := range []string{"/v1/usage/logs", "/v1/workers", "/v1/compute/spend", "/v1/console/orgs"} {
		if m.exists(p) {
			t.Errorf("%s is served, but only inference endpoints have /v1 aliases", p)
		}
	}
}

func TestBodyLimit(t *testing.T) {
	upload := &route{method: "POST", path: "/v1/audio/transcriptions", maxBody: 100}
	m := newMux([]*route{upload, {method: "POST", path: "/v1/chat/completions"}})
	tests := []struct {
		uri  string
		want *route
	}{
		{"/v1/audio/transcriptions", upload},
		{"/v1/audio/transcriptions?x=1", upload},
		{"/v1/chat/completions", nil},
		{"/v1/audio/transcriptions/", nil},
		{"", nil},
	}
	for _, tt := range tests {
		if got := m.bodyLimit([]byte(tt.uri)); got != tt.want {
			t.Errorf("bodyLimit(%q) = %v, want %v", tt.uri, got, tt.want)
		}
	}
}
