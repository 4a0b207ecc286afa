package bolt

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
)

// usageNow is the clock of the usage tests: rows reach back 60 days.
var usageNow = time.Date(2026, 11, 15, 10, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// usageRows makes n rows of org spread over the 60 days before usageNow,
// with every field set or null at random, 13 models and 13 workers (and
// rows with no worker), and statuses of every class.
func usageRows(rng *rand.Rand, org string, n int) []api.UsageRow {
	statuses := []int{200, 200, 200, 201, 399, 400, 404, 429, 499, 500, 502, 503}
	zone := time.FixedZone("UTC+5", 5*3600)
	rows := make([]api.UsageRow, 0, n)
	for i := range n {
		// Whole milliseconds keep timestamps distinct from each other.
		at := usageNow.Add(-time.Duration(rng.Int64N(int64(60*24*time.Hour/time.Millisecond))) * time.Millisecond)
		if i%7 == 0 {
			at = at.In(zone) // a local time whose date differs from the UTC one near midnight
		}
		maybe := func() bool { return rng.IntN(10) < 7 }
		r := api.UsageRow{
			ID:                fmt.Sprintf("%s-%d", org, i),
			CreatedAt:         at,
			Model:             fmt.Sprintf("model-%02d", rng.IntN(13)),
			RequestType:       api.RequestChat,
			StatusCode:        statuses[rng.IntN(len(statuses))],
			PromptTokens:      rng.IntN(5000),
			CompletionTokens:  rng.IntN(2000),
			RequestDurationMs: rng.Int64N(60000),
			Images:            rng.IntN(3),
			Attempts:          1 + rng.IntN(3),
			APIKeyID:          "key-" + org,
			Stream:            rng.IntN(2) == 0,
			ColdStart:         rng.IntN(5) == 0,
			TokensEstimated:   rng.IntN(5) == 0,
		}
		r.TotalTokens = r.PromptTokens + r.CompletionTokens
		if w := rng.IntN(14); w < 13 {
			r.WorkerID = api.NullText(fmt.Sprintf("w-%02d", w))
			r.WorkerName = api.NullText(fmt.Sprintf("Worker %02d", w))
		}
		if r.StatusCode >= 400 {
			r.ErrorMessage = ptr("failed")
		}
		if maybe() {
			r.TimeToFirstTokenMs = ptr(rng.Int64N(1000))
			r.TokensPerSecond = ptr(rng.Float64() * 100)
			r.ReasoningTokens = ptr(rng.IntN(500))
			r.CachedTokens = ptr(rng.IntN(500))
			r.QueueWaitMs = ptr(rng.Int64N(100))
			r.WorkerQueueWaitMs = ptr(rng.Int64N(50))
			r.Notice = ptr("context_trimmed")
		}
		if maybe() {
			r.DraftAcceptanceRate = ptr(rng.Float64())
			r.ModelLoadMs = ptr(rng.Int64N(9000))
		}
		if rng.IntN(4) == 0 {
			r.RequestType = "audio"
			// Quarter seconds add up exactly in any order.
			r.AudioSeconds = ptr(float64(rng.IntN(400)) / 4)
			r.AudioFormat = ptr("wav")
		}
		rows = append(rows, r)
	}
	return rows
}

// usageFixture records rows of three organisations, two of whose ids are
// prefixes of another's, in random order over several commits.
func usageFixture(t *testing.T) (*Store, *Usage, map[string][]api.UsageRow) {
	t.Helper()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := s.NewWriter(WriterOptions{})
	u := s.Usage(w)
	rng := rand.New(rand.NewPCG(1, 2))
	byOrg := map[string][]api.UsageRow{
		"org":    usageRows(rng, "org", 300),
		"org-a":  usageRows(rng, "org-a", 2500),
		"org-ab": usageRows(rng, "org-ab", 400),
	}
	var all []struct {
		org string
		row api.UsageRow
	}
	for org, rows := range byOrg {
		for _, r := range rows {
			all = append(all, struct {
				org string
				row api.UsageRow
			}{org, r})
		}
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for i, x := range all {
		u.Record(x.org, x.row)
		if i%1000 == 999 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for org, rows := range byOrg {
		for i := range rows {
			rows[i].CreatedAt = rows[i].CreatedAt.UTC() // as stored
		}
		// Newest first, as Logs lists them.
		sort.Slice(rows, func(i, j int) bool { return rows[i].CreatedAt.After(rows[j].CreatedAt) })
		byOrg[org] = rows
	}
	return s, u, byOrg
}

// bruteAdd counts one row as the rules say, without any of the aggregates.
func bruteAdd(t *api.UsageTotals, r api.UsageRow) {
	t.Requests++
	if r.StatusCode < 400 {
		t.Succeeded++
	} else if r.StatusCode == 499 {
		t.Cancelled++
	} else {
		t.Failed++
	}
	t.PromptTokens += int64(r.PromptTokens)
	t.CompletionTokens += int64(r.CompletionTokens)
	t.TotalTokens += int64(r.TotalTokens)
	if r.ReasoningTokens != nil {
		t.ReasoningTokens += int64(*r.ReasoningTokens)
	}
	if r.CachedTokens != nil {
		t.CachedTokens += int64(*r.CachedTokens)
	}
	t.Images += int64(r.Images)
	if r.AudioSeconds != nil {
		t.AudioSeconds += *r.AudioSeconds
	}
	if r.SpeechSeconds != nil {
		t.SpeechSeconds += *r.SpeechSeconds
	}
	t.RequestDurationMs += r.RequestDurationMs
	if r.EnergyWh != nil {
		t.EnergyWh += *r.EnergyWh
	} else {
		t.UnmeteredTokens += int64(r.TotalTokens)
	}
}

// inDays reports whether the row's UTC date is within [from, to].
func inDays(r api.UsageRow, from, to string) bool {
	day := r.CreatedAt.UTC().Format("2006-01-02")
	return day >= from && day <= to
}

// bruteTotals sums the rows of [from, to].
func bruteTotals(rows []api.UsageRow, from, to string) api.UsageTotals {
	var t api.UsageTotals
	for _, r := range rows {
		if inDays(r, from, to) {
			bruteAdd(&t, r)
		}
	}
	return t
}

// bruteBreakdown ranks models and workers over the rows of [from, to].
func bruteBreakdown(rows []api.UsageRow, from, to, by string) ([]api.ModelUsage, []api.WorkerUsage) {
	byModel := map[string]*api.ModelUsage{}
	byWorker := map[string]*api.WorkerUsage{}
	for _, r := range rows {
		if !inDays(r, from, to) {
			continue
		}
		m := byModel[r.Model]
		if m == nil {
			m = &api.ModelUsage{Model: r.Model}
			byModel[r.Model] = m
		}
		bruteAdd(&m.UsageTotals, r)
		if r.WorkerID == "" {
			continue
		}
		w := byWorker[string(r.WorkerID)]
		if w == nil {
			w = &api.WorkerUsage{WorkerID: string(r.WorkerID), WorkerName: string(r.WorkerName)}
			byWorker[string(r.WorkerID)] = w
		}
		bruteAdd(&w.UsageTotals, r)
	}
	models := []api.ModelUsage{}
	for _, m := range byModel {
		models = append(models, *m)
	}
	workers := []api.WorkerUsage{}
	for _, w := range byWorker {
		workers = append(workers, *w)
	}
	less := func(a, b api.UsageTotals, an, bn string) bool {
		first, second := a.TotalTokens-b.TotalTokens, a.Requests-b.Requests
		if by == "requests" {
			first, second = second, first
		}
		if first != 0 {
			return first > 0
		}
		if second != 0 {
			return second > 0
		}
		return an < bn
	}
	sort.Slice(models, func(i, j int) bool {
		return less(models[i].UsageTotals, models[j].UsageTotals, models[i].Model, models[j].Model)
	})
	sort.Slice(workers, func(i, j int) bool {
		return less(workers[i].UsageTotals, workers[j].UsageTotals, workers[i].WorkerName, workers[j].WorkerName)
	})
	return models[:min(10, len(models))], workers[:min(10, len(workers))]
}

func TestUsageTotalsMatchRows(t *testing.T) {
	_, u, byOrg := usageFixture(t)
	tests := []struct {
		name string
		org  string
		days int
		now  time.Time
	}{
		{"today", "org-a", 1, usageNow},
		{"two days", "org-a", 2, usageNow},
		{"week", "org-a", 7, usageNow},
		{"30 days cut off older rows", "org-a", 30, usageNow},
		{"year", "org-a", 365, usageNow},
		{"window in the past cuts both ends", "org-a", 10, usageNow.AddDate(0, 0, -20)},
		{"now late in the day", "org-a", 3, usageNow.Add(13*time.Hour + 59*time.Minute)},
		{"now given in another zone", "org-a", 5, usageNow.In(time.FixedZone("UTC-11", -11*3600))},
		{"window before any row", "org-a", 5, usageNow.AddDate(0, 0, -100)},
		{"prefix org", "org", 30, usageNow},
		{"longer org", "org-ab", 45, usageNow},
		{"unknown org", "org-z", 30, usageNow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows := byOrg[tt.org]
			last := tt.now.UTC().Truncate(24 * time.Hour)
			from := last.AddDate(0, 0, 1-tt.days).Format("2006-01-02")
			to := last.Format("2006-01-02")

			sum, err := u.Summary(tt.org, tt.days, tt.now)
			if err != nil {
				t.Fatal(err)
			}
			want := api.UsageSummary{Days: tt.days, From: from, To: to, UsageTotals: bruteTotals(rows, from, to)}
			if sum != want {
				t.Errorf("summary\n got %+v\nwant %+v", sum, want)
			}

			daily, err := u.Daily(tt.org, tt.days, tt.now)
			if err != nil {
				t.Fatal(err)
			}
			if len(daily) != tt.days {
				t.Fatalf("%d days, want %d", len(daily), tt.days)
			}
			perDay := map[string]api.UsageTotals{}
			for _, r := range rows {
				day := r.CreatedAt.UTC().Format("2006-01-02")
				t := perDay[day]
				bruteAdd(&t, r)
				perDay[day] = t
			}
			for i, d := range daily {
				date := last.AddDate(0, 0, i+1-tt.days).Format("2006-01-02")
				want := api.UsageDay{Date: date, UsageTotals: perDay[date]}
				if d != want {
					t.Errorf("day %d\n got %+v\nwant %+v", i, d, want)
				}
			}

			for _, by := range []string{"tokens", "requests"} {
				got, err := u.Breakdown(tt.org, tt.days, by, tt.now)
				if err != nil {
					t.Fatal(err)
				}
				models, workers := bruteBreakdown(rows, from, to, by)
				want := api.UsageBreakdown{Days: tt.days, From: from, To: to, Sort: by, Models: models, Workers: workers}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("breakdown by %s\n got %+v\nwant %+v", by, got, want)
				}
			}
		})
	}
}

func TestUsageNonFiniteMeasurementsDoNotSpoilTheBatch(t *testing.T) {
	s, _ := Open(t.TempDir(), Options{})
	defer s.Close()
	w := s.NewWriter(WriterOptions{})
	u := s.Usage(w)
	u.Record("o", api.UsageRow{ID: "a", CreatedAt: usageNow, StatusCode: 200, AudioSeconds: ptr(2.5)})
	u.Record("o", api.UsageRow{ID: "b", CreatedAt: usageNow, StatusCode: 200,
		TokensPerSecond: ptr(math.Inf(1)), DraftAcceptanceRate: ptr(math.NaN()), AudioSeconds: ptr(math.NaN())})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	rows, _ := u.Logs("o", UsageQuery{Limit: 10})
	sum, _ := u.Summary("o", 1, usageNow)
	if len(rows) != 2 || rows[0].TokensPerSecond != nil || rows[0].AudioSeconds != nil || sum.AudioSeconds != 2.5 || sum.Requests != 2 {
		t.Fatalf("rows %+v, summary %+v", rows, sum)
	}
}

// PruneUsage works in rounds of at most pruneBatch rows, which end inside
// an organisation and across organisations' boundaries, and together
// delete exactly the old rows. What pruning keeps, of the rows and the
// totals, is checked on every store by storetest.
func TestUsagePruneInRounds(t *testing.T) {
	_, u, byOrg := usageFixture(t)
	before := usageNow.AddDate(0, 0, -30)
	wantGone := 0
	for _, rows := range byOrg {
		for _, r := range rows {
			if r.CreatedAt.Before(before) {
				wantGone++
			}
		}
	}
	u.pruneBatch = 7
	old, next, err := u.oldRows(nil, before.UnixNano())
	if err != nil || len(old) != 7 || next == nil {
		t.Fatalf("one round finds %d rows, next %q, %v; want 7 and more", len(old), next, err)
	}
	total, err := u.PruneUsage(context.Background(), before)
	if err != nil || total != wantGone {
		t.Fatalf("pruned %d rows, %v; want %d", total, err, wantGone)
	}
	for org, rows := range byOrg {
		var kept []api.UsageRow
		for _, r := range rows {
			if !r.CreatedAt.Before(before) {
				kept = append(kept, r)
			}
		}
		got, _ := u.Logs(org, UsageQuery{Limit: 1 << 30})
		if len(got) != len(kept) {
			t.Fatalf("%s: %d rows left, want %d", org, len(got), len(kept))
		}
		for i := range got {
			if got[i].ID != kept[i].ID {
				t.Fatalf("%s: row %d is %s, want %s", org, i, got[i].ID, kept[i].ID)
			}
		}
	}
}

func TestUsageSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{})
	u := s.Usage(w)
	row := api.UsageRow{ID: "1", CreatedAt: usageNow, Model: "m", StatusCode: 200, TotalTokens: 9, WorkerID: "w", WorkerName: "W"}
	u.Record("o", row)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w = s.NewWriter(WriterOptions{})
	u = s.Usage(w)
	// The same instant again: a new run must not overwrite the old row.
	row.ID = "2"
	u.Record("o", row)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	rows, _ := u.Logs("o", UsageQuery{Limit: 10})
	sum, _ := u.Summary("o", 1, usageNow)
	b, _ := u.Breakdown("o", 1, "", usageNow)
	if len(rows) != 2 || rows[0].ID != "2" || rows[1].ID != "1" {
		t.Fatalf("rows after reopen: %+v", rows)
	}
	if sum.Requests != 2 || sum.TotalTokens != 18 || len(b.Workers) != 1 || b.Workers[0].Requests != 2 {
		t.Fatalf("summary %+v, breakdown %+v", sum, b)
	}
}

