package usage

import (
	"math"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Clean makes a row ready to keep: its time in UTC, so that its date is
// the day it counts toward, and each measurement that is not a finite
// number dropped, since the API's JSON cannot carry one and one in a total
// would spoil every total it is added to. For the same reason a count,
// which only a broken engine or worker makes negative or past belief, is
// held to 0..api.MaxTokens, a total to at least the sum of its parts; a
// negative measurement, a timing past api.MaxMs and an acceptance rate
// outside 0..1 are dropped, as DecodeResult drops a worker's.
func Clean(row *api.UsageRow) {
	row.CreatedAt = row.CreatedAt.UTC()
	// A model no worker could list is the client's text: the row and its
	// totals keep what fits a key, rather than fail to be written.
	row.Model = api.ShortModelID(row.Model)
	row.PromptTokens, row.CompletionTokens = count(row.PromptTokens), count(row.CompletionTokens)
	row.TotalTokens = max(count(row.TotalTokens), row.PromptTokens+row.CompletionTokens)
	row.ReasoningTokens, row.CachedTokens = countPtr(row.ReasoningTokens), countPtr(row.CachedTokens)
	row.RequestDurationMs = max(row.RequestDurationMs, 0)
	row.TimeToFirstTokenMs = msWithin(row.TimeToFirstTokenMs)
	row.QueueWaitMs = msWithin(row.QueueWaitMs)
	row.WorkerQueueWaitMs = msWithin(row.WorkerQueueWaitMs)
	row.ModelLoadMs = msWithin(row.ModelLoadMs)
	row.TokensPerSecond = api.Within(row.TokensPerSecond, 0, math.MaxFloat64)
	row.DraftAcceptanceRate = api.Within(row.DraftAcceptanceRate, 0, 1)
	row.AudioSeconds = api.Within(row.AudioSeconds, 0, math.MaxFloat64)
	row.SpeechSeconds = api.Within(row.SpeechSeconds, 0, math.MaxFloat64)
	row.EnergyWh = api.Within(row.EnergyWh, 0, math.MaxFloat64)
}

func count(n int) int { return min(max(n, 0), api.MaxTokens) }

// countPtr is p's count held to its range; a new one when that changes
// it, since p may be shared with the reply it came from.
func countPtr(p *int) *int {
	if p == nil || *p == count(*p) {
		return p
	}
	n := count(*p)
	return &n
}

func msWithin(p *int64) *int64 {
	if p == nil || *p < 0 || *p > api.MaxMs {
		return nil
	}
	return p
}

// Rollup is what one row adds to the totals kept as rows arrive: the
// organisation's of its day, its model's of that day and its worker's.
type Rollup struct {
	// Day is the row's UTC date, YYYY-MM-DD.
	Day   string
	Model string
	// WorkerID is empty for a row that ran on no worker: it counts toward
	// no worker's totals.
	WorkerID string
	// WorkerName is the name the worker's totals of the day go by from
	// now on; empty, it leaves the name they have.
	WorkerName string
	Totals     api.UsageTotals
}

// RollupOf is what a cleaned row adds up to. A status below 400 is a
// success, 499 a request its client cancelled, anything else a failure.
func RollupOf(r *api.UsageRow) Rollup {
	t := api.UsageTotals{
		Requests:          1,
		PromptTokens:      int64(r.PromptTokens),
		CompletionTokens:  int64(r.CompletionTokens),
		TotalTokens:       int64(r.TotalTokens),
		Images:            int64(r.Images),
		RequestDurationMs: r.RequestDurationMs,
	}
	switch {
	case r.StatusCode < 400:
		t.Succeeded = 1
	case r.StatusCode == 499:
		t.Cancelled = 1
	default:
		t.Failed = 1
	}
	if r.ReasoningTokens != nil {
		t.ReasoningTokens = int64(*r.ReasoningTokens)
	}
	if r.CachedTokens != nil {
		t.CachedTokens = int64(*r.CachedTokens)
	}
	if r.AudioSeconds != nil {
		t.AudioSeconds = *r.AudioSeconds
	}
	if r.SpeechSeconds != nil {
		t.SpeechSeconds = *r.SpeechSeconds
	}
	if r.EnergyWh != nil {
		t.EnergyWh = *r.EnergyWh
	} else {
		t.UnmeteredTokens = t.TotalTokens
	}
	return Rollup{Day: r.CreatedAt.UTC().Format(time.DateOnly), Model: r.Model,
		WorkerID: string(r.WorkerID), WorkerName: string(r.WorkerName), Totals: t}
}

// Add adds src to dst. The sums saturate: one row held to its bounds
// (see Clean) cannot overflow them, but a day of enough such rows could,
// and a wrapped total, kept for good, would read negative for ever.
func Add(dst *api.UsageTotals, src *api.UsageTotals) {
	dst.Requests = addInt(dst.Requests, src.Requests)
	dst.Succeeded = addInt(dst.Succeeded, src.Succeeded)
	dst.Failed = addInt(dst.Failed, src.Failed)
	dst.Cancelled = addInt(dst.Cancelled, src.Cancelled)
	dst.PromptTokens = addInt(dst.PromptTokens, src.PromptTokens)
	dst.CompletionTokens = addInt(dst.CompletionTokens, src.CompletionTokens)
	dst.TotalTokens = addInt(dst.TotalTokens, src.TotalTokens)
	dst.ReasoningTokens = addInt(dst.ReasoningTokens, src.ReasoningTokens)
	dst.CachedTokens = addInt(dst.CachedTokens, src.CachedTokens)
	dst.Images = addInt(dst.Images, src.Images)
	dst.RequestDurationMs = addInt(dst.RequestDurationMs, src.RequestDurationMs)
	dst.AudioSeconds = addFloat(dst.AudioSeconds, src.AudioSeconds)
	dst.SpeechSeconds = addFloat(dst.SpeechSeconds, src.SpeechSeconds)
	dst.EnergyWh = addFloat(dst.EnergyWh, src.EnergyWh)
	dst.UnmeteredTokens = addInt(dst.UnmeteredTokens, src.UnmeteredTokens)
}

func addInt(a, b int64) int64 {
	s := a + b
	// Overflow is two addends of one sign and a sum of the other.
	if (a >= 0) == (b >= 0) && (s >= 0) != (a >= 0) {
		if a >= 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// addFloat stops at the largest float64 rather than at infinity, which
// the API's JSON cannot carry. A sum is kept to a millionth, finer than
// anything a row measures (seconds to the millisecond, energy to the
// milliwatt-hour), so that binary fractions do not show through in the
// totals: 1.33 + 0.335 + ... + 0.875 is 4.8, not 4.800000000000001.
func addFloat(a, b float64) float64 {
	s := max(min(a+b, math.MaxFloat64), -math.MaxFloat64)
	if math.Abs(s) < maxRounded {
		s = math.Round(s*1e6) / 1e6
	}
	return s
}

// Tidy keeps t's measured sums to a millionth, as Add does, for sums a
// database made itself (PostgreSQL's sum), which keep the binary noise.
func Tidy(t *api.UsageTotals) {
	t.AudioSeconds = addFloat(t.AudioSeconds, 0)
	t.SpeechSeconds = addFloat(t.SpeechSeconds, 0)
	t.EnergyWh = addFloat(t.EnergyWh, 0)
}

// maxRounded is where a millionth is below a float64's precision.
const maxRounded = 1 << 32
