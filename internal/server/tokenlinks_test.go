package server

import (
	"slices"
	"testing"
	"time"
)

func TestTokenLinks(t *testing.T) {
	var tl tokenLinks
	forgetA := tl.add("t1", "o", "wk_a")
	forgetA2 := tl.add("t1", "o", "wk_a") // a reconnect overtaking the old link
	forgetB := tl.add("t2", "o", "wk_b")
	revoked := func(tokens ...string) func(string) bool {
		return func(tok string) bool { return !slices.Contains(tokens, tok) }
	}
	if got := tl.revoked(revoked("t1")); !slices.Equal(got, []linkOf{{"o", "wk_a"}}) {
		t.Fatalf("links of t1 = %v", got)
	}
	forgetA()
	if got := tl.revoked(revoked("t1")); len(got) != 1 {
		t.Fatalf("one of two links of a worker forgotten: %v, want the other kept", got)
	}
	forgetA2()
	if got := tl.revoked(revoked("t1", "t2")); !slices.Equal(got, []linkOf{{"o", "wk_b"}}) {
		t.Fatalf("links after wk_a's went = %v", got)
	}
	forgetB()
	if len(tl.m) != 0 {
		t.Fatalf("forgotten links left entries: %v", tl.m)
	}
}

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
