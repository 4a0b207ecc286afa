package main

import (
	"context"
	"strings"
	"testing"
)

// TestShort runs every check at small scale, as CI does: each check is a
// subtest that fails with the properties it found violated. Full runs,
// with the figures docs/reliability.md reports, are `go run ./reliability`.
func TestShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds svc and runs every check against real processes")
	}
	h, done, err := newHarness(context.Background(), true, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	for _, c := range checks() {
		t.Run(c.name, func(t *testing.T) {
			h.logw = testLog{t}
			res := h.runCheck(context.Background(), c)
			for _, f := range res.Figures {
				t.Logf("%s: %s", f.Name, f.Value)
			}
			for _, f := range res.Failures {
				t.Error(f)
			}
			if res.Dropped > 0 {
				t.Errorf("and %d more failures", res.Dropped)
			}
		})
	}
}

// testLog sends the harness's progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
