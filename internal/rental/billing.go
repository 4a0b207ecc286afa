package rental

import (
	"math"
	"time"

	"github.com/svc-dev/svc/internal/money"
)

// billedSeconds is how long a rental has been billed by now: whole seconds
// from its worker's first connection to its stop (or now). Partial seconds
// are not billed.
func (r *record) billedSeconds(now time.Time) int64 {
	return secondsBetween(r.StartedAt, r.StoppedAt, time.Time{}, now)
}

// secondsBetween is the billed time of [started, stopped or now] that
// falls on or after from.
func secondsBetween(started, stopped *time.Time, from, now time.Time) int64 {
	if started == nil {
		return 0
	}
	begin, end := *started, now
	if stopped != nil && stopped.Before(end) {
		end = *stopped
	}
	if begin.Before(from) {
		begin = from
	}
	if !end.After(begin) {
		return 0
	}
	return int64(end.Sub(begin) / time.Second)
}

// cost is what seconds at pricePerHour come to, rounded to the nearest
// penny (half up). It is computed from the exact seconds each time, so a
// figure never drifts from what a later one says.
func cost(pricePerHour money.GBP, seconds int64) money.GBP {
	if seconds <= 0 || pricePerHour <= 0 {
		return 0
	}
	// price × seconds fits in int64 for any price below £25bn an hour over
	// a century; the division rounds half up.
	return money.GBP((int64(pricePerHour)*seconds + 1800) / 3600)
}

// hours is seconds as hours rounded to four decimals (0.36 s), for display;
// seconds_billed carries the exact figure.
func hours(seconds int64) float64 {
	return math.Round(float64(seconds)/3600*1e4) / 1e4
}

// monthStart is the start of the calendar month (UTC) holding t.
func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// toPence converts a provider's hourly price in minor units of its
// currency to pence at rate (pounds per unit of the currency) with margin
// added, rounded up to the penny so the margin is never eaten by rounding.
func toPence(minor int64, rate, margin float64) (money.GBP, bool) {
	if minor < 0 || rate <= 0 || margin < 0 {
		return 0, false
	}
	v := math.Ceil(float64(minor)*rate*(1+margin) - 1e-9)
	if v > math.MaxInt64/2 {
		return 0, false
	}
	return money.GBP(v), true
}
