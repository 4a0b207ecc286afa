package usage

import (
	"math"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Clean makes a row ready to keep: its time in UTC, so that its date is
// the day it counts toward, and each measurement that is not a finite
// number dropped, since the API's JSON cannot carry one and one in a total
// would spoil every total it is added to; for the same reason a negative
// count, which only a broken engine or worker reports, is 0.
func Clean(row *api.UsageRow) {
	row.CreatedAt = row.CreatedAt.UTC()
	row.PromptTokens, row.CompletionTokens, row.TotalTokens = max(row.PromptTokens, 0), max(row.CompletionTokens, 0), max(row.TotalTokens, 0)
	row.TokensPerSecond = finite(row.TokensPerSecond)
	row.DraftAcceptanceRate = finite(row.DraftAcceptanceRate)
	row.AudioSeconds = finite(row.AudioSeconds)
	row.SpeechSeconds = finite(row.SpeechSeconds)
	row.EnergyWh = finite(row.EnergyWh)
}

func finite(p *float64) *float64 {
	if p == nil || math.IsNaN(*p) || math.IsInf(*p, 0) {
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
	}
	return Rollup{Day: r.CreatedAt.UTC().Format(time.DateOnly), Model: r.Model,
		WorkerID: string(r.WorkerID), WorkerName: string(r.WorkerName), Totals: t}
}

// Add adds src to dst.
func Add(dst *api.UsageTotals, src *api.UsageTotals) {
	dst.Requests += src.Requests
	dst.Succeeded += src.Succeeded
	dst.Failed += src.Failed
	dst.Cancelled += src.Cancelled
	dst.PromptTokens += src.PromptTokens
	dst.CompletionTokens += src.CompletionTokens
	dst.TotalTokens += src.TotalTokens
	dst.ReasoningTokens += src.ReasoningTokens
	dst.CachedTokens += src.CachedTokens
	dst.Images += src.Images
	dst.RequestDurationMs += src.RequestDurationMs
	dst.AudioSeconds += src.AudioSeconds
	dst.SpeechSeconds += src.SpeechSeconds
	dst.EnergyWh += src.EnergyWh
}
