package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/svc-dev/svc/internal/pgtest"
)

func TestFailoverFailures(t *testing.T) {
	for _, tc := range []struct {
		err     loadError
		allowed bool
	}{
		{loadError{Status: 503, Code: "not_home"}, true},
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

func TestSkippedWithoutPostgres(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		require string
		skipped bool
	}{
		{"no binary", fmt.Errorf("start: %w", pgtest.ErrNoPostgres), "", true},
		{"no binary, required", pgtest.ErrNoPostgres, "1", false},
		{"another failure", errors.New("initdb failed"), "", false},
		{"no failure", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(pgtest.RequireEnv, tc.require)
			r := &result{}
			if got := skippedNoPostgres(r, tc.err); got != tc.skipped || (len(r.Figures) == 1) != tc.skipped {
				t.Fatalf("skipped %v with figures %v, want %v", got, r.Figures, tc.skipped)
			}
		})
	}
}
