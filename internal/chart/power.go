package chart

import (
	"cmp"
	"slices"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Power is the chart of a worker's power history, in watts: one series
// per channel, in the document's order (GPUs, then cpu or soc, then the
// whole machine), over the history's range ending at to. A channel
// missing from a point is a gap in its line, as the API means it.
func Power(h api.PowerHistory, to time.Time) Chart {
	step := time.Duration(h.ResolutionSeconds) * time.Second
	res, span, ok := api.RangeResolution(h.Range)
	if step <= 0 {
		step = res
	}
	pts := slices.SortedFunc(slices.Values(h.Points), func(a, b api.PowerPoint) int { return a.T.Compare(b.T) })
	if len(pts) > 0 {
		// A client clock behind the gateway's would cut off the newest
		// windows; the range ends no earlier than they do.
		if end := pts[len(pts)-1].T.Add(step); end.After(to) {
			to = end
		}
		if !ok { // a range newer than this client: show what came
			span = to.Sub(pts[0].T)
		}
	}
	span = cmp.Or(span, time.Hour)
	c := Chart{From: to.Add(-span), To: to, Step: step, Unit: "W"}
	for _, ch := range h.Channels {
		s := Series{Label: ch.Key}
		for _, p := range pts {
			if v, ok := p.Values[ch.Key]; ok {
				s.Points = append(s.Points, Point{T: p.T, V: v})
			}
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// ANSIColor is the colour (of the 16 basic ANSI colours, which follow the
// terminal's theme) of the i-th series. The CLI and the dashboard share
// it, so a channel has the same colour in both.
func ANSIColor(i int) int {
	colors := [...]int{6, 5, 3, 2, 4, 1, 14, 13, 11, 10, 12, 9}
	return colors[i%len(colors)]
}
