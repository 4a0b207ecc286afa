package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/svc-dev/svc/internal/rental"
)

// Rentals checks a rental ledger: every record saved is returned by All
// as last saved, as the same JSON value (a store may reorder keys or
// spaces, not change values).
//
// open returns the ledger and the fence a write of an organisation's
// rental is made under, which it may set up (a cluster's ledger wants
// the organisation homed).
func Rentals(t *testing.T, open func(t *testing.T) (rental.Ledger, func(orgID string) rental.Fence)) {
	l, fence := open(t)
	if got, err := l.All(); err != nil || len(got) != 0 {
		t.Fatalf("an empty ledger: %d records, %v", len(got), err)
	}
	rec := func(id, status string, extra string) []byte {
		return fmt.Appendf(nil, `{"id":%q,"org_id":"org1","status":%q,"price_pence_per_hour":250,"created_at":"2026-03-31T23:00:00.123456789Z",`+
			`"models":["a","b"],"notes":[{"at":"2026-03-31T23:00:01Z","type":"created","detail":"x \"quoted\" \u00e9"}]%s}`, id, status, extra)
	}
	want := map[string][]byte{}
	f1 := fence("org1")
	save := func(id string, b []byte) {
		t.Helper()
		if err := l.Save(f1, id, b); err != nil {
			t.Fatalf("Save %s: %v", id, err)
		}
		want[id] = b
	}
	for i := range 20 {
		id := fmt.Sprintf("r%02d", i)
		save(id, rec(id, "provisioning", ""))
	}
	save("r03", rec("r03", "running", `,"started_at":"2026-03-31T23:05:00Z"`))
	save("r03", rec("r03", "stopping", `,"started_at":"2026-03-31T23:05:00Z","stop_requested_at":"2026-03-31T23:35:00Z"`))
	save("r03", rec("r03", "stopped", `,"started_at":"2026-03-31T23:05:00Z","stop_requested_at":"2026-03-31T23:35:00Z","stopped_at":"2026-03-31T23:35:00Z"`))
	save("r07", rec("r07", "running", `,"started_at":"2026-03-31T23:06:00.5Z","error":""`))

	got, err := l.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("All: %d records, want %d", len(got), len(want))
	}
	for _, b := range got {
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("All returned %q: %v", b, err)
		}
		id, _ := v["id"].(string)
		var w map[string]any
		if err := json.Unmarshal(want[id], &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(v, w) {
			t.Errorf("record %s:\n got %s\nwant %s", id, b, want[id])
		}
		delete(want, id)
	}

	// Org picks one organisation's records out of All.
	other := []byte(`{"id":"x01","org_id":"org2","status":"provisioning","created_at":"2026-03-31T23:00:00Z"}`)
	if err := l.Save(fence("org2"), "x01", other); err != nil {
		t.Fatalf("Save x01: %v", err)
	}
	for org, n := range map[string]int{"org1": 20, "org2": 1, "org3": 0} {
		got, err := l.Org(org)
		if err != nil {
			t.Fatalf("Org %s: %v", org, err)
		}
		if len(got) != n {
			t.Fatalf("Org %s: %d records, want %d", org, len(got), n)
		}
		for _, b := range got {
			var v struct {
				OrgID string `json:"org_id"`
			}
			if err := json.Unmarshal(b, &v); err != nil || v.OrgID != org {
				t.Fatalf("Org %s returned %s (%v)", org, b, err)
			}
		}
	}
	if all, err := l.All(); err != nil || len(all) != 21 {
		t.Fatalf("All after another organisation's record: %d, %v", len(all), err)
	}
}
