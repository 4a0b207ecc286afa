package usage

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Aggregates reads the totals a store keeps of an organisation per UTC
// day: the day's, and each model's and each worker's of the day. Each
// calls fn for every total dated from to to (YYYY-MM-DD, both in), oldest
// day first; fn's arguments are valid only during the call, and an error
// it returns ends the read.
type Aggregates interface {
	Days(orgID, from, to string, fn func(day []byte, t *api.UsageTotals) error) error
	Models(orgID, from, to string, fn func(day, model []byte, t *api.UsageTotals) error) error
	// Workers also tells the name the worker went by that day.
	Workers(orgID, from, to string, fn func(day, workerID, name []byte, t *api.UsageTotals) error) error
}

// window is the inclusive range of UTC dates of the last days days.
type window struct {
	first    time.Time
	from, to string
}

func newWindow(days int, now time.Time) (window, error) {
	if days < 1 {
		return window{}, fmt.Errorf("usage window of %d days", days)
	}
	y, m, d := now.UTC().Date()
	last := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	first := last.AddDate(0, 0, -(days - 1))
	return window{first: first, from: first.Format(time.DateOnly), to: last.Format(time.DateOnly)}, nil
}

// Summary totals the last days UTC days up to and including now's day.
func Summary(a Aggregates, orgID string, days int, now time.Time) (api.UsageSummary, error) {
	w, err := newWindow(days, now)
	if err != nil {
		return api.UsageSummary{}, err
	}
	out := api.UsageSummary{Days: days, From: w.from, To: w.to}
	err = a.Days(orgID, w.from, w.to, func(_ []byte, t *api.UsageTotals) error {
		Add(&out.UsageTotals, t)
		return nil
	})
	return out, err
}

// Daily returns one entry per day of the window, oldest first, including
// days with no requests (all zero).
func Daily(a Aggregates, orgID string, days int, now time.Time) ([]api.UsageDay, error) {
	w, err := newWindow(days, now)
	if err != nil {
		return nil, err
	}
	out := make([]api.UsageDay, days)
	for i := range out {
		out[i].Date = w.first.AddDate(0, 0, i).Format(time.DateOnly)
	}
	i := 0
	err = a.Days(orgID, w.from, w.to, func(day []byte, t *api.UsageTotals) error {
		// Both run oldest first, so the slot is found by walking on.
		for i < len(out) && out[i].Date != string(day) {
			i++
		}
		if i == len(out) {
			return errors.New("date outside the window")
		}
		Add(&out[i].UsageTotals, t)
		return nil
	})
	return out, err
}

// Breakdown orders.
const (
	sortTokens   = "tokens"
	sortRequests = "requests"
)

// breakdownTop is how many models and workers a breakdown lists.
const breakdownTop = 10

// Breakdown returns totals per model and per worker over the window, top
// 10 of each, sorted by total tokens (sort "tokens", the default: any
// other value) or by request count (sort "requests"), ties broken by the
// other measure then by name. A worker goes by the name it had on the
// newest day it ran.
func Breakdown(a Aggregates, orgID string, days int, sort string, now time.Time) (api.UsageBreakdown, error) {
	w, err := newWindow(days, now)
	if err != nil {
		return api.UsageBreakdown{}, err
	}
	if sort != sortRequests {
		sort = sortTokens
	}
	out := api.UsageBreakdown{Days: days, From: w.from, To: w.to, Sort: sort, Models: []api.ModelUsage{}, Workers: []api.WorkerUsage{}}
	models := map[string]*api.ModelUsage{}
	workers := map[string]*api.WorkerUsage{}
	err = a.Models(orgID, w.from, w.to, func(_, model []byte, t *api.UsageTotals) error {
		if len(model) == 0 {
			// Requests refused before they named a model (no key, no
			// permission): in the totals, but no model's.
			return nil
		}
		m := models[string(model)] // no allocation for the lookup
		if m == nil {
			m = &api.ModelUsage{Model: string(model)}
			models[m.Model] = m
		}
		Add(&m.UsageTotals, t)
		return nil
	})
	if err != nil {
		return api.UsageBreakdown{}, err
	}
	err = a.Workers(orgID, w.from, w.to, func(_, id, name []byte, t *api.UsageTotals) error {
		wu := workers[string(id)]
		if wu == nil {
			wu = &api.WorkerUsage{WorkerID: string(id)}
			workers[wu.WorkerID] = wu
		}
		Add(&wu.UsageTotals, t)
		// Days come oldest first, so the newest day's name wins.
		if len(name) > 0 && string(name) != wu.WorkerName {
			wu.WorkerName = string(name)
		}
		return nil
	})
	if err != nil {
		return api.UsageBreakdown{}, err
	}
	for _, m := range models {
		m.WhPer1KTokens = whPer1K(&m.UsageTotals)
		out.Models = append(out.Models, *m)
	}
	for _, wu := range workers {
		wu.WhPer1KTokens = whPer1K(&wu.UsageTotals)
		out.Workers = append(out.Workers, *wu)
	}
	slices.SortFunc(out.Models, func(a, b api.ModelUsage) int {
		return cmp.Or(rank(sort, &a.UsageTotals, &b.UsageTotals), cmp.Compare(a.Model, b.Model))
	})
	slices.SortFunc(out.Workers, func(a, b api.WorkerUsage) int {
		return cmp.Or(rank(sort, &a.UsageTotals, &b.UsageTotals),
			cmp.Compare(a.WorkerName, b.WorkerName), cmp.Compare(a.WorkerID, b.WorkerID))
	})
	out.Models = out.Models[:min(len(out.Models), breakdownTop)]
	out.Workers = out.Workers[:min(len(out.Workers), breakdownTop)]
	return out, nil
}

// whPer1K is the energy a thousand tokens took, when both were counted:
// the tokens of the rows that measured their energy, so that a model
// served by workers with and without power readings is not credited with
// the second's tokens for free.
func whPer1K(t *api.UsageTotals) *float64 {
	metered := t.TotalTokens - min(max(t.UnmeteredTokens, 0), t.TotalTokens)
	if t.EnergyWh <= 0 || metered <= 0 {
		return nil
	}
	v := t.EnergyWh * 1000 / float64(metered)
	return &v
}

// rank orders a before b when it has more of the sort's measure, then
// more of the other.
func rank(sort string, a, b *api.UsageTotals) int {
	if sort == sortRequests {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(b.TotalTokens, a.TotalTokens))
	}
	return cmp.Or(cmp.Compare(b.TotalTokens, a.TotalTokens), cmp.Compare(b.Requests, a.Requests))
}
