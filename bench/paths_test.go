package main

import (
	"maps"
	"math"
	"testing"
	"time"
)

func TestCPUPer(t *testing.T) {
	from := map[string]usage{
		"gateway": {cpu: time.Second, valid: true},
		"worker":  {cpu: 2 * time.Second, valid: true},
		"gone":    {cpu: time.Second, valid: true},
	}
	to := map[string]usage{
		"gateway": {cpu: 3 * time.Second, valid: true},
		"worker":  {cpu: 3 * time.Second, valid: true},
		"gone":    {}, // exited between the readings
		"new":     {cpu: time.Second, valid: true},
	}
	cases := []struct {
		n    int
		want map[string]float64
	}{
		{1000, map[string]float64{"gateway": 2000, "worker": 1000}},
		{0, map[string]float64{}},
		{-1, map[string]float64{}},
	}
	for _, c := range cases {
		if got := cpuPer(from, to, c.n); !maps.Equal(got, c.want) {
			t.Errorf("cpuPer over %d requests = %v, want %v", c.n, got, c.want)
		}
	}
}

// The overload's implied refusal cost and refusal-cost's predicted share
// are one model read both ways.
func TestServedShare(t *testing.T) {
	cases := []struct{ rho, share float64 }{
		{0, 1},
		{1.0 / 6, 0.9},
		{0.27, 1 - 0.5*0.27/0.73},
		{2.0 / 3, 0},
	}
	for _, c := range cases {
		if got := servedShare(c.rho); math.Abs(got-c.share) > 1e-9 {
			t.Errorf("servedShare(%v) = %v, want %v", c.rho, got, c.share)
		}
		if got := impliedRefusalCost(c.share); math.Abs(got-c.rho) > 1e-9 {
			t.Errorf("impliedRefusalCost(%v) = %v, want %v", c.share, got, c.rho)
		}
	}
	if got := servedShare(0.8); got != 0 {
		t.Errorf("servedShare(0.8) = %v: refusing everything costs more than the CPU there is, and serves nothing", got)
	}
}
