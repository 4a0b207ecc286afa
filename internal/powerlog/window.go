package powerlog

import (
	"bytes"
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// maxWindow bounds a window's length. The sampler closes windows of about
// a minute; a day-long one is a broken clock, and splitting it would fill
// 1,440 minute buckets.
const maxWindow = 24 * time.Hour

// Figures are one channel's readings in a window or bucket.
type Figures struct {
	Joules float64
	// Covered is how many seconds had readings; average watts are
	// Joules over Covered.
	Covered float64
	// Peak is the highest reading, in watts.
	Peak float64
}

// Sum is a channel's key and figures. A store hands out keys that point
// into its own memory: they are valid only as long as it says.
type Sum struct {
	Key []byte
	Figures
}

// Window is a reported window, checked: its span in Unix nanoseconds and
// the sums of the channels that had readings, sorted by key.
type Window struct {
	Start, End int64
	Sums       []Sum
}

// Check converts a reported window, keeping the channels whose readings
// can be right; ok is false for a window that cannot be.
//
// A channel with no covered seconds, a non-finite or negative figure, or
// a key that is not one (api.ValidPowerKey) is dropped; covered seconds
// are capped at the window's length. A window of no length or longer than a day, or one
// outside years 1970-2199, is refused. A peak that is missing or below
// the window's average is taken as the average.
func Check(w *api.PowerWindow) (Window, bool) {
	if y := w.Start.Year(); y < 1970 || y >= 2200 {
		return Window{}, false
	}
	if !(w.Seconds > 0) || w.Seconds > maxWindow.Seconds() {
		return Window{}, false // also NaN
	}
	start := w.Start.UnixNano()
	out := Window{Start: start, End: start + int64(math.Round(w.Seconds*1e9))}
	if len(w.Joules) > api.MaxPowerChannels {
		return Window{}, false // no machine has so many: a broken or hostile worker
	}
	for key, j := range w.Joules {
		c := min(w.Covered[key], w.Seconds)
		if !api.ValidPowerKey(key) || !finiteNonNeg(j) || !finiteNonNeg(c) || c == 0 {
			continue
		}
		peak, ok := w.PeakW[key]
		if avg := j / c; !ok || !finiteNonNeg(peak) || peak < avg {
			peak = avg
		}
		out.Sums = append(out.Sums, Sum{[]byte(key), Figures{j, c, peak}})
	}
	slices.SortFunc(out.Sums, func(a, b Sum) int { return bytes.Compare(a.Key, b.Key) })
	return out, true
}

// finiteNonNeg is false for NaN, infinities and negative numbers: no
// figure of a window or bucket can be one.
func finiteNonNeg(v float64) bool { return v >= 0 && v <= math.MaxFloat64 }

// Delta is what a report adds to one bucket.
type Delta struct {
	Res   int64 // the bucket's length, seconds: its layer
	Start int64 // Unix seconds
	Sums  []Sum
}

// bucketID names a bucket while a report is split among them.
type bucketID struct{ res, start int64 }

// Split adds windows up into what they add to each bucket they touch, in
// every layer: finest first, each layer's buckets in time order.
//
// A window that straddles bucket boundaries is split between the buckets
// in proportion to the time it spent in each, joules and covered seconds
// alike, as if its readings were spread evenly; its peak goes to every
// bucket it touches, since where in the window it fell is not known.
func Split(wins []Window) []Delta {
	adds := map[bucketID]*Delta{}
	for _, w := range wins {
		for _, l := range Layers() {
			splitWindow(w, l.Res, func(start int64, frac float64) {
				id := bucketID{l.Res, start}
				d := adds[id]
				if d == nil {
					d = &Delta{Res: l.Res, Start: start}
					adds[id] = d
				}
				d.Sums = AddSums(d.Sums, w.Sums, frac)
			})
		}
	}
	deltas := make([]Delta, 0, len(adds))
	for _, d := range adds {
		deltas = append(deltas, *d)
	}
	slices.SortFunc(deltas, func(a, b Delta) int {
		return cmp.Or(cmp.Compare(a.Res, b.Res), cmp.Compare(a.Start, b.Start))
	})
	return deltas
}

// splitWindow calls fn with the start (Unix seconds) of each bucket of res
// seconds that w overlaps and the share of w's time spent in it.
func splitWindow(w Window, res int64, fn func(start int64, frac float64)) {
	resNs := res * int64(time.Second)
	for b := w.Start / resNs * resNs; b < w.End; b += resNs {
		lo, hi := max(w.Start, b), min(w.End, b+resNs)
		frac := 1.0
		if lo != w.Start || hi != w.End {
			frac = float64(hi-lo) / float64(w.End-w.Start)
		}
		fn(b/int64(time.Second), frac)
	}
}

// AddSums adds frac of each of add's sums to sums, both sorted by key,
// and returns them still sorted. Peaks are not scaled: a peak is a
// reading, not an amount. A key of add that sums lacks is shared, not
// copied.
func AddSums(sums, add []Sum, frac float64) []Sum {
	if len(sums) == 0 {
		// A bucket's first window, the usual case: no merging.
		sums = make([]Sum, len(add))
		for i, a := range add {
			sums[i] = Sum{a.Key, Figures{a.Joules * frac, a.Covered * frac, a.Peak}}
		}
		return sums
	}
	for _, a := range add {
		i, found := slices.BinarySearchFunc(sums, a.Key, func(s Sum, k []byte) int { return bytes.Compare(s.Key, k) })
		if !found {
			sums = slices.Insert(sums, i, Sum{Key: a.Key})
		}
		s := &sums[i]
		s.Joules += a.Joules * frac
		s.Covered += a.Covered * frac
		s.Peak = max(s.Peak, a.Peak)
	}
	return sums
}