func TestUsageTotalsEncoding(t *testing.T) {
	in := api.UsageTotals{Requests: 1, Succeeded: 2, Failed: 3, Cancelled: 4, PromptTokens: 5, CompletionTokens: 6,
		TotalTokens: 7, ReasoningTokens: 8, CachedTokens: 9, Images: 10, AudioSeconds: 11.5, RequestDurationMs: math.MaxInt64 / 2,
		EnergyWh: 12.25, SpeechSeconds: 13.5, UnmeteredTokens: 14}
	b := appendTotals(nil, &in)
	if len(b) != totalsSize {
		t.Fatalf("%d bytes, want %d", len(b), totalsSize)
	}
	var out api.UsageTotals
	rest, err := decodeTotals(&out, append(b, "name"...))
	if err != nil || out != in || string(rest) != "name" {
		t.Fatalf("decoded %+v, %q, %v", out, rest, err)
	}
	for _, bad := range [][]byte{nil, b[:totalsSize-1], append([]byte{9}, b[1:]...), append([]byte{1}, b[1:totalsV1Size-1]...)} {
		if _, err := decodeTotals(&out, bad); err == nil {
			t.Fatalf("%x decoded", bad)
		}
	}
	// An aggregate written before energy was counted reads as none.
	v1 := append([]byte{1}, b[1:totalsV1Size]...)
	out = api.UsageTotals{EnergyWh: 99}
	rest, err = decodeTotals(&out, append(v1, "name"...))
	want := in
	want.EnergyWh, want.SpeechSeconds, want.UnmeteredTokens = 0, 0, 0
	if err != nil || out != want || string(rest) != "name" {
		t.Fatalf("version 1 decoded %+v, %q, %v", out, rest, err)
	}
	// One written before speech seconds were counted reads as none.
	v2 := append([]byte{2}, b[1:totalsV2Size]...)
	out = api.UsageTotals{SpeechSeconds: 99}
	rest, err = decodeTotals(&out, append(v2, "name"...))
	want = in
	want.SpeechSeconds, want.UnmeteredTokens = 0, 0
	if err != nil || out != want || string(rest) != "name" {
		t.Fatalf("version 2 decoded %+v, %q, %v", out, rest, err)
	}
	if _, err := decodeTotals(&out, append([]byte{2}, b[1:totalsV2Size-1]...)); err == nil {
		t.Fatal("a short version 2 aggregate decoded")
	}
	// One written before the tokens without energy were counted reads as
	// having none: all its tokens count as metered, as they did.
	v3 := append([]byte{3}, b[1:totalsV3Size]...)
	out = api.UsageTotals{UnmeteredTokens: 99}
	rest, err = decodeTotals(&out, append(v3, "name"...))
	want = in
	want.UnmeteredTokens = 0
	if err != nil || out != want || string(rest) != "name" {
		t.Fatalf("version 3 decoded %+v, %q, %v", out, rest, err)
	}
}

