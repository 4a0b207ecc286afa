package usage

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// usageNow is the clock of the report tests.
var usageNow = time.Date(2026, 11, 15, 10, 0, 0, 0, time.UTC)

// aggKey names one total: its organisation, day and model or worker
// ("" for the day's own).
type aggKey struct{ org, day, id string }

type aggregate struct {
	t    api.UsageTotals
	name string
}

// memAggregates keeps totals in memory as a store does: what each row adds
// up to, by day, by day and model, and by day and worker.
type memAggregates struct {
	days, models, workers map[aggKey]*aggregate
	// fail, when set, is returned by every read.
	fail error
}

func newMemAggregates() *memAggregates {
	return &memAggregates{days: map[aggKey]*aggregate{}, models: map[aggKey]*aggregate{}, workers: map[aggKey]*aggregate{}}
}

func (m *memAggregates) record(org string, row api.UsageRow) {
	Clean(&row)
	r := RollupOf(&row)
	add := func(in map[aggKey]*aggregate, id, name string) {
		k := aggKey{org, r.Day, id}
		a := in[k]
		if a == nil {
			a = &aggregate{}
			in[k] = a
		}
		Add(&a.t, &r.Totals)
		if name != "" {
			a.name = name
		}
	}
	add(m.days, "", "")
	add(m.models, r.Model, "")
	if r.WorkerID != "" {
		add(m.workers, r.WorkerID, r.WorkerName)
	}
}

// each calls fn with in's totals of org from from to to, oldest day first.
func (m *memAggregates) each(in map[aggKey]*aggregate, org, from, to string, fn func(aggKey, *aggregate) error) error {
	if m.fail != nil {
		return m.fail
	}
	var keys []aggKey
	for k := range in {
		if k.org == org && k.day >= from && k.day <= to {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b aggKey) int { return cmp.Or(cmp.Compare(a.day, b.day), cmp.Compare(a.id, b.id)) })
	for _, k := range keys {
		// A copy, as a store decodes a fresh one.
		a := *in[k]
		if err := fn(k, &a); err != nil {
			return err
		}
	}
	return nil
}

func (m *memAggregates) Days(org, from, to string, fn func([]byte, *api.UsageTotals) error) error {
	return m.each(m.days, org, from, to, func(k aggKey, a *aggregate) error { return fn([]byte(k.day), &a.t) })
}

func (m *memAggregates) Models(org, from, to string, fn func(_, _ []byte, _ *api.UsageTotals) error) error {
	return m.each(m.models, org, from, to, func(k aggKey, a *aggregate) error { return fn([]byte(k.day), []byte(k.id), &a.t) })
}

func (m *memAggregates) Workers(org, from, to string, fn func(_, _, _ []byte, _ *api.UsageTotals) error) error {
	return m.each(m.workers, org, from, to, func(k aggKey, a *aggregate) error {
		return fn([]byte(k.day), []byte(k.id), []byte(a.name), &a.t)
	})
}

