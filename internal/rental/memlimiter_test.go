package rental_test

import (
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/rental"
	"github.com/svc-dev/svc/internal/store"
	"github.com/svc-dev/svc/internal/store/storetest"
)

func TestMemoryLimiterConformance(t *testing.T) {
	storetest.Limiter(t, func(t *testing.T) (store.RentLimiter, storetest.LimiterOptions) {
		var mu sync.Mutex
		now := time.Date(2026, 3, 31, 23, 0, 0, 0, time.UTC)
		l := rental.NewMemoryLimiter(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
		return l, storetest.LimiterOptions{Window: time.Minute, Advance: func(d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			now = now.Add(d)
		}}
	})
}
