package server

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-dev/svc/internal/buildinfo"
)

// Requests are counted under their route, method and status, each series
// found again on the next request; a method a client invents counts as
// "other", so that inventing them cannot grow the series.
func TestObserve(t *testing.T) {
	m := newMetrics(buildinfo.Info{})
	for range 3 {
		m.observe("/v1/chat/completions", "POST", 200, time.Millisecond)
	}
	m.observe("/v1/chat/completions", "POST", 429, time.Millisecond)
	for _, method := range []string{"FOO", "BAR", "get", "PROPFIND"} {
		m.observe("unmatched", method, 405, time.Millisecond)
	}
	m.observe("unmatched", "DELETE", 404, time.Millisecond)

	for _, tc := range []struct {
		route, method, status string
		want                  float64
	}{
		{"/v1/chat/completions", "POST", "200", 3},
		{"/v1/chat/completions", "POST", "429", 1},
		{"unmatched", "other", "405", 4},
		{"unmatched", "DELETE", "404", 1},
	} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(tc.route, tc.method, tc.status)); got != tc.want {
			t.Errorf("%s %s %s: %v requests, want %v", tc.method, tc.route, tc.status, got, tc.want)
		}
	}
	if n := testutil.CollectAndCount(m.requests); n != 4 {
		t.Errorf("%d series of requests, want 4", n)
	}
	if n := testutil.CollectAndCount(m.latency); n != 4 {
		t.Errorf("%d series of latency, want 4", n)
	}
}