func TestSummaryAndDailyWindows(t *testing.T) {
	m := newMemAggregates()
	// A request a day for the 40 days up to usageNow, each of as many
	// tokens as days before usageNow, and one tomorrow.
	for d := range 40 {
		m.record("o", api.UsageRow{CreatedAt: usageNow.AddDate(0, 0, -d), StatusCode: 200, TotalTokens: d})
	}
	m.record("o", api.UsageRow{CreatedAt: usageNow.AddDate(0, 0, 1), StatusCode: 200, TotalTokens: 1000})
	m.record("other", api.UsageRow{CreatedAt: usageNow, StatusCode: 200, TotalTokens: 1000})
	tests := []struct {
		name     string
		org      string
		days     int
		now      time.Time
		from, to string
		// ago are the days before usageNow in the window, oldest first
		// (-1: tomorrow; none: no request that day).
		ago []int
	}{
		{"today", "o", 1, usageNow, "2026-11-15", "2026-11-15", []int{0}},
		{"a week", "o", 7, usageNow, "2026-11-09", "2026-11-15", []int{6, 5, 4, 3, 2, 1, 0}},
		{"late in the day", "o", 2, usageNow.Add(13*time.Hour + 59*time.Minute), "2026-11-14", "2026-11-15", []int{1, 0}},
		{"now in a zone whose date is ahead", "o", 2, usageNow.Add(13 * time.Hour).In(time.FixedZone("UTC+5", 5*3600)), "2026-11-14", "2026-11-15", []int{1, 0}},
		{"tomorrow", "o", 2, usageNow.AddDate(0, 0, 1), "2026-11-15", "2026-11-16", []int{0, -1}},
		{"now in a zone whose date is behind", "o", 1, usageNow.Add(-11 * time.Hour).In(time.FixedZone("UTC-11", -11*3600)), "2026-11-14", "2026-11-14", []int{1}},
		{"reaching past the first request", "o", 45, usageNow, "2026-10-02", "2026-11-15", func() []int {
			ago := []int{-2, -2, -2, -2, -2}
			for d := 39; d >= 0; d-- {
				ago = append(ago, d)
			}
			return ago
		}()},
		{"an organisation without requests", "nobody", 3, usageNow, "2026-11-13", "2026-11-15", []int{-2, -2, -2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want api.UsageSummary
			wantDays := []api.UsageDay{}
			first, _ := time.Parse(time.DateOnly, tt.from)
			for i, ago := range tt.ago {
				day := api.UsageDay{Date: first.AddDate(0, 0, i).Format(time.DateOnly)}
				switch {
				case ago == -1:
					day.UsageTotals = api.UsageTotals{Requests: 1, Succeeded: 1, TotalTokens: 1000, UnmeteredTokens: 1000}
				case ago >= 0:
					day.UsageTotals = api.UsageTotals{Requests: 1, Succeeded: 1, TotalTokens: int64(ago), UnmeteredTokens: int64(ago)}
				}
				Add(&want.UsageTotals, &day.UsageTotals)
				wantDays = append(wantDays, day)
			}
			want.Days, want.From, want.To = tt.days, tt.from, tt.to
			sum, err := Summary(m, tt.org, tt.days, tt.now)
			if err != nil || sum != want {
				t.Errorf("summary %+v, %v\nwant %+v", sum, err, want)
			}
			daily, err := Daily(m, tt.org, tt.days, tt.now)
			if err != nil || !reflect.DeepEqual(daily, wantDays) {
				t.Errorf("daily %+v, %v\nwant %+v", daily, err, wantDays)
			}
		})
	}
}

func TestBreakdownTopTenAndTies(t *testing.T) {
	m := newMemAggregates()
	// name: requests, tokens per request (total tokens = requests*tokens).
	spec := []struct {
		name     string
		requests int
		tokens   int
	}{
		{"a", 1, 1000}, // 1000 tokens, 1 request
		{"b", 10, 10},  // 100 tokens
		{"c", 5, 20},   // 100 tokens, fewer requests than b
		{"d", 2, 50},   // 100 tokens
		{"e", 4, 25},   // 100 tokens
		{"f", 4, 25},   // same as e: the name decides
		{"g", 20, 1},   // 20 tokens, most requests
		{"h", 3, 0},
		{"i", 3, 0}, // same as h
		{"j", 1, 7},
		{"k", 1, 6},
		{"l", 1, 5},
		{"m", 1, 0},
	}
	for _, x := range spec {
		for range x.requests {
			m.record("o", api.UsageRow{CreatedAt: usageNow, Model: "model-" + x.name, StatusCode: 200,
				TotalTokens: x.tokens, WorkerID: api.NullText("id-" + x.name), WorkerName: api.NullText(x.name)})
		}
	}
	// Requests refused before they named a model rank as no model, even
	// when they are the most.
	for range 50 {
		m.record("o", api.UsageRow{CreatedAt: usageNow, StatusCode: 403})
	}
	tests := []struct {
		sort, wantSort, want string
	}{
		{"tokens", "tokens", "a b c e f d g j k l"},
		{"", "tokens", "a b c e f d g j k l"},
		{"bogus", "tokens", "a b c e f d g j k l"},
		{"requests", "requests", "g b c e f h i d a j"},
	}
	for _, tt := range tests {
		t.Run(tt.sort, func(t *testing.T) {
			got, err := Breakdown(m, "o", 1, tt.sort, usageNow)
			if err != nil {
				t.Fatal(err)
			}
			if got.Sort != tt.wantSort {
				t.Errorf("sort %q, want %q", got.Sort, tt.wantSort)
			}
			var models, workers []string
			for _, m := range got.Models {
				models = append(models, strings.TrimPrefix(m.Model, "model-"))
			}
			for _, w := range got.Workers {
				workers = append(workers, w.WorkerName)
				if w.WorkerID != "id-"+w.WorkerName {
					t.Errorf("worker %s has id %s", w.WorkerName, w.WorkerID)
				}
			}
			if strings.Join(models, " ") != tt.want || strings.Join(workers, " ") != tt.want {
				t.Errorf("models %q, workers %q, want %q", models, workers, tt.want)
			}
		})
	}
	empty, err := Breakdown(m, "nobody", 30, "", usageNow)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(empty); string(b) != `{"days":30,"from":"2026-10-17","to":"2026-11-15","sort":"tokens","models":[],"workers":[]}` {
		t.Fatalf("empty breakdown encodes as %s", b)
	}
}

