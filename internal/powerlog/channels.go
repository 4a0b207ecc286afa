package powerlog

import (
	"math"

	"github.com/svc-dev/svc/internal/api"
)

// cloneChannels copies channels deeply: the caller's slice and pointers
// may be reused, and History's are handed to its caller. A power limit
// that is not a finite number is dropped: JSON cannot carry it.
func cloneChannels(cs []api.PowerChannel) []api.PowerChannel {
	out := make([]api.PowerChannel, len(cs))
	for i, c := range cs {
		if c.Index != nil {
			v := *c.Index
			c.Index = &v
		}
		if c.PowerLimitW = finite(c.PowerLimitW); c.PowerLimitW != nil {
			v := *c.PowerLimitW
			c.PowerLimitW = &v
		}
		out[i] = c
	}
	return out
}

// sameChannel reports whether a and b describe a channel alike.
func sameChannel(a, b api.PowerChannel) bool {
	// A limit that is not a finite number is kept as none.
	samePtr := func(x, y *float64) bool {
		x, y = finite(x), finite(y)
		return x == nil && y == nil || x != nil && y != nil && *x == *y
	}
	return a.Key == b.Key && a.Scope == b.Scope && a.Name == b.Name && a.Source == b.Source && a.Method == b.Method &&
		(a.Index == nil && b.Index == nil || a.Index != nil && b.Index != nil && *a.Index == *b.Index) &&
		samePtr(a.PowerLimitW, b.PowerLimitW)
}

// finite is p, or nil when it points to NaN or an infinity.
func finite(p *float64) *float64 {
	if p == nil || math.IsNaN(*p) || math.IsInf(*p, 0) {
		return nil
	}
	return p
}
