package power

import (
	"slices"
	"time"
)

// request is one request's share of the GPU energy so far.
type request struct {
	begin, end time.Time // end is zero while the request is generating
	joules     float64
	// measured is set once a GPU reading covered part of the request.
	measured bool
}

func (r *request) activeAt(from, to time.Time) bool {
	return !r.begin.After(from) && (r.end.IsZero() || !r.end.Before(to))
}

func (r *request) overlaps(from, to time.Time) bool {
	return r.begin.Before(to) && (r.end.IsZero() || r.end.After(from))
}

// attribution shares GPU energy among requests. Requests that ended stay
// until the next sample: they still count among those that shared the
// interval they ended in, so the others get only their own share.
type attribution struct {
	reqs map[string]*request
}

func (a *attribution) begin(id string, now time.Time) {
	if a.reqs == nil {
		a.reqs = map[string]*request{}
	}
	a.reqs[id] = &request{begin: now}
}

// end closes request id at now. The stretch since the last sample has no
// reading yet, so it is charged at the GPU power last seen (gpuW, when
// known), shared with the requests active in it as a sample would.
func (a *attribution) end(id string, now, lastSample time.Time, gpuW float64, known bool) (joules float64, ok bool) {
	r := a.reqs[id]
	if r == nil || !r.end.IsZero() {
		return 0, false
	}
	r.end = now
	if known {
		from := r.begin
		if lastSample.After(from) {
			from = lastSample
		}
		if now.After(from) {
			split(segment{t0: from, t1: now, w0: gpuW, w1: gpuW}, a.overlapping(from, now), func(got *request, j float64) {
				if got == r {
					r.joules += j
					r.measured = true
				}
			})
		}
	}
	return r.joules, r.measured
}

// sampled shares the GPU energy of the interval just sampled (gpu, when
// ok) and then lets go of the requests that ended in it.
func (a *attribution) sampled(gpu segment, ok bool) {
	if ok {
		split(gpu, a.overlapping(gpu.t0, gpu.t1), func(r *request, j float64) {
			r.joules += j
			r.measured = true
		})
	}
	for id, r := range a.reqs {
		if !r.end.IsZero() {
			delete(a.reqs, id)
		}
	}
}

// drop forgets request id: nothing will be sampled for it.
func (a *attribution) drop(id string) { delete(a.reqs, id) }

func (a *attribution) overlapping(from, to time.Time) []*request {
	var out []*request
	for _, r := range a.reqs {
		if r.overlaps(from, to) {
			out = append(out, r)
		}
	}
	return out
}

// split shares the energy of s among reqs: at every moment equally among
// those active then. Nobody is charged for moments when none was active.
func split(s segment, reqs []*request, give func(r *request, joules float64)) {
	if len(reqs) == 0 {
		return
	}
	cuts := []time.Time{s.t0, s.t1}
	for _, r := range reqs {
		if r.begin.After(s.t0) && r.begin.Before(s.t1) {
			cuts = append(cuts, r.begin)
		}
		if !r.end.IsZero() && r.end.After(s.t0) && r.end.Before(s.t1) {
			cuts = append(cuts, r.end)
		}
	}
	slices.SortFunc(cuts, time.Time.Compare)
	cuts = slices.CompactFunc(cuts, time.Time.Equal)
	on := make([]*request, 0, len(reqs))
	for i := 1; i < len(cuts); i++ {
		part, ok := s.clip(cuts[i-1], cuts[i])
		if !ok {
			continue
		}
		on = on[:0]
		for _, r := range reqs {
			if r.activeAt(part.t0, part.t1) {
				on = append(on, r)
			}
		}
		if len(on) == 0 {
			continue
		}
		each := part.joules() / float64(len(on))
		for _, r := range on {
			give(r, each)
		}
	}
}