// A worker renamed is one entry, under the name of the newest day it ran
// in the window.
func TestBreakdownWorkerNamedAsOnItsNewestDay(t *testing.T) {
	m := newMemAggregates()
	rec := func(daysAgo int, name string) {
		m.record("o", api.UsageRow{CreatedAt: usageNow.AddDate(0, 0, -daysAgo), Model: "m", StatusCode: 200, TotalTokens: 1, WorkerID: "w1", WorkerName: api.NullText(name)})
	}
	rec(2, "old")
	rec(1, "old")
	rec(1, "new") // renamed during that day
	rec(1, "")    // a row without a name keeps the last one
	rec(2, "old") // a late row of an older day
	tests := []struct {
		name     string
		days     int
		now      time.Time
		worker   string
		requests int64
	}{
		{"the renamed day", 2, usageNow, "new", 3},
		{"both days", 3, usageNow, "new", 5},
		{"a month", 30, usageNow, "new", 5},
		{"the older day alone", 1, usageNow.AddDate(0, 0, -2), "old", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Breakdown(m, "o", tt.days, "", tt.now)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Workers) != 1 || b.Workers[0].WorkerName != tt.worker || b.Workers[0].WorkerID != "w1" || b.Workers[0].Requests != tt.requests {
				t.Fatalf("workers %+v, want one w1 named %s with %d requests", b.Workers, tt.worker, tt.requests)
			}
		})
	}
}

// Measured energy adds up, and the breakdown tells it per thousand of the
// tokens whose energy was measured: a model served by workers with and
// without power readings is not credited with the second's tokens.
func TestBreakdownEnergyPer1KTokens(t *testing.T) {
	m := newMemAggregates()
	rows := []api.UsageRow{
		{Model: "both", WorkerID: "w-both", TotalTokens: 1000, EnergyWh: ptr(1.5)},
		{Model: "both", WorkerID: "w-both", TotalTokens: 1000, EnergyWh: ptr(2.5)},
		{Model: "both", WorkerID: "w-both", TotalTokens: 1000},
		{Model: "no-energy", WorkerID: "w-no-energy", TotalTokens: 1000},
		{Model: "no-tokens", WorkerID: "w-no-tokens", EnergyWh: ptr(1.0)},
	}
	for i, r := range rows {
		r.ID, r.CreatedAt, r.StatusCode = fmt.Sprint(i), usageNow, 200
		m.record("o", r)
	}
	want := map[string]*float64{"both": ptr(4.0 / 2), "no-energy": nil, "no-tokens": nil}
	b, err := Breakdown(m, "o", 1, "", usageNow)
	if err != nil {
		t.Fatal(err)
	}
	for _, mu := range b.Models {
		if !reflect.DeepEqual(mu.WhPer1KTokens, want[mu.Model]) {
			t.Errorf("model %s: %v Wh per 1k tokens", mu.Model, mu.WhPer1KTokens)
		}
	}
	for _, wu := range b.Workers {
		if !reflect.DeepEqual(wu.WhPer1KTokens, want[strings.TrimPrefix(wu.WorkerID, "w-")]) {
			t.Errorf("worker %s: %v Wh per 1k tokens", wu.WorkerID, wu.WhPer1KTokens)
		}
	}
	if sum, _ := Summary(m, "o", 1, usageNow); sum.EnergyWh != 5 {
		t.Errorf("summary %v Wh", sum.EnergyWh)
	}
}

func TestReports(t *testing.T) {
	m := newMemAggregates()
	m.record("o", api.UsageRow{CreatedAt: usageNow, StatusCode: 200})
	reports := map[string]func(days int) error{
		"summary":   func(days int) error { _, err := Summary(m, "o", days, usageNow); return err },
		"daily":     func(days int) error { _, err := Daily(m, "o", days, usageNow); return err },
		"breakdown": func(days int) error { _, err := Breakdown(m, "o", days, "", usageNow); return err },
	}
	for name, report := range reports {
		t.Run(name, func(t *testing.T) {
			for _, days := range []int{0, -1} {
				if err := report(days); err == nil {
					t.Errorf("a report of %d days", days)
				}
			}
			m.fail = errors.New("disk on fire")
			defer func() { m.fail = nil }()
			if err := report(1); !errors.Is(err, m.fail) {
				t.Errorf("a failed read reported as %v", err)
			}
		})
	}
}
