package bolt_test

import (
	"context"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/store/storetest"
)

// conformanceLogs are fresh stores for the usage, events and power
// checks, their writer committing only when the checks sync them.
func conformanceLogs(t *testing.T) storetest.Logs {
	s := openBolt(t)
	w := s.NewWriter(bolt.WriterOptions{Every: time.Hour})
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

func TestUsageConformance(t *testing.T)  { storetest.Usage(t, conformanceLogs) }
func TestEventsConformance(t *testing.T) { storetest.Events(t, conformanceLogs) }
func TestPowerConformance(t *testing.T)  { storetest.Power(t, conformanceLogs) }
