package server

import (
	"bytes"
	"slices"
	"strings"
)

// mux finds the route for a method and path. Static paths (every inference
// path among them) are one map lookup; the few paths with {params} are
// matched segment by segment.
type mux struct {
	static  map[string]map[string]*route // path -> method -> route
	dynamic []*route
	// bounded are the static routes with a body limit of their own, by
	// path, for the check made before a body is read.
	bounded map[string]*route
}

func newMux(routes []*route) *mux {
	m := &mux{static: map[string]map[string]*route{}, bounded: map[string]*route{}}
	for _, r := range routes {
		if r.maxBody > 0 {
			if strings.Contains(r.path, "{") {
				panic("a body limit on a route with {params}: " + r.path)
			}
			m.bounded[r.path] = r
		}
		if !strings.Contains(r.path, "{") {
			if m.static[r.path] == nil {
				m.static[r.path] = map[string]*route{}
			}
			if m.static[r.path][r.method] != nil {
				panic("duplicate route " + r.method + " " + r.path)
			}
			m.static[r.path][r.method] = r
			continue
		}
		r.segments = strings.Split(strings.TrimPrefix(r.path, "/"), "/")
		m.dynamic = append(m.dynamic, r)
	}
	return m
}

// maxParams bounds the {params} of one route.
const maxParams = 3

type params struct {
	names  []string
	values [maxParams]string
}

func (p *params) get(name string) string {
	for i, n := range p.names {
		if n == name {
			return p.values[i]
		}
	}
	return ""
}

// match returns the route for method and path. When the path exists under
// other methods only, r is nil and allow lists them.
func (m *mux) match(method, path string, p *params) (r *route, allow []string) {
	if byMethod, ok := m.static[path]; ok {
		if r := byMethod[method]; r != nil {
			return r, nil
		}
		for meth := range byMethod {
			allow = append(allow, meth)
		}
	}
	segs := splitPath(path)
	for _, d := range m.dynamic {
		if !matchSegments(d.segments, segs) {
			continue
		}
		if d.method != method {
			allow = append(allow, d.method)
			continue
		}
		p.names = p.names[:0]
		for i, s := range d.segments {
			switch {
			case isRest(s):
				p.values[len(p.names)] = strings.Join(segs[i:], "/")
				p.names = append(p.names, s[1:len(s)-4])
			case isParam(s):
				p.values[len(p.names)] = segs[i]
				p.names = append(p.names, s[1:len(s)-1])
			}
		}
		return d, nil
	}
	slices.Sort(allow)
	return nil, slices.Compact(allow)
}

// bodyLimit is the route with a body limit of its own that uri (a request
// URI as sent, query included) names, or nil. It runs for every request
// before its body is read, so it is one map lookup.
func (m *mux) bodyLimit(uri []byte) *route {
	if len(m.bounded) == 0 {
		return nil
	}
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	return m.bounded[string(uri)]
}

// pattern is the route pattern path matches with some method, "" for
// none: the metrics' route of a request refused its method (405).
func (m *mux) pattern(path string) string {
	if _, ok := m.static[path]; ok {
		return path
	}
	segs := splitPath(path)
	for _, d := range m.dynamic {
		if matchSegments(d.segments, segs) {
			return d.path
		}
	}
	return ""
}

// exists reports whether any method serves path.
func (m *mux) exists(path string) bool {
	_, allow := m.match("", path, &params{})
	return len(allow) > 0
}

func splitPath(path string) []string {
	return strings.Split(strings.TrimPrefix(path, "/"), "/")
}

func isParam(seg string) bool { return strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") }

// isRest is a last {param...} that takes the rest of the path, slashes
// and all: a model id such as Qwen/Qwen3-8B.
func isRest(seg string) bool { return isParam(seg) && strings.HasSuffix(seg, "...}") }

func matchSegments(pattern, segs []string) bool {
	if n := len(pattern); n > 0 && isRest(pattern[n-1]) {
		if len(segs) < n || slices.Contains(segs[n-1:], "") {
			return false
		}
		pattern, segs = pattern[:n-1], segs[:n-1]
	}
	if len(pattern) != len(segs) {
		return false
	}
	for i, s := range pattern {
		if isParam(s) {
			if segs[i] == "" {
				return false
			}
			continue
		}
		if s != segs[i] {
			return false
		}
	}
	return true
}

// suggest proposes the path the caller probably meant: the same path under
// the right prefix or without a trailing slash.
func (m *mux) suggest(path string) string {
	var candidates []string
	trimmed := strings.TrimRight(path, "/")
	if trimmed != path && trimmed != "" {
		candidates = append(candidates, trimmed)
	}
	switch {
	case strings.HasPrefix(trimmed, "/api/v1/"):
		candidates = append(candidates, "/v1/"+strings.TrimPrefix(trimmed, "/api/v1/"))
	case strings.HasPrefix(trimmed, "/v1/"):
		candidates = append(candidates, "/api/v1/"+strings.TrimPrefix(trimmed, "/v1/"))
	case strings.HasPrefix(trimmed, "/api/"):
		candidates = append(candidates, "/api/v1/"+strings.TrimPrefix(trimmed, "/api/"))
	default:
		candidates = append(candidates, "/api/v1"+trimmed, "/v1"+trimmed)
	}
	for _, c := range candidates {
		if m.exists(c) {
			return c
		}
	}
	return ""
}
