package bolt

import (
	"context"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/store/storetest"
)

// conformanceLogs are fresh stores for the conformance suite, their
// writer committing only when the suite syncs them.
func conformanceLogs(t *testing.T) storetest.Logs {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := s.NewWriter(WriterOptions{Every: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return storetest.Logs{
		Usage: s.Usage(w), Events: s.Events(w), Power: s.Power(w),
		Sync: func(t testing.TB) {
			t.Helper()
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func TestConformanceUsage(t *testing.T)  { storetest.TestUsage(t, conformanceLogs) }
func TestConformanceEvents(t *testing.T) { storetest.TestEvents(t, conformanceLogs) }
func TestConformancePower(t *testing.T)  { storetest.TestPower(t, conformanceLogs) }
