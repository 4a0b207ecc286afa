package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/store"
	"github.com/svc-dev/svc/internal/usage"
)

// requestID is a request id as the server makes one: a lower-case UUID.
func requestID(rng *rand.Rand) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", rng.Uint32(), rng.Uint32()&0xffff, rng.Uint32()&0xfff,
		rng.Uint32()&0xfff, rng.Uint64()&0xffffffffffff)
}

// usageRows makes n rows of org within span before Now, with every field
// set or null at random, 13 models, 13 workers and rows with none, and
// statuses of every class. Figures summed as floats are multiples of a
// quarter, which add up exactly in any order.
func usageRows(rng *rand.Rand, n int, span time.Duration) []api.UsageRow {
	statuses := []int{200, 200, 200, 201, 399, 400, 404, 429, 499, 500, 502, 503}
	zone := time.FixedZone("UTC+5", 5*3600)
	rows := make([]api.UsageRow, 0, n)
	for i := range n {
		at := Now.Add(-time.Duration(rng.Int64N(int64(span))))
		if i%7 == 0 {
			at = at.In(zone) // a local time whose date differs from the UTC one near midnight
		}
		maybe := func() bool { return rng.IntN(10) < 7 }
		r := api.UsageRow{
			ID:                requestID(rng),
			CreatedAt:         at,
			Model:             fmt.Sprintf("model-%02d", rng.IntN(13)),
			RequestType:       api.RequestChat,
			StatusCode:        statuses[rng.IntN(len(statuses))],
			PromptTokens:      rng.IntN(5000),
			CompletionTokens:  rng.IntN(2000),
			RequestDurationMs: rng.Int64N(60000),
			Images:            rng.IntN(3),
			Attempts:          1 + rng.IntN(3),
			APIKeyID:          "key",
			Stream:            rng.IntN(2) == 0,
			ColdStart:         rng.IntN(5) == 0,
			TokensEstimated:   rng.IntN(5) == 0,
		}
		r.TotalTokens = r.PromptTokens + r.CompletionTokens
		if w := rng.IntN(14); w < 13 {
			r.WorkerID = api.NullText(fmt.Sprintf("w-%02d", w))
			if rng.IntN(3) > 0 {
				r.WorkerName = api.NullText(fmt.Sprintf("Worker %02d.%d", w, rng.IntN(3)))
			}
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
			r.EnergyWh = ptr(float64(rng.IntN(100)) / 4)
			r.Notice = ptr("context_trimmed")
		}
		if maybe() {
			r.DraftAcceptanceRate = ptr(rng.Float64())
			r.ModelLoadMs = ptr(rng.Int64N(9000))
		}
		if rng.IntN(4) == 0 {
			r.RequestType = api.RequestAudio
			r.AudioSeconds = ptr(float64(rng.IntN(400)) / 4)
			r.AudioFormat = ptr("wav")
		}
		if rng.IntN(8) == 0 {
			r.RequestType = api.RequestSpeech
			r.AudioSeconds, r.AudioFormat = nil, nil
			r.SpeechSeconds = ptr(float64(rng.IntN(400)) / 8)
		}
		if rng.IntN(20) == 0 {
			r.RequestType = api.RequestModeration
			r.ModerationOutcome = ptr("flagged")
			r.ModerationCategories = []string{"violence"}
		}
		rows = append(rows, r)
	}
	return rows
}

// cleaned is a row as a store gives it back.
func cleaned(r api.UsageRow) api.UsageRow {
	usage.Clean(&r)
	return r
}

// recorded is a row and the organisation it was recorded for, in the
// order recorded.
type recorded struct {
	org string
	row api.UsageRow
}

// aggKey names one aggregate: a day's (key ""), a model's or a worker's.
type aggKey struct {
	kind     string
	org, day string
	key      string
}

// bruteAggregates adds rows up as package usage says, without any store.
func bruteAggregates(rows []recorded) (map[aggKey]api.UsageTotals, map[aggKey]string) {
	totals := map[aggKey]api.UsageTotals{}
	names := map[aggKey]string{}
	add := func(k aggKey, r *usage.Rollup) {
		t := totals[k]
		usage.Add(&t, &r.Totals)
		totals[k] = t
	}
	for _, x := range rows {
		row := cleaned(x.row)
		r := usage.RollupOf(&row)
		add(aggKey{"day", x.org, r.Day, ""}, &r)
		add(aggKey{"model", x.org, r.Day, r.Model}, &r)
		if r.WorkerID != "" {
			k := aggKey{"worker", x.org, r.Day, r.WorkerID}
			add(k, &r)
			if r.WorkerName != "" {
				names[k] = r.WorkerName
			} else if _, ok := names[k]; !ok {
				names[k] = ""
			}
		}
	}
	return totals, names
}

