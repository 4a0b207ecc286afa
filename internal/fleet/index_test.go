package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

// scanChoice is the worker a request goes to found the way routing did
// before the index: every worker of the organisation asked, then pick.
func (f *Fleet) scanChoice(o *org, need *Need, now time.Time) *worker {
	var cands []candidate
	var ws []*worker
	for _, w := range o.workers {
		if f.eligibleLocked(w, need, now) {
			cands = append(cands, candidate{id: w.id, active: w.active, max: w.slots(need.Model), lastAssigned: w.lastAssigned})
			ws = append(ws, w)
		}
	}
	affinity := ""
	if e, ok := o.affinity.items[need.Affinity]; ok {
		affinity = e.Value.(*lruItem).val
	}
	if i := pick(cands, affinity); i >= 0 {
		return ws[i]
	}
	return nil
}

// checkIndex fails unless o's indexes hold what its workers' states say.
func checkIndex(t *testing.T, o *org, now time.Time) {
	t.Helper()
	for model, ix := range o.models {
		if ix.model != model || len(ix.listed) == 0 {
			t.Fatalf("index %q: model %q, %d listed", model, ix.model, len(ix.listed))
		}
		if !slices.IsSortedFunc(ix.listed, byName) {
			t.Fatalf("index %q: listed out of order", model)
		}
		slots := map[string]int{}
		for i, e := range ix.ready {
			if ix.at[e.h] != i {
				t.Fatalf("index %q: %s at %d, its handle says %d", model, e.w.name, i, ix.at[e.h])
			}
			if i > 0 && ix.before(i, (i-1)/2) {
				t.Fatalf("index %q: heap out of order at %d", model, i)
			}
			w := e.w
			if want := (candidate{id: w.id, active: w.active, max: w.slots(model), lastAssigned: w.lastAssigned}); e.c != want {
				t.Fatalf("index %q: %s placed as %+v, is %+v", model, w.name, e.c, want)
			}
			slots[""] += e.c.max
			for _, c := range w.model(model).Capabilities {
				slots[c] += e.c.max
			}
		}
		for c, n := range ix.slots {
			if slots[c] != n {
				t.Fatalf("index %q: %d slots for %q counted, %d there", model, n, c, slots[c])
			}
		}
	}
	for _, w := range o.workers {
		for _, m := range w.models {
			ready := w.attached && !w.draining && !w.held(m.ID, now)
			ix := o.models[m.ID]
			if ix == nil || !slices.Contains(ix.listed, w) {
				t.Fatalf("%s lists %s but is not listed there", w.name, m.ID)
			}
			in := slices.ContainsFunc(ix.ready, func(e entry) bool { return e.w == w })
			if in != ready {
				t.Fatalf("%s ready for %s: %v, state says %v (attached %v draining %v held %v)",
					w.name, m.ID, in, ready, w.attached, w.draining, w.held(m.ID, now))
			}
		}
		if w.e2eKey != nil && !slices.Contains(o.keys[w.e2eKey.KeyID], w) {
			t.Fatalf("%s holds key %s but is not indexed under it", w.name, w.e2eKey.KeyID)
		}
	}
}

// Routing through the index chooses the worker a scan of every worker
// would, whatever the workers went through: connects, reconnects, drops,
// drains, model changes, failures and hold-backs, and requests with pins,
// conversations, exclusions and capabilities.
func TestIndexChoosesAsAScanWould(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { indexRun(t, seed) })
		})
	}
}

func indexRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	f := New(Config{FailuresBeforeUnhealthy: 2, HoldBack: 300 * time.Millisecond, Grace: 200 * time.Millisecond,
		KeepOffline: 500 * time.Millisecond, Hold: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	const org = "o"
	models := []api.Model{chat("a"), chat("b"), embed("c"), guard("g")}
	conns := map[string]*quietConn{}
	var leases []*Lease
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("w%02d", i))
	}
	connect := func(name string) {
		var ms []api.Model
		for _, m := range models {
			if rng.IntN(2) == 0 {
				ms = append(ms, m)
			}
		}
		hello := api.Hello{Protocol: link.Protocol, Name: name, Version: "v1", MaxConcurrent: 1 + rng.IntN(3),
			SessionID: uuid.NewString(), Models: ms, Draining: rng.IntN(10) == 0}
		if rng.IntN(3) == 0 {
			hello.Features = []string{api.FeatureModeration}
		}
		if rng.IntN(4) == 0 {
			hello.E2EKey = &api.E2EKey{KeyID: fmt.Sprint("k", rng.IntN(3))}
		}
		c := newQuietConn()
		conns[name] = c
		wg.Go(func() { _ = f.Connect(ctx, org, hello, c) })
		synctest.Wait()
	}
	lookup := func(name string) *worker {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.org(org).workers[WorkerID(org, name)]
	}
	for step := range 400 {
		name := names[rng.IntN(len(names))]
		switch op := rng.IntN(10); {
		case op < 2:
			connect(name)
		case op == 2:
			if c := conns[name]; c != nil {
				_ = c.Close() // a drop: the grace period starts
				synctest.Wait()
			}
		case op == 3:
			f.Disconnect(org, WorkerID(org, name), "gone")
			synctest.Wait()
		case op == 4:
			if w := lookup(name); w != nil {
				f.mu.Lock()
				sess := w.sess
				f.mu.Unlock()
				if rng.IntN(2) == 0 {
					f.control(w, sess, link.Frame{Type: link.TypeGoAway})
				} else {
					var ms []api.Model
					for _, m := range models {
						if rng.IntN(2) == 0 {
							ms = append(ms, m)
						}
					}
					b, _ := json.Marshal(ms)
					f.control(w, sess, link.Frame{Type: link.TypeModels, Payload: b})
				}
			}
		case op == 5 && len(leases) > 0:
			i := rng.IntN(len(leases))
			leases[i].Release(Outcome(rng.IntN(3)))
			leases = slices.Delete(leases, i, i+1)
		case op == 6:
			time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
			synctest.Wait()
			f.sweep() // forgets workers offline past KeepOffline
		default:
			need := Need{OrgID: org, Model: models[rng.IntN(len(models))].ID}
			if rng.IntN(2) == 0 {
				need.Capability = api.CapChat
			}
			if rng.IntN(4) == 0 {
				need.Pin = WorkerID(org, names[rng.IntN(len(names))])
			}
			if rng.IntN(3) == 0 {
				need.Affinity = fmt.Sprint("conv", rng.IntN(3))
			}
			if rng.IntN(3) == 0 {
				need.Exclude = []string{WorkerID(org, names[rng.IntN(len(names))])}
			}
			if rng.IntN(5) == 0 {
				need.Moderator = "g"
			}
			if rng.IntN(5) == 0 {
				need.Feature = api.FeatureModeration
			}
			f.mu.Lock()
			now := time.Now()
			o := f.org(org)
			f.unholdLocked(o, now)
			checkIndex(t, o, now)
			want := f.scanChoice(o, &need, now)
			l := f.tryLocked(o, &need, now, now)
			var got *worker
			if l != nil {
				got = l.w
			}
			slots := f.slotsLocked(o, &need)
			scanSlots := 0
			for _, w := range o.workers {
				if w.attached && !w.draining && !w.held(need.Model, now) && w.fits(&need) && (need.Pin == "" || w.id == need.Pin) {
					scanSlots += w.slots(need.Model)
				}
			}
			if need.Pin != "" {
				scanSlots = 0
				if w := o.workers[need.Pin]; w != nil && w.attached && !w.draining && w.fits(&need) {
					scanSlots = w.slots(need.Model)
				}
			}
			f.mu.Unlock()
			if got != want {
				t.Fatalf("step %d: %+v went to %v, a scan chooses %v", step, need, nameOf(got), nameOf(want))
			}
			if slots != scanSlots {
				t.Fatalf("step %d: %+v counts %d slots, a scan %d", step, need, slots, scanSlots)
			}
			if l != nil {
				leases = append(leases, l)
			}
		}
	}
	f.mu.Lock()
	o := f.orgs[org]
	now := time.Now()
	f.unholdLocked(o, now)
	checkIndex(t, o, now)
	f.mu.Unlock()
	// A model is described by the first online worker, by name, listing it.
	listing := f.Workers(org)
	for _, m := range models {
		var want *api.Model
		for _, v := range listing {
			if i := slices.IndexFunc(v.Models, func(x api.Model) bool { return x.ID == m.ID }); v.OfflineSince == nil && i >= 0 {
				want = &v.Models[i]
				break
			}
		}
		if got := f.Model(org, m.ID); (got == nil) != (want == nil) {
			t.Fatalf("model %s: %v, the listing says %v", m.ID, got, want)
		}
		if got := slices.ContainsFunc(f.Models(org), func(x api.Model) bool { return x.ID == m.ID }); got != (want != nil) {
			t.Fatalf("models lists %s: %v, the listing says %v", m.ID, got, want != nil)
		}
	}
}

func nameOf(w *worker) string {
	if w == nil {
		return "none"
	}
	return w.name
}