func TestUsageMalformedAggregateStartsOver(t *testing.T) {
	s, _ := Open(t.TempDir(), Options{})
	defer s.Close()
	w := s.NewWriter(WriterOptions{})
	u := s.Usage(w)
	u.Record("o", api.UsageRow{CreatedAt: usageNow, StatusCode: 200, TotalTokens: 1})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	err := s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketUsageDays).Put([]byte("o\x002026-11-15"), []byte("junk"))
	})
	if err != nil {
		t.Fatal(err)
	}
	u.Record("o", api.UsageRow{ID: "next", CreatedAt: usageNow, StatusCode: 200, TotalTokens: 2})
	if err := w.Flush(); err != nil {
		t.Fatalf("a malformed aggregate failed the commit: %v", err)
	}
	sum, err := u.Summary("o", 1, usageNow)
	if err != nil || sum.Requests != 1 || sum.TotalTokens != 2 {
		t.Fatalf("summary %+v, %v", sum, err)
	}
	if rows, _ := u.Logs("o", UsageQuery{Limit: 10}); len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
}

// A commit sums what its rows add to each aggregate and writes each once:
// the totals and a worker's name come out as if every row had been added
// on its own, and a row whose aggregate the store would refuse (a model
// name past bbolt's longest key) is given up alone, the rest of its
// commit written.
func TestUsageCommitSumsSharedAggregates(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := s.NewWriter(WriterOptions{Every: time.Hour})
	u := s.Usage(w)
	row := func(id, model, worker, name string, tokens int64) api.UsageRow {
		return api.UsageRow{ID: id, CreatedAt: usageNow, Model: model, StatusCode: 200, TotalTokens: int(tokens),
			WorkerID: api.NullText(worker), WorkerName: api.NullText(name)}
	}
	type want struct {
		requests, tokens int64
		models           map[string]int64 // requests
		workerName       string
		rejected         uint64
	}
	check := func(t *testing.T, w *Writer, want want) {
		t.Helper()
		sum, err := u.Summary("o", 1, usageNow)
		if err != nil {
			t.Fatal(err)
		}
		if sum.Requests != want.requests || sum.TotalTokens != want.tokens {
			t.Errorf("summary: %d requests, %d tokens; want %d, %d", sum.Requests, sum.TotalTokens, want.requests, want.tokens)
		}
		b, err := u.Breakdown("o", 1, "requests", usageNow)
		if err != nil {
			t.Fatal(err)
		}
		models := map[string]int64{}
		for _, m := range b.Models {
			models[m.Model] = m.Requests
		}
		if !reflect.DeepEqual(models, want.models) {
			t.Errorf("models %v, want %v", models, want.models)
		}
		if len(b.Workers) != 1 || b.Workers[0].WorkerName != want.workerName || b.Workers[0].Requests != want.requests {
			t.Errorf("workers %+v, want one named %q with %d requests", b.Workers, want.workerName, want.requests)
		}
		if r := w.Backlog().Rejected; r != want.rejected {
			t.Errorf("%d records rejected, want %d", r, want.rejected)
		}
	}

	for _, r := range []api.UsageRow{
		row("1", "m", "w", "First", 5),
		row("2", "m", "w", "", 7),
		// A worker id no store could key (none is so long): its row is
		// refused, and with it what it would add to the aggregates shared.
		row("3", "m", strings.Repeat("x", 40_000), "Refused", 100),
		row("4", "m2", "w", "Second", 11),
		row("5", "m", "w", "", 13),
	} {
		u.Record("o", r)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	check(t, w, want{requests: 4, tokens: 36, models: map[string]int64{"m": 3, "m2": 1}, workerName: "Second", rejected: 1})
	if rows, _ := u.Logs("o", UsageQuery{Limit: 10}); len(rows) != 4 {
		t.Errorf("%d rows listed, want 4", len(rows))
	}

	// A later commit adds to what is stored, and an empty name keeps it.
	u.Record("o", row("6", "m2", "w", "", 1))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	check(t, w, want{requests: 5, tokens: 37, models: map[string]int64{"m": 3, "m2": 2}, workerName: "Second", rejected: 1})
}
