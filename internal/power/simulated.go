package power

import (
	"context"
	"math"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// The simulated profile: a GPU idling at 60 W that draws 90 W more per
// active request up to its 350 W limit, and a processor doing a little
// work alongside.
const (
	simGPUIdleW       = 60.0
	simGPUPerRequestW = 90.0
	simGPULimitW      = 350.0
	simCPUIdleW       = 15.0
	simCPUPerRequestW = 8.0
	simCPUMaxW        = 65.0
)

// simulated makes up readings that follow the worker's load, so that a
// worker serving the simulator engine has graphs to show. Its channels
// say "simulated" as their source and "estimated" as their method, and
// its draw wobbles a little, the same at the same instant on every run.
type simulated struct {
	active func() int
}

func (s *simulated) discover(context.Context) []sensor {
	idx, limit := 0, simGPULimitW
	return []sensor{
		{id: "simulated:gpu", ch: api.PowerChannel{Scope: api.ScopeGPU, Index: &idx, Name: "Simulated GPU",
			Source: "simulated", Method: api.MethodEstimated, PowerLimitW: &limit}},
		{id: "simulated:cpu", ch: api.PowerChannel{Scope: api.ScopeCPU, Name: "Simulated CPU",
			Source: "simulated", Method: api.MethodEstimated}},
	}
}

func (s *simulated) read(_ context.Context, now time.Time) map[string]reading {
	n := float64(max(0, s.active()))
	gpu := min(simGPUIdleW+simGPUPerRequestW*n, simGPULimitW)
	cpu := min(simCPUIdleW+simCPUPerRequestW*n, simCPUMaxW)
	return map[string]reading{
		"simulated:gpu": powerReading(min(gpu*wobble(now), simGPULimitW)),
		"simulated:cpu": powerReading(cpu * wobble(now.Add(7*time.Second))),
	}
}

// wobble is a factor within 5% of 1 that drifts over tens of seconds.
func wobble(t time.Time) float64 {
	s := float64(t.UnixMilli()%3_600_000) / 1000
	return 1 + 0.03*math.Sin(2*math.Pi*s/17) + 0.02*math.Sin(2*math.Pi*s/5.3)
}
