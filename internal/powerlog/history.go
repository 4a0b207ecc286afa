package powerlog

import (
	"fmt"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// joulesPerKWh converts energy to what the endpoint reports.
const joulesPerKWh = 3.6e6

// History answers the power endpoint for one range at now.
//
// The range is [now-span, now] and a bucket is in it when its start is:
// the bucket running at now-span, which started before it, is left out,
// and the bucket running at now is in with what it holds so far. So a
// point's time is its bucket's start, and 1h shows at most 60 minutes
// that all began within the hour (61 when now falls on a minute, the
// last one empty until a window reaches it). A point's values are each
// channel's average watts over the time it had readings; a bucket with no
// readings has no point. Totals are over the whole machine's channel
// (keyed by its scope, system) in the same buckets; coverage is their
// covered seconds over the span's.
//
// A worker that never recorded a window has no channels, no points and
// no machine; one that has, but not in the range, has its latest
// channels and machine and no points.
func (l *Log) History(workerID, rng string, now time.Time) (api.PowerHistory, error) {
	res, span, ok := api.RangeResolution(rng)
	if !ok {
		return api.PowerHistory{}, fmt.Errorf("unknown power range %q", rng)
	}
	layer, err := layerOf(res)
	if err != nil {
		return api.PowerHistory{}, err
	}
	out := api.PowerHistory{
		WorkerID: workerID, Range: rng, ResolutionSeconds: int(layer.Res),
		Channels: []api.PowerChannel{}, Points: []api.PowerPoint{},
	}
	channels, machine, ok := l.reported(workerID)
	if !ok {
		return out, nil
	}
	out.Channels = channels
	if machine != "" {
		out.Machine = &machine
	}

	first, last := rangeBuckets(now, span, layer.Res)
	out.Points = make([]api.PowerPoint, 0, max(0, (last-first)/layer.Res+1))
	var sys Figures
	// names[i] is the i-th channel key of the bucket before: buckets
	// mostly have the same channels, so a key's string is made once, not
	// once per point.
	var names []string
	err = l.store.Buckets(workerID, layer.Res, first, last, func(start int64, sums []Sum) {
		if len(sums) == 0 {
			return
		}
		values := make(map[string]float64, len(sums))
		for i, s := range sums {
			if i == len(names) {
				names = append(names, "")
			}
			if names[i] != string(s.Key) {
				names[i] = string(s.Key)
			}
			values[names[i]] = s.Joules / s.Covered
			if names[i] == api.ScopeSystem {
				sys.Joules += s.Joules
				sys.Covered += s.Covered
				sys.Peak = max(sys.Peak, s.Peak)
			}
		}
		out.Points = append(out.Points, api.PowerPoint{T: time.Unix(start, 0).UTC(), Values: values})
	})
	if err != nil {
		return api.PowerHistory{}, fmt.Errorf("power history: %w", err)
	}
	out.Totals = api.PowerTotals{
		EnergyKWh: sys.Joules / joulesPerKWh,
		PeakW:     sys.Peak,
		Coverage:  min(1, sys.Covered/span.Seconds()),
	}
	if sys.Covered > 0 {
		out.Totals.AvgW = sys.Joules / sys.Covered
	}
	return out, nil
}

// rangeBuckets is the first and last bucket start (Unix seconds) of res
// seconds in [now-span, now]: the first at or after now-span, the last at
// or before now.
func rangeBuckets(now time.Time, span time.Duration, res int64) (first, last int64) {
	from := now.Add(-span)
	first = from.Unix()
	if from.Nanosecond() > 0 {
		first++ // a bucket starting at the whole second before from is out
	}
	first = max(0, (first+res-1)/res*res)
	return first, now.Unix()
}

// TodayKWh is what the worker's whole machine (system channel) used since
// midnight UTC of now, and false when the worker never recorded a window.
// It reads at most 24 hourly buckets: they are added to as windows
// arrive, like the finer ones, so the current hour's already holds all
// that the minute buckets do and adding those would count it twice.
func (l *Log) TodayKWh(workerID string, now time.Time) (float64, bool) {
	l.mu.Lock()
	st := l.workers[workerID]
	recorded := st != nil && st.through != 0
	l.mu.Unlock()
	if !recorded {
		return 0, false
	}
	y, m, d := now.UTC().Date()
	midnight := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix()
	var joules float64
	err := l.store.Buckets(workerID, hourly().Res, midnight, now.Unix(), func(_ int64, sums []Sum) {
		for _, s := range sums {
			if string(s.Key) == api.ScopeSystem {
				joules += s.Joules
				break
			}
		}
	})
	if err != nil {
		l.log.Error("power today", "worker", workerID, "err", err)
		return 0, false
	}
	return joules / joulesPerKWh, true
}
