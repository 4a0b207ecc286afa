// Package fleet is the gateway's view of its workers: who is connected,
// what they serve, how healthy and how busy they are, and which one a
// request goes to, waiting in a per-model queue when all are busy.
package fleet

import (
	"math"
	"time"
)

// candidate is what the choice of a worker looks at.
type candidate struct {
	id           string
	active, max  int
	lastAssigned time.Time
}

// pick chooses among workers that can take a request now. The worker that
// served earlier turns of the conversation wins when it has a free slot
// (its engine may still hold the prompt prefix in cache); otherwise the
// least loaded by share of slots in use, then by slots in use, then the one
// that waited longest since its last request. It returns -1 when no
// candidate has a free slot.
func pick(cands []candidate, affinity string) int {
	best := -1
	for i, c := range cands {
		if c.active >= c.max {
			continue
		}
		if affinity != "" && c.id == affinity {
			return i
		}
		if best < 0 || less(c, cands[best]) {
			best = i
		}
	}
	return best
}

func less(a, b candidate) bool {
	la, lb := load(a), load(b)
	if la != lb {
		return la < lb
	}
	if a.active != b.active {
		return a.active < b.active
	}
	if !a.lastAssigned.Equal(b.lastAssigned) {
		return a.lastAssigned.Before(b.lastAssigned)
	}
	return a.id < b.id
}

func load(c candidate) float64 {
	if c.max <= 0 {
		return math.Inf(1)
	}
	return float64(c.active) / float64(c.max)
}

// retryAfter sizes the wait a capacity 429 asks for: the time the backlog
// ahead needs to drain through the model's slots, from 1 to 60 seconds.
func retryAfter(backlog, slots int, avgService time.Duration) time.Duration {
	if slots < 1 {
		slots = 1
	}
	if avgService <= 0 {
		avgService = time.Second
	}
	d := time.Duration(float64(backlog+1) * float64(avgService) / float64(slots))
	secs := math.Ceil(d.Seconds())
	return time.Duration(min(max(secs, 1), 60)) * time.Second
}
