package ratelimit

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// clock is a fake clock the test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// step is one request of a scenario: after the clock moved by after, org
// asks under limit perMinute and is let through, or refused with
// Retry-After retry.
type step struct {
	after     time.Duration
	org       string
	perMinute int
	n         int           // how many requests in a row, 1 when 0
	retry     time.Duration // 0: let through
}

func TestAllow(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"the burst passes, the next waits for a token", []step{
			// 60 a minute: a token a second, a burst of 10.
			{org: "a", perMinute: 60, n: 10},
			{org: "a", perMinute: 60, retry: time.Second},
			{org: "a", perMinute: 60, retry: time.Second}, // a refusal takes nothing
		}},
		{"Retry-After is rounded up to whole seconds", []step{
			// 6 a minute: a token every 10 s, a burst of 1.
			{org: "a", perMinute: 6},
			{after: 2500 * time.Millisecond, org: "a", perMinute: 6, retry: 8 * time.Second},
			{after: 7400 * time.Millisecond, org: "a", perMinute: 6, retry: time.Second},
			{after: 100 * time.Millisecond, org: "a", perMinute: 6},
		}},
		{"the bucket refills over time, up to the burst", []step{
			{org: "a", perMinute: 60, n: 10},
			{after: 3 * time.Second, org: "a", perMinute: 60, n: 3},
			{org: "a", perMinute: 60, retry: time.Second},
			{after: time.Hour, org: "a", perMinute: 60, n: 10},
			{org: "a", perMinute: 60, retry: time.Second},
		}},
		{"a burst is ten seconds' worth, at least one", []step{
			{org: "a", perMinute: 1},
			{org: "a", perMinute: 1, retry: time.Minute},
			{org: "b", perMinute: 7, n: 2},
			{org: "b", perMinute: 7, retry: 9 * time.Second},
			{org: "c", perMinute: 600, n: 100},
			{org: "c", perMinute: 600, retry: time.Second},
		}},
		{"a changed limit takes effect at once, with a full bucket", []step{
			{org: "a", perMinute: 6},
			{org: "a", perMinute: 6, retry: 10 * time.Second},
			{org: "a", perMinute: 60, n: 10},
			{org: "a", perMinute: 60, retry: time.Second},
			{org: "a", perMinute: 6},
			{org: "a", perMinute: 6, retry: 10 * time.Second},
		}},
		{"no limit never refuses, and lifting one forgets the bucket", []step{
			{org: "a", perMinute: 0, n: 100_000},
			{org: "a", perMinute: 6},
			{org: "a", perMinute: 0, n: 1000},
			{org: "a", perMinute: 6},
		}},
		{"organisations are independent", []step{
			{org: "a", perMinute: 6},
			{org: "a", perMinute: 6, retry: 10 * time.Second},
			{org: "b", perMinute: 6},
			{org: "b", perMinute: 6, retry: 10 * time.Second},
			{org: "c", perMinute: 0, n: 50},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			l := New(c.now)
			for i, s := range tt.steps {
				c.advance(s.after)
				for j := range max(s.n, 1) {
					err := l.Allow(s.org, s.perMinute)
					if s.retry == 0 {
						if err != nil {
							t.Fatalf("step %d, request %d of %s: %v", i, j+1, s.org, err)
						}
						continue
					}
					var ae *api.Error
					if !errors.As(err, &ae) {
						t.Fatalf("step %d, request %d of %s: %v, want refused", i, j+1, s.org, err)
					}
					if ae.Kind != api.KindRateLimited || ae.HTTPStatus() != 429 || ae.Code != api.CodeRateLimited || ae.RetryAfter != s.retry {
						t.Fatalf("step %d: %+v, want 429 %s with Retry-After %s", i, ae, api.CodeRateLimited, s.retry)
					}
				}
			}
		})
	}
}

// The refusal names the limit and the wait, in the words the docs quote.
func TestRefusalMessage(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	l := New(c.now)
	_ = l.Allow("a", 6)
	err := l.Allow("a", 6)
	want := "This organisation's limit of 6 requests a minute is reached; retry in 10 s"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%v, want %q", err, want)
	}
}

// Requests of one organisation at once take exactly the burst, however
// many refusals come between them.
func TestAllowConcurrent(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	l := New(c.now)
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if l.Allow("a", 600) == nil {
					mu.Lock()
					passed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if passed != 100 {
		t.Fatalf("%d requests passed at one instant, want the burst of 100", passed)
	}
}
