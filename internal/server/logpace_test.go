package server

import (
	"testing"
	"time"
)

func TestLogPace(t *testing.T) {
	var p logPace
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {time.Second, false}, {59 * time.Second, false}, {time.Minute, true}, {90 * time.Second, false}, {3 * time.Minute, true}} {
		if got := p.due(t0.Add(tc.at)); got != tc.want {
			t.Errorf("due at +%v = %v, want %v", tc.at, got, tc.want)
		}
	}
}
