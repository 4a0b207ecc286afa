package bolt

import (
	"context"
	"testing"
	"time"
)

// One counted call per key per minute, kept across a reopen; a refused
// call waits without moving the minute; a clock stepped back holds a key
// for a minute at most.
func TestRentLimiter(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	l := s.RentLimiter(clock)
	ctx := context.Background()
	allow := func(l *RentLimiter, key string) (bool, time.Duration) {
		t.Helper()
		ok, wait, err := l.AllowRent(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return ok, wait
	}
	if ok, _ := allow(l, "k1"); !ok {
		t.Fatal("a key's first call refused")
	}
	if ok, _ := allow(l, "k2"); !ok {
		t.Fatal("another key's first call refused")
	}
	now = now.Add(20 * time.Second)
	if ok, wait := allow(l, "k1"); ok || wait != 40*time.Second {
		t.Fatalf("a second call 20 s on: %v, wait %v", ok, wait)
	}
	// Reopened, as after a restart: the count is kept.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l = s.RentLimiter(clock)
	now = now.Add(10 * time.Second)
	if ok, wait := allow(l, "k1"); ok || wait != 30*time.Second {
		t.Fatalf("after a reopen: %v, wait %v", ok, wait)
	}
	now = now.Add(30 * time.Second)
	if ok, _ := allow(l, "k1"); !ok {
		t.Fatal("a call a minute after the counted one refused")
	}
	// The clock stepped back an hour: a minute's wait at most.
	now = now.Add(-time.Hour)
	if ok, wait := allow(l, "k1"); ok || wait != time.Minute {
		t.Fatalf("after the clock stepped back: %v, wait %v", ok, wait)
	}
}
