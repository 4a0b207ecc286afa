package tui

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func storeRetrying() *api.StoreHealth {
	since := t0.Add(-2 * time.Minute)
	return &api.StoreHealth{State: api.StoreRetrying, Error: "disk full", FailingSince: &since,
		PendingUsageRows: 4213, PendingEvents: 3, BacklogBytes: 3_600_000, BacklogLimitBytes: 64 << 20, FailedCommits: 40}
}

func storeRefusing() *api.StoreHealth {
	h := storeRetrying()
	h.State, h.PendingUsageRows, h.BacklogBytes = api.StoreRefusing, 80_412, 64<<20
	h.DroppedEvents, h.DroppedPowerReports = 12, 3
	return h
}

func TestRenderStoreWarning(t *testing.T) {
	st := plainStyles()
	for _, tc := range []struct {
		name string
		w    int
		h    *api.StoreHealth
		want []string
	}{
		{"retrying-140", 140, storeRetrying(), []string{"⚠ usage store: disk full since 11:58:00", "inference served", "4,213 rows waiting", "3.4 MB of 64 MB held"}},
		{"refusing-160", 160, storeRefusing(), []string{"✖ usage store: disk full", "new inference refused (503)", "80.4k rows waiting", "12 events, 3 power reports dropped"}},
		{"refusing-100", 100, storeRefusing(), []string{"✖ usage store: disk full", "new inference refused (503)", "80.4k rows waiting"}},
		{"refusing-80", 80, storeRefusing(), []string{"✖ usage store: disk full", "inference refused", "80.4k rows waiting"}},
		{"refusing-40", 40, storeRefusing(), []string{"✖ usage store: disk full"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := renderStoreWarning(tc.h, t0, tc.w, st)
			requireSize(t, out, tc.w, 1)
			if !containsAll(out, tc.want...) {
				t.Errorf("missing %q in:\n%s", tc.want, out)
			}
			golden(t, out)
		})
	}
}

// While the gateway's store cannot write, a warning line sits under the
// header and the panes give it a line; it goes once the store recovers.
func TestTeaStoreWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake()
		fake.store = storeRefusing()
		tm := startTea(t, fake, 100, 24)
		waitFor(t, tm, "local-sim", "usage store: disk full")
		fake.set(func(f *fakeSource) { f.store = &api.StoreHealth{State: api.StoreOK} })
		waitFor(t, tm, "local-sim")
		m := quit(t, tm)
		view := m.View().Content
		requireSize(t, view, 100, 24)
		if strings.Contains(view, "usage store") {
			t.Errorf("warning left after the store recovered:\n%s", view)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		fake := newFake()
		fake.store = storeRefusing()
		tm := startTea(t, fake, 100, 24)
		waitFor(t, tm, "local-sim", "usage store: disk full")
		m := quit(t, tm)
		view := m.View().Content
		requireSize(t, view, 100, 24)
		if lines := strings.Split(view, "\n"); !strings.Contains(lines[1], "✖ usage store: disk full") {
			t.Errorf("no warning under the header:\n%s", view)
		}
		golden(t, view)
	})
}
