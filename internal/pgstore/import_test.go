package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/powerlog"
	"github.com/svc-dev/svc/internal/store"
	"github.com/svc-dev/svc/internal/usage"
)

// boltLogs is a bbolt store holding rows of three organisations over
// four months, some pruned since (their totals kept), events and power
// history.
func boltLogs(t *testing.T) (*bolt.Store, *bolt.Usage, *bolt.Events, *bolt.Power) {
	t.Helper()
	b, err := bolt.Open(t.TempDir(), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	w := b.NewWriter(bolt.WriterOptions{Every: time.Hour})
	u, ev, p := b.Usage(w), b.Events(w), b.Power(w)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		r := api.UsageRow{
			ID:               fmt.Sprintf("%08x-0000-4000-8000-%012x", i, rng.Uint64()&0xffffffffffff),
			CreatedAt:        shipNow.Add(-time.Duration(rng.Int64N(int64(120 * 24 * time.Hour)))),
			Model:            fmt.Sprint("model-", rng.IntN(5)),
			RequestType:      api.RequestChat,
			StatusCode:       []int{200, 499, 500}[rng.IntN(3)],
			PromptTokens:     rng.IntN(1000),
			CompletionTokens: rng.IntN(1000),
			EnergyWh:         ptr(float64(rng.IntN(40)) / 4),
		}
		r.TotalTokens = r.PromptTokens + r.CompletionTokens
		if i%10 == 0 {
			r.RequestType, r.PromptTokens, r.CompletionTokens, r.TotalTokens = api.RequestSpeech, 0, 0, 0
			r.SpeechSeconds = ptr(float64(rng.IntN(80)) / 8)
		}
		if w := rng.IntN(6); w < 5 {
			r.WorkerID, r.WorkerName = api.NullText(fmt.Sprint("w", w)), api.NullText(fmt.Sprint("worker ", w))
		}
		u.Record(fmt.Sprint("org-", i%3), r)
	}
	for i := range 50 {
		ev.RecordEvent(fmt.Sprint("org-", i%3), api.WorkerEvent{ID: fmt.Sprint("e", i), WorkerID: "w1",
			EventType: api.EventConnected, CreatedAt: shipNow.Add(-time.Duration(i) * time.Minute), Metadata: map[string]any{"i": "x"}})
	}
	ev.RecordEvent("org-0", api.WorkerEvent{WorkerID: "w2", EventType: api.EventDisconnected, CreatedAt: shipNow})
	h := powerlog.New(p, nil)
	for m := range 90 {
		start := shipNow.Add(time.Duration(m-100) * time.Minute)
		h.Record(fmt.Sprint("w", m%3), api.PowerReport{Machine: api.MethodMeasured, Channels: []api.PowerChannel{{Key: "system", Scope: "system"}},
			Windows: []api.PowerWindow{{Start: start, Seconds: 60, Joules: map[string]float64{"system": float64(m)},
				Covered: map[string]float64{"system": 60}, PeakW: map[string]float64{"system": 2}}}}, shipNow)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, err := u.PruneUsage(context.Background(), shipNow.AddDate(0, 0, -70)); err != nil || n < 1000 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	return b, u, ev, p
}

func ptr[T any](v T) *T { return &v }

// A bbolt store copied into the database reads the same there: rows,
// totals (those of rows pruned too), events and power history; the
// inventories of both sides agree, and copying again changes nothing.
func TestImportLogs(t *testing.T) {
	src, bu, bev, bp := boltLogs(t)
	s := open(t, pg.CreateDB(t))
	ctx := context.Background()
	c, err := s.ImportLogs(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	want, err := src.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != want || c.UsageRows != want.UsageRows || c.NewUsageRows != want.UsageRows || c.NewEvents != want.Events ||
		c.UsageTotals != want.UsageDays+want.UsageModels+want.UsageWorkers || c.PowerBuckets != want.PowerBuckets {
		t.Fatalf("copied %+v:\nthe database holds %+v\nbbolt holds        %+v", c, got, want)
	}
	t.Logf("copied %+v", got)

	again, err := s.ImportLogs(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if again.NewUsageRows != 0 || again.NewEvents != 0 {
		t.Fatalf("copying again added %+v", again)
	}
	if got2, _ := s.Inventory(ctx); got2 != want {
		t.Fatalf("after copying again the database holds %+v", got2)
	}

	// The same reads, from a replica on the copy.
	l := newLocal(t, s, t.TempDir(), nil, nil)
	for i := range 3 {
		org := fmt.Sprint("org-", i)
		for _, q := range []store.UsageQuery{{Limit: 1 << 20}, {WorkerID: "w2", Limit: 30, Offset: 10}} {
			a, err1 := bu.Logs(org, q)
			b, err2 := l.Usage.Logs(org, q)
			if err1 != nil || err2 != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("%s %+v: bbolt lists %d rows, the copy %d (%v, %v)", org, q, len(a), len(b), err1, err2)
			}
		}
		for _, days := range []int{1, 30, 120} {
			a, err1 := usage.Breakdown(bu, org, days, "tokens", shipNow)
			b, err2 := usage.Breakdown(l.Usage, org, days, "tokens", shipNow)
			da, err3 := usage.Daily(bu, org, days, shipNow)
			db, err4 := usage.Daily(l.Usage, org, days, shipNow)
			if err := errorsOf(err1, err2, err3, err4); err != nil || !reflect.DeepEqual(a, b) || !reflect.DeepEqual(da, db) {
				t.Fatalf("%s over %d days: bbolt tells\n%+v\n%+v\nthe copy\n%+v\n%+v (%v)", org, days, a, da, b, db, err)
			}
		}
		a, err1 := bev.ListEvents(org, store.EventQuery{Limit: 100})
		b, err2 := l.Events.ListEvents(org, store.EventQuery{Limit: 100})
		if err1 != nil || err2 != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: bbolt lists events\n%+v\nthe copy\n%+v (%v, %v)", org, a, b, err1, err2)
		}
	}
	type bucket struct {
		start int64
		sums  string
	}
	read := func(p store.Power, worker string, res int64) []bucket {
		var out []bucket
		if err := p.Buckets(worker, res, 0, shipNow.Unix(), func(start int64, sums []powerlog.Sum) {
			out = append(out, bucket{start, fmt.Sprint(sums)})
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, layer := range powerlog.Layers() {
		for w := range 3 {
			id := fmt.Sprint("w", w)
			if a, b := read(bp, id, layer.Res), read(l.Power, id, layer.Res); !reflect.DeepEqual(a, b) || len(a) == 0 {
				t.Fatalf("%s at %d s: bbolt holds %v, the copy %v", id, layer.Res, a, b)
			}
		}
	}
	stored := func(p store.Power) map[string]powerlog.Stored {
		m := map[string]powerlog.Stored{}
		p.Workers(func(id string, st powerlog.Stored) { m[id] = st })
		return m
	}
	if a, b := stored(bp), stored(l.Power); !reflect.DeepEqual(a, b) {
		t.Fatalf("power workers: bbolt %+v, the copy %+v", a, b)
	}
}

func errorsOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