// storedAggregates reads every aggregate of orgs.
func storedAggregates(t testing.TB, u store.Usage, orgs ...string) (map[aggKey]api.UsageTotals, map[aggKey]string) {
	t.Helper()
	totals := map[aggKey]api.UsageTotals{}
	names := map[aggKey]string{}
	from, to := "2000-01-01", "2100-12-31"
	for _, org := range orgs {
		err := u.Days(org, from, to, func(day []byte, tt *api.UsageTotals) error {
			totals[aggKey{"day", org, string(day), ""}] = *tt
			return nil
		})
		if err == nil {
			err = u.Models(org, from, to, func(day, model []byte, tt *api.UsageTotals) error {
				totals[aggKey{"model", org, string(day), string(model)}] = *tt
				return nil
			})
		}
		if err == nil {
			err = u.Workers(org, from, to, func(day, id, name []byte, tt *api.UsageTotals) error {
				k := aggKey{"worker", org, string(day), string(id)}
				totals[k], names[k] = *tt, string(name)
				return nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return totals, names
}

// allRows lists every row of org, newest first.
func allRows(t testing.TB, u store.Usage, org string) []api.UsageRow {
	t.Helper()
	rows, err := u.Logs(org, store.UsageQuery{Limit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// checkUsage fails unless the store holds exactly want's rows, each as
// recorded, and totals that are exactly what they add up to.
func checkUsage(t testing.TB, u store.Usage, want []recorded, orgs ...string) {
	t.Helper()
	for _, org := range orgs {
		var w []api.UsageRow
		for _, x := range want {
			if x.org == org {
				w = append(w, cleaned(x.row))
			}
		}
		got := allRows(t, u, org)
		byID := func(a, b api.UsageRow) int { return cmp.Compare(a.ID, b.ID) }
		slices.SortStableFunc(w, byID)
		slices.SortStableFunc(got, byID)
		if len(got) != len(w) {
			t.Errorf("org %s: %d rows stored, want %d", org, len(got), len(w))
		} else {
			for i := range got {
				if !reflect.DeepEqual(got[i], w[i]) {
					t.Errorf("org %s: row stored as\n%+v\nrecorded as\n%+v", org, got[i], w[i])
					break
				}
			}
		}
	}
	wantTotals, wantNames := bruteAggregates(want)
	gotTotals, gotNames := storedAggregates(t, u, orgs...)
	if !reflect.DeepEqual(gotTotals, wantTotals) {
		n := 0
		for k, w := range wantTotals {
			if g := gotTotals[k]; g != w && n < 5 {
				t.Errorf("aggregate %+v: %+v, rows add up to %+v", k, g, w)
				n++
			}
		}
		t.Errorf("%d aggregates stored, rows add up to %d", len(gotTotals), len(wantTotals))
	}
	n := 0
	for k, w := range wantNames {
		if g, ok := gotNames[k]; (!ok || g != w) && n < 5 {
			t.Errorf("worker %+v named %q, want %q", k, g, w)
			n++
		}
	}
	if len(gotNames) != len(wantNames) {
		t.Errorf("%d worker aggregates named, want %d", len(gotNames), len(wantNames))
	}
}

// Totals are exactly what the stored rows add up to, however the rows
// arrive: recorded twice, or shipped again after a crash. A keyed store
// keeps each request once; one that is not keeps what it is handed, and
// its totals count the same.
func usageTotalsEqualRows(t *testing.T, l Logs) {
	rng := rand.New(rand.NewPCG(1, 2))
	orgs := []string{"org", "org-a", "org-ab"}
	var want []recorded
	for i, org := range orgs {
		for _, r := range usageRows(rng, 200*(i+1), 40*24*time.Hour) {
			want = append(want, recorded{org, r})
		}
	}
	rng.Shuffle(len(want), func(i, j int) { want[i], want[j] = want[j], want[i] })
	for _, x := range want {
		l.Usage.Record(x.org, x.row)
	}
	l.Sync(t)
	// The first rows recorded again, as a client retrying with the same
	// request id never does but a replayed batch would.
	again := want[:50]
	for _, x := range again {
		l.Usage.Record(x.org, x.row)
	}
	l.Sync(t)
	if !l.Keyed {
		want = append(want, again...)
	}
	checkUsage(t, l.Usage, want, orgs...)
	if l.Resend != nil {
		l.Resend(t)
		l.Resend(t)
		l.Sync(t)
		checkUsage(t, l.Usage, want, orgs...)
	}
}

// Logs lists an organisation's rows newest first, and no one else's (not
// even an organisation whose id extends its own), filtered by worker,
// paged by limit and offset.
func usageLogsPaged(t *testing.T, l Logs) {
	rng := rand.New(rand.NewPCG(3, 4))
	byOrg := map[string][]api.UsageRow{
		"org":   usageRows(rng, 300, 90*24*time.Hour),
		"org-a": usageRows(rng, 500, 90*24*time.Hour),
	}
	for org, rows := range byOrg {
		for _, r := range rows {
			l.Usage.Record(org, r)
		}
	}
	l.Sync(t)
	filter := func(rows []api.UsageRow, q store.UsageQuery) []api.UsageRow {
		out := []api.UsageRow{}
		for _, r := range rows {
			if (q.WorkerID == "" || string(r.WorkerID) == q.WorkerID) && (q.Status == 0 || r.StatusCode == q.Status) &&
				(q.Model == "" || r.Model == q.Model) {
				out = append(out, cleaned(r))
			}
		}
		// Times are distinct: newest first is by time alone.
		slices.SortFunc(out, func(a, b api.UsageRow) int { return b.CreatedAt.Compare(a.CreatedAt) })
		return out
	}
	for org, rows := range byOrg {
		// "w-1" is a prefix of "w-10" to "w-12", and matches none of them.
		// Status and model filters, alone and with a worker's.
		queries := []store.UsageQuery{{}, {WorkerID: "w-01"}, {WorkerID: "w-12"}, {WorkerID: "w-1"}, {WorkerID: "w-99"},
			{Status: 200}, {Status: 499}, {Status: 418}, {Model: "model-03"}, {Model: "model-3"},
			{WorkerID: "w-01", Status: 200}, {WorkerID: "w-02", Model: "model-04", Status: 200}}
		for _, q := range queries {
			worker := q.WorkerID
			all := filter(rows, q)
			for _, page := range []struct{ limit, offset int }{
				{1, 0}, {7, 0}, {7, 3}, {100, 50}, {1000, 0}, {10, len(all) - 1}, {10, len(all)}, {10, len(all) + 5}, {0, 0}, {-1, 0}, {5, -3},
			} {
				q.Limit, q.Offset = page.limit, page.offset
				got, err := l.Usage.Logs(org, q)
				if err != nil {
					t.Fatal(err)
				}
				want := []api.UsageRow{}
				if page.limit > 0 {
					lo := min(max(page.offset, 0), len(all))
					want = all[lo:min(lo+page.limit, len(all))]
				}
				if got == nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("org %s worker %q status %d model %q limit %d offset %d: %d rows, want %d (first differing at %d)",
						org, worker, q.Status, q.Model, page.limit, page.offset, len(got), len(want), firstDiff(got, want))
				}
			}
		}
	}
	// Organisations without rows: one whose id extends another's, and one
	// whose id another's extends.
	for _, org := range []string{"org-ab", "or"} {
		if got, err := l.Usage.Logs(org, store.UsageQuery{Limit: 10}); err != nil || len(got) != 0 || got == nil {
			t.Fatalf("organisation %s without rows: %v, %v", org, got, err)
		}
	}
}

func firstDiff(a, b []api.UsageRow) int {
	for i := range min(len(a), len(b)) {
		if !reflect.DeepEqual(a[i], b[i]) {
			return i
		}
	}
	return min(len(a), len(b))
}

// Rows of the very same instant are listed newest recorded first.
func usageSameInstant(t *testing.T, l Logs) {
	rng := rand.New(rand.NewPCG(5, 6))
	var ids []string
	for i := range 30 {
		id := requestID(rng)
		ids = append(ids, id)
		r := api.UsageRow{ID: id, CreatedAt: Now, Model: "m", StatusCode: 200, WorkerID: api.NullText(fmt.Sprint("w", i%2))}
		l.Usage.Record("org", r)
		if i%10 == 9 {
			l.Sync(t)
		}
	}
	l.Sync(t)
	slices.Reverse(ids)
	var got []string
	for _, r := range allRows(t, l.Usage, "org") {
		got = append(got, r.ID)
	}
	if !reflect.DeepEqual(got, ids) {
		t.Fatalf("rows of one instant listed\n%v\nrecorded (newest first)\n%v", got, ids)
	}
	page, err := l.Usage.Logs("org", store.UsageQuery{WorkerID: "w1", Limit: 3, Offset: 2})
	if err != nil {
		t.Fatal(err)
	}
	// w1 has the odd rows; newest first they are ids[0], ids[2], ...
	if len(page) != 3 || page[0].ID != ids[4] || page[2].ID != ids[8] {
		t.Fatalf("a filtered page of one instant: %+v", page)
	}
}

// Aggregates are read per day, oldest first, models and workers in byte
// order within a day, only within the window asked for; a worker's
// totals go by the last name a row gave it; and an error of fn ends the
// read and is returned.
func usageAggregates(t *testing.T, l Logs) {
	u := l.Usage
	rng := rand.New(rand.NewPCG(7, 8))
	rec := func(org string, daysAgo int, model, worker, name string, energy *float64) {
		u.Record(org, api.UsageRow{ID: requestID(rng), CreatedAt: Now.AddDate(0, 0, -daysAgo), Model: model,
			StatusCode: 200, TotalTokens: 10, WorkerID: api.NullText(worker), WorkerName: api.NullText(name), EnergyWh: energy})
	}
	rec("o", 4, "m1", "w1", "before", nil) // outside the window
	rec("o", 3, "m1", "w1", "old", ptr(1.5))
	rec("o", 1, "m1", "w1", "old", ptr(0.25))
	rec("o", 1, "a", "w1", "new", nil)
	rec("o", 1, "B", "W9", "upper", nil) // "B" and "W9" sort before "a" and "w1" by byte, after in most locales
	rec("o", 1, "a", "w1", "", nil)      // keeps the name
	rec("o", 1, "a", "", "", nil)        // no worker's
	rec("o", 0, "m1", "w2", "two", nil)  // outside the window
	rec("o2", 1, "m1", "w1", "other", nil)
	l.Sync(t)
	// unmetered counts the rows that measured no energy.
	totals := func(requests int64, energy float64, unmetered int64) string {
		return fmt.Sprintf("%d requests %d tokens %g Wh %d unmetered", requests, 10*requests, energy, 10*unmetered)
	}
	var got []string
	read := func(parts ...[]byte) {
		var b []byte
		for i, p := range parts[:len(parts)-1] {
			if i > 0 {
				b = append(b, ' ')
			}
			b = append(b, p...)
		}
		got = append(got, string(b)+": "+string(parts[len(parts)-1]))
	}
	say := func(t *api.UsageTotals) []byte { return []byte(totals(t.Requests, t.EnergyWh, t.UnmeteredTokens/10)) }
	from, to := Now.AddDate(0, 0, -3).Format(time.DateOnly), Now.AddDate(0, 0, -1).Format(time.DateOnly)
	err := u.Days("o", from, to, func(day []byte, t *api.UsageTotals) error { read(day, say(t)); return nil })
	if err == nil {
		err = u.Models("o", from, to, func(day, model []byte, t *api.UsageTotals) error { read(day, model, say(t)); return nil })
	}
	if err == nil {
		err = u.Workers("o", from, to, func(day, id, name []byte, t *api.UsageTotals) error { read(day, id, name, say(t)); return nil })
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"2026-11-12: " + totals(1, 1.5, 0),
		"2026-11-14: " + totals(5, 0.25, 4),
		"2026-11-12 m1: " + totals(1, 1.5, 0),
		"2026-11-14 B: " + totals(1, 0, 1),
		"2026-11-14 a: " + totals(3, 0, 3),
		"2026-11-14 m1: " + totals(1, 0.25, 0),
		"2026-11-12 w1 old: " + totals(1, 1.5, 0),
		"2026-11-14 W9 upper: " + totals(1, 0, 1),
		"2026-11-14 w1 new: " + totals(3, 0.25, 2),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read\n%q\nwant\n%q", got, want)
	}
	stop := errors.New("stop")
	for name, read := range map[string]func() error{
		"Days": func() error { return u.Days("o", from, to, func([]byte, *api.UsageTotals) error { return stop }) },
		"Models": func() error {
			return u.Models("o", from, to, func(_, _ []byte, _ *api.UsageTotals) error { return stop })
		},
		"Workers": func() error {
			return u.Workers("o", from, to, func(_, _, _ []byte, _ *api.UsageTotals) error { return stop })
		},
	} {
		if err := read(); !errors.Is(err, stop) {
			t.Errorf("%s: an error of fn read as %v", name, err)
		}
	}
	sum, err := usage.Summary(u, "o", 2, Now)
	if err != nil || sum.Requests != 6 {
		t.Errorf("summary of 2 days: %+v, %v", sum, err)
	}
}

// PruneUsage deletes exactly the rows created before the cut-off, of
// every organisation, across whole months and within one, and returns how
// many; the totals stay as they were, and pruning again deletes nothing.
// A cancelled context deletes nothing and says so.
func usagePrune(t *testing.T, l Logs) {
	rng := rand.New(rand.NewPCG(9, 10))
	rows := usageRows(rng, 600, 120*24*time.Hour)
	// The cut-off falls mid-month, to the nanosecond, between two rows.
	cut := Now.AddDate(0, 0, -50).Add(123456789)
	rows = append(rows,
		api.UsageRow{ID: requestID(rng), CreatedAt: cut.Add(-time.Nanosecond), Model: "m", StatusCode: 200, TotalTokens: 1},
		api.UsageRow{ID: requestID(rng), CreatedAt: cut, Model: "m", StatusCode: 200, TotalTokens: 1})
	var all []recorded
	for _, r := range rows {
		all = append(all, recorded{"org", r})
	}
	for _, r := range usageRows(rng, 100, 120*24*time.Hour) {
		all = append(all, recorded{"org-a", r})
	}
	for _, x := range all {
		l.Usage.Record(x.org, x.row)
	}
	l.Sync(t)
	orgs := []string{"org", "org-a"}
	checkUsage(t, l.Usage, all, orgs...)
	before, _ := storedAggregates(t, l.Usage, orgs...)
	kept := map[string][]api.UsageRow{}
	old := 0
	for _, x := range all {
		if x.row.CreatedAt.Before(cut) {
			old++
		} else {
			kept[x.org] = append(kept[x.org], cleaned(x.row))
		}
	}
	if old < 300 || len(kept["org"]) < 100 || len(kept["org-a"]) < 20 {
		t.Fatalf("fixture: %d old rows, %d and %d kept", old, len(kept["org"]), len(kept["org-a"]))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := l.Usage.PruneUsage(ctx, cut); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("PruneUsage after cancel = %d, %v", n, err)
	}
	n, err := l.Usage.PruneUsage(context.Background(), cut)
	if err != nil || n != old {
		t.Fatalf("PruneUsage = %d, %v; %d rows are older", n, err, old)
	}
	for _, org := range orgs {
		got, want := allRows(t, l.Usage, org), kept[org]
		slices.SortFunc(want, func(a, b api.UsageRow) int { return b.CreatedAt.Compare(a.CreatedAt) })
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("org %s: %d rows left, want %d (first differing at %d)", org, len(got), len(want), firstDiff(got, want))
		}
	}
	after, _ := storedAggregates(t, l.Usage, orgs...)
	if !reflect.DeepEqual(after, before) {
		t.Fatal("pruning changed the totals")
	}
	if n, err := l.Usage.PruneUsage(context.Background(), cut); n != 0 || err != nil {
		t.Fatalf("pruning again deleted %d, %v", n, err)
	}
	// Rows still arrive for the months pruned, and count.
	late := api.UsageRow{ID: requestID(rng), CreatedAt: cut.AddDate(0, -2, 0), Model: "m", StatusCode: 200, TotalTokens: 1}
	l.Usage.Record("org", late)
	l.Sync(t)
	if got := allRows(t, l.Usage, "org"); len(got) != len(kept["org"])+1 || got[len(got)-1].ID != late.ID {
		t.Fatalf("a row of a pruned month: %d rows, want %d", len(got), len(kept["org"])+1)
	}
}

// A row recorded before Sync is in every read after it, the log and the
// totals alike; with nothing recorded since, Sync returns at once.
func usageSync(t *testing.T, l Logs) {
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 10 {
		l.Usage.Record("org", api.UsageRow{ID: requestID(rng), Model: "m", StatusCode: 200, CreatedAt: Now})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := l.Usage.Sync(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		rows, err := l.Usage.Logs("org", store.UsageQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		sum, err := usage.Summary(l.Usage, "org", 1, Now)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != i+1 || sum.Requests != int64(i+1) {
			t.Fatalf("after %d rows: %d in the log, %d in the totals", i+1, len(rows), sum.Requests)
		}
	}
	// Nothing pending: Sync does not wait.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := l.Usage.Sync(ctx); err != nil || time.Since(start) > time.Second {
		t.Fatalf("idle Sync: %v after %v", err, time.Since(start))
	}
}
