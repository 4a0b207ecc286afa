package main

import (
	"maps"
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
