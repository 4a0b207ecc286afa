package bolt

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/powerlog"
)

// Reading a store out yields every row, aggregate, event and power
// bucket once, as the store's own reads tell them, and the counts of the
// inventory.
func TestExportReadsEverythingOnce(t *testing.T) {
	s, u, byOrg := usageFixture(t)
	// A row stored as JSON, from before the compact layout, is handed out
	// in the compact one.
	old := api.UsageRow{ID: "json-row", CreatedAt: usageNow, Model: "m", StatusCode: 200, WorkerID: "w-01"}
	err := s.db.Update(func(tx *bbolt.Tx) error {
		v, _ := json.Marshal(old)
		return tx.Bucket(bucketUsageRows).Put(timeKey("org", old.CreatedAt, 1), v)
	})
	if err != nil {
		t.Fatal(err)
	}
	byOrg["org"] = append(byOrg["org"], old)

	got := map[string][]api.UsageRow{}
	rows := 0
	err = s.EachUsageRow(func(org string, r api.UsageRow, data []byte) error {
		rows++
		got[org] = append(got[org], r)
		if back, err := DecodeUsageRow(data); err != nil || !reflect.DeepEqual(back, r) || data[0] == '{' {
			t.Errorf("row %s: its data reads %+v, %v", r.ID, back, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	byID := func(a, b api.UsageRow) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	}
	for org, want := range byOrg {
		g := slices.Clone(got[org])
		w := slices.Clone(want)
		slices.SortFunc(g, byID)
		slices.SortFunc(w, byID)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("org %s: %d rows read out, %d stored", org, len(g), len(w))
		}
	}

	// The aggregates read out are those the store's reads tell.
	from, to := "2000-01-01", "2100-01-01"
	type key struct {
		kind          TotalsKind
		org, day, key string
	}
	want := map[key]api.UsageTotals{}
	names := map[key]string{}
	for org := range byOrg {
		err := u.Days(org, from, to, func(day []byte, t *api.UsageTotals) error {
			want[key{TotalsDay, org, string(day), ""}] = *t
			return nil
		})
		if err == nil {
			err = u.Models(org, from, to, func(day, m []byte, t *api.UsageTotals) error {
				want[key{TotalsModel, org, string(day), string(m)}] = *t
				return nil
			})
		}
		if err == nil {
			err = u.Workers(org, from, to, func(day, id, name []byte, t *api.UsageTotals) error {
				k := key{TotalsWorker, org, string(day), string(id)}
				want[k], names[k] = *t, string(name)
				return nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[key]bool{}
	err = s.EachUsageTotal(func(ut UsageTotal) error {
		k := key{ut.Kind, ut.OrgID, ut.Day, ut.Key}
		if seen[k] {
			t.Errorf("aggregate %+v read out twice", k)
		}
		seen[k] = true
		if w, ok := want[k]; !ok || w != ut.Totals || names[k] != ut.Name {
			t.Errorf("aggregate %+v: %+v %q, stored %+v %q", k, ut.Totals, ut.Name, w, names[k])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(want) {
		t.Errorf("%d aggregates read out, %d stored", len(seen), len(want))
	}

	// Events and power.
	w := s.NewWriter(WriterOptions{})
	ev := s.Events(w)
	ev.RecordEvent("org", api.WorkerEvent{ID: "e1", EventType: "connected", CreatedAt: usageNow})
	ev.RecordEvent("org-b", api.WorkerEvent{ID: "e2", EventType: "disconnected", CreatedAt: usageNow})
	p := s.Power(w)
	meta := &powerlog.Meta{Channels: testChannels, Machine: "sum"}
	p.Add("w1", []powerlog.Delta{
		{Res: 60, Start: at(0).Unix(), Sums: sums("cpu", reading{1, 2, 3})},
		{Res: 3600, Start: at(0).Unix(), Sums: sums("cpu", reading{1, 2, 3})},
	}, at(1).UnixNano(), meta)
	p.Add("w0", nil, 0, meta)
	p.Add("w2", []powerlog.Delta{{Res: 300, Start: at(0).Unix(), Sums: sums("system", reading{4, 5, 6})}}, at(1).UnixNano(), nil)
	flush(t, w)
	var events []string
	err = s.EachEvent(func(org string, e api.WorkerEvent, data []byte) error {
		events = append(events, org+" "+e.ID+" "+e.EventType)
		var back api.WorkerEvent
		if err := json.Unmarshal(data, &back); err != nil || back.ID != e.ID {
			t.Errorf("event %s: data %s", e.ID, data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(events, []string{"org e1 connected", "org-b e2 disconnected"}) {
		t.Errorf("events %q", events)
	}
	var buckets []PowerBucket
	if err := s.EachPowerBucket(func(b PowerBucket) error { buckets = append(buckets, b); return nil }); err != nil {
		t.Fatal(err)
	}
	wantBuckets := []PowerBucket{
		{"w1", 60, at(0).Unix(), sums("cpu", reading{1, 2, 3})},
		{"w2", 300, at(0).Unix(), sums("system", reading{4, 5, 6})},
		{"w1", 3600, at(0).Unix(), sums("cpu", reading{1, 2, 3})},
	}
	if !reflect.DeepEqual(buckets, wantBuckets) {
		t.Errorf("power buckets %+v, want %+v", buckets, wantBuckets)
	}
	var workers []string
	stored := map[string]powerlog.Stored{}
	err = s.EachPowerWorker(func(id string, st powerlog.Stored) error {
		workers = append(workers, id)
		stored[id] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(workers, []string{"w0", "w1", "w2"}) || stored["w0"].Through != 0 || stored["w0"].Meta == nil ||
		stored["w1"].Through != at(1).UnixNano() || !reflect.DeepEqual(stored["w1"].Meta, meta) || stored["w2"].Meta != nil {
		t.Errorf("power workers %q: %+v", workers, stored)
	}

	inv, err := s.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	days, models, workerAggs := 0, 0, 0
	for k := range want {
		switch k.kind {
		case TotalsDay:
			days++
		case TotalsModel:
			models++
		case TotalsWorker:
			workerAggs++
		}
	}
	wantInv := Inventory{UsageRows: rows, UsageDays: days, UsageModels: models, UsageWorkers: workerAggs,
		Events: 2, PowerBuckets: 3, PowerWorkers: 3}
	if inv != wantInv {
		t.Errorf("inventory %+v, want %+v", inv, wantInv)
	}
}
