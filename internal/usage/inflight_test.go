package usage

import (
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestTracker(t *testing.T) {
	tr := NewTracker()
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	nop := func() {}
	a := tr.Start("o", "a", "m", api.RequestChat, true, t0.Add(2*time.Second), nop)
	b := tr.Start("o", "b", "m", api.RequestChat, false, t0, nop)
	c := tr.Start("o", "c", "e", api.RequestEmbeddings, false, t0.Add(time.Second), nop)
	tr.Start("other", "x", "m", api.RequestChat, true, t0, nop)
	a.Assign("w1", "one")
	b.Assign("w2", "two")
	now := t0.Add(5 * time.Second)

	got := tr.List("o", "", now)
	if len(got) != 3 || got[0].TaskID != "b" || got[1].TaskID != "c" || got[2].TaskID != "a" {
		t.Fatalf("not oldest first: %+v", got)
	}
	if got[1].State != api.StateQueued || got[1].WorkerID != "" || got[0].State != api.StateRunning {
		t.Fatalf("states: %+v", got)
	}
	if got[2].TokensGenerated != nil {
		t.Fatal("tokens_generated set before the first token")
	}
	a.AddTokens(1)
	a.AddTokens(2)
	b.AddTokens(5) // not streaming: never reported
	got = tr.List("o", "", now)
	if got[2].TokensGenerated == nil || *got[2].TokensGenerated != 3 || got[0].TokensGenerated != nil || got[2].ElapsedMs != 3000 {
		t.Fatalf("tokens: %+v", got)
	}
	if w := tr.List("o", "w1", now); len(w) != 1 || w[0].TaskID != "a" {
		t.Fatalf("worker filter: %+v", w)
	}
	tr.Finish(a)
	tr.Finish(b)
	tr.Finish(c)
	if n := len(tr.List("o", "", now)); n != 0 {
		t.Fatalf("%d left", n)
	}
	if n := len(tr.List("other", "", now)); n != 1 {
		t.Fatalf("other org: %d", n)
	}
}

// StopAll stops every request on the list, of every organisation, and
// none that has finished.
func TestTrackerStopAll(t *testing.T) {
	tr := NewTracker()
	stopped := map[string]int{}
	start := func(org, id string) *Entry {
		return tr.Start(org, id, "m", api.RequestChat, true, time.Now(), func() { stopped[id]++ })
	}
	start("o", "a")
	done := start("o", "b")
	start("other", "c")
	tr.Finish(done)
	if n := tr.StopAll(); n != 2 || stopped["a"] != 1 || stopped["c"] != 1 || stopped["b"] != 0 {
		t.Fatalf("StopAll stopped %d: %v, want a and c once each", n, stopped)
	}
}

func TestEstimateTokens(t *testing.T) {
	for chars, want := range map[int]int{0: 0, 1: 1, 4: 1, 5: 2, 400: 100} {
		if got := EstimateTokens(chars); got != want {
			t.Errorf("EstimateTokens(%d) = %d, want %d", chars, got, want)
		}
	}
}
