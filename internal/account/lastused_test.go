package account

import (
	"testing"
	"time"
)

// A key's last use moves a second at a time, and follows the system clock
// set back instead of freezing until it passes the old time again.
func TestLastUsedTouch(t *testing.T) {
	base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	var l lastUsed
	for _, tc := range []struct {
		at   time.Duration // after base
		want time.Duration
	}{
		{0, 0},
		{500 * time.Millisecond, 0}, // within the second: not moved
		{2 * time.Second, 2 * time.Second},
		{time.Second + 500*time.Millisecond, 2 * time.Second}, // a late request, not a step
		{-time.Hour, -time.Hour},                              // the clock set back an hour
		{-time.Hour + 2*time.Second, -time.Hour + 2*time.Second},
	} {
		l.touch(base.Add(tc.at))
		if got := l.time(); got == nil || !got.Equal(base.Add(tc.want)) {
			t.Errorf("touched at %v: last used %v, want %v", tc.at, got, base.Add(tc.want))
		}
	}
}
