package main

import "testing"

func TestFailoverFailures(t *testing.T) {
	for _, tc := range []struct {
		err     loadError
		allowed bool
	}{
		{loadError{Status: 503, Code: "standby_replica"}, true},
		{loadError{Status: 503}, true},
		{loadError{Status: 502}, true},
		{loadError{Cut: true}, true},
		{loadError{Status: 200, Frame: 503}, true},
		{loadError{Status: 200, Cut: true}, true},
		{loadError{Timeout: true}, false},
		{loadError{Status: 200, Cut: true, Timeout: true}, false},
		{loadError{Status: 429}, false},
		{loadError{Status: 500}, false},
		{loadError{Status: 200, Frame: 500}, false},
		{loadError{Status: 200, Msg: "no X-Request-Id"}, false},
	} {
		if class, ok := failoverFailure(&tc.err); ok != tc.allowed {
			t.Errorf("%+v: %q allowed %v, want %v", tc.err, class, ok, tc.allowed)
		}
	}
}
