package fleet

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

// controls returns a function that hands the fleet a control frame of
// fw's current link in organisation o, as its session's reader would,
// with v as the payload's JSON.
func (h *harness) controls(fw *fakeWorker) func(typ link.Type, v any) {
	h.f.mu.Lock()
	w := h.f.org("o").workers[fw.id]
	sess := w.sess
	h.f.mu.Unlock()
	return func(typ link.Type, v any) {
		b, _ := json.Marshal(v)
		h.f.control(w, sess, link.Frame{Type: typ, Payload: b})
	}
}

func TestCheckHello(t *testing.T) {
	ok := func() api.Hello {
		return api.Hello{Protocol: link.Protocol, Name: "gpu-1", SessionID: "s", MaxConcurrent: 4, Models: []api.Model{chat("m")}}
	}
	many := func(n int) []api.Model {
		ms := make([]api.Model, n)
		for i := range ms {
			ms[i] = chat(fmt.Sprint("m", i))
		}
		return ms
	}
	for _, tc := range []struct {
		name   string
		change func(*api.Hello)
		want   string // in the error; "" for none
	}{
		{"fine", func(*api.Hello) {}, ""},
		{"as many models as may be", func(h *api.Hello) { h.Models = many(maxModels) }, ""},
		{"too many models", func(h *api.Hello) { h.Models = many(maxModels + 1) }, "at most 1024 models"},
		// Models no request could name are left out, the rest kept.
		{"a model id too long", func(h *api.Hello) { h.Models = append(h.Models, chat(strings.Repeat("m", maxModelID+1))) }, ""},
		{"a model id with an escape", func(h *api.Hello) { h.Models = append([]api.Model{chat("m\x1b[2J")}, h.Models...) }, ""},
		{"a model without an id", func(h *api.Hello) { h.Models = append(h.Models, api.Model{}) }, ""},
		{"a name with an escape", func(h *api.Hello) { h.Name = "evil\x1b]0;pwned\x07" }, "control characters"},
		{"a name with a C1 control", func(h *api.Hello) { h.Name = "evil\u009b2J" }, "control characters"},
		{"a name in CJK and emoji", func(h *api.Hello) { h.Name = "計算機-🚀" }, ""},
		{"too many stalled models", func(h *api.Hello) {
			h.Heartbeat = &api.Heartbeat{Stalled: make([]string, maxModels+1)}
		}, "stalled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := ok()
			tc.change(&h)
			err := checkHello(&h)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("checkHello = %v, want %q", err, tc.want)
			}
			for _, m := range h.Models {
				if !api.ValidModelID(m.ID) {
					t.Fatalf("checkHello kept model %q", m.ID)
				}
			}
			if err == nil && len(h.Models) == 0 {
				t.Fatal("checkHello left out every model")
			}
		})
	}
}

// What a worker sends about itself after its hello is held to the same
// bounds: a models frame over them is refused, the worker keeping what it
// listed; of its event reports only model installs are recorded, each
// detail clipped, and at most a burst of them at once.
func TestWorkerReportsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		fw := h.worker("o", "w", 1, chat("m"))
		send := h.controls(fw)

		ms := make([]api.Model, maxModels+1)
		for i := range ms {
			ms[i] = chat(fmt.Sprint("x", i))
		}
		send(link.TypeModels, ms)
		if got := h.settled(fw.id, "o").Models; len(got) != 1 || got[0].ID != "m" {
			t.Fatalf("after a models frame over the bound: %d models", len(got))
		}
		// One model no request could name leaves out itself alone, not
		// the models beside it or the changes after it.
		send(link.TypeModels, []api.Model{chat(strings.Repeat("m", maxModelID+1)), chat("m"), chat("after")})
		if got := h.settled(fw.id, "o").Models; len(got) != 2 || got[0].ID != "after" && got[1].ID != "after" {
			t.Fatalf("after a models frame with a bad id: %+v", got)
		}
		send(link.TypeModels, []api.Model{chat("m")})

		before := len(h.ev.evs)
		for _, typ := range []string{api.EventDisconnected, api.EventApproved, "made_up"} {
			send(link.TypeEvent, api.WorkerEventReport{EventType: typ, Detail: "forged"})
		}
		send(link.TypeEvent, api.WorkerEventReport{EventType: api.EventModelInstall, Detail: "no install"})
		send(link.TypeEvent, api.WorkerEventReport{EventType: api.EventModelInstall,
			Install: &api.ModelInstall{Model: "m", State: api.InstallProgress, Total: 10, Completed: 11}})
		neg, day := -1.0, 24*3600*1000.0
		for _, l := range []*api.ModelLoad{nil, {Model: ""}, {Model: "m", LoadMs: &neg}, {Model: "m", LoadMs: &day}} {
			send(link.TypeEvent, api.WorkerEventReport{EventType: api.EventModelLoaded, Load: l})
		}
		if n := len(h.ev.evs) - before; n != 0 {
			t.Fatalf("%d forged or invalid reports recorded: %+v", n, h.ev.evs[before:])
		}

		send(link.TypeEvent, api.WorkerEventReport{EventType: api.EventModelInstall, Detail: strings.Repeat("é", 1000),
			Install: &api.ModelInstall{Model: "m", State: api.InstallStarted}})
		ev := h.ev.evs[len(h.ev.evs)-1]
		if ev.EventType != api.EventModelInstall || ev.Detail == nil || len(*ev.Detail) > maxReportDetail || !strings.HasSuffix(*ev.Detail, "…") {
			t.Fatalf("a long detail recorded as %+v", ev)
		}
		took := 1500.0
		send(link.TypeEvent, api.WorkerEventReport{EventType: api.EventModelLoaded, Detail: "m loaded to keep (always-on)",
			Load: &api.ModelLoad{Model: "m", LoadMs: &took}})
		ev = h.ev.evs[len(h.ev.evs)-1]
		if ev.EventType != api.EventModelLoaded || ev.Metadata["model_load_ms"] != took || ev.Metadata["always_on"] != true {
			t.Fatalf("an always-on load recorded as %+v", ev)
		}

		before = len(h.ev.evs)
		for range 2 * reportsBurst {
			send(link.TypeEvent, api.WorkerEventReport{EventType: api.EventModelInstall,
				Install: &api.ModelInstall{Model: "m", State: api.InstallProgress, Total: 10, Completed: 5}})
		}
		if n := len(h.ev.evs) - before; n != reportsBurst-2 {
			t.Fatalf("%d of a flood of reports recorded, want the rest of the burst, %d", n, reportsBurst-2)
		}
		time.Sleep(time.Second)
		send(link.TypeEvent, api.WorkerEventReport{EventType: api.EventModelInstall,
			Install: &api.ModelInstall{Model: "m", State: api.InstallCompleted}})
		if last := h.ev.evs[len(h.ev.evs)-1]; last.Metadata["state"] != api.InstallCompleted {
			t.Fatalf("a report a second later was not recorded: %+v", last)
		}
	})
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"a longer one", 10, "a longe…"},
		{"ééééé", 6, "é…"}, // never half a character
	} {
		if got := clip(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// A heartbeat's negative counts are none.
func TestHeartbeatNegativeCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		fw := h.worker("o", "w", 1, chat("m"))
		h.controls(fw)(link.TypeHeartbeat, api.Heartbeat{ActiveTasks: -3, QueueDepth: -7})
		if got := h.settled(fw.id, "o"); got.QueueDepth != 0 || got.ActiveTasks != 0 {
			t.Fatalf("listed queue %d, active %d after a heartbeat of negative counts", got.QueueDepth, got.ActiveTasks)
		}
	})
}

// Two machines under one name would take it from each other for ever:
// once a replaced session has come back maxComebacks times in
// replaceWindow, a newcomer is refused while the link holding the name
// lives, and let in once it has ended. Restarts, each a new session,
// replace as often as they come.
func TestSharedNameStopsReplacing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Grace: 100 * time.Millisecond})
		a := h.worker("o", "w", 1, chat("m"))
		b := &fakeWorker{h: h, hello: api.Hello{Protocol: link.Protocol, Name: "w", Version: "v1", MaxConcurrent: 1,
			SessionID: "other-machine", Models: []api.Model{chat("m")}}}
		b.sess = link.NewSession(link.Options{Role: link.Worker, Accept: b.serve})
		t.Cleanup(func() { b.sess.Close(nil) })
		// welcome connects a session of the name and returns the
		// gateway's answer.
		welcome := func(fw *fakeWorker) api.Welcome {
			hello := fw.hello
			hello.Streams = fw.sess.RecvState()
			w, wc := h.welcome("o", hello)
			if w.Error == "" {
				fw.conn = wc
				if _, err := fw.sess.Attach(wc, w.Streams); err != nil {
					t.Fatal(err)
				}
			}
			synctest.Wait()
			return w
		}
		for i := range 5 {
			restart := &fakeWorker{h: h, hello: b.hello}
			restart.hello.SessionID = fmt.Sprint("restart-", i)
			restart.sess = link.NewSession(link.Options{Role: link.Worker, Accept: restart.serve})
			t.Cleanup(func() { restart.sess.Close(nil) })
			if w := welcome(restart); w.Error != "" {
				t.Fatalf("restart %d refused: %s", i+1, w.Error)
			}
		}
		for i, fw := range []*fakeWorker{b, a} {
			if w := welcome(fw); w.Error != "" {
				t.Fatalf("replacement %d refused: %s", i+1, w.Error)
			}
		}
		w := welcome(b)
		if !strings.Contains(w.Error, "give each its own name") {
			t.Fatalf("a replaced session back a second time: %+v, want refused", w)
		}
		if n := len(h.ev.ofType(api.EventReplaced)); n != 7 {
			t.Fatalf("%d replaced events, want 7", n)
		}
		// The holder goes; a newcomer gets the name.
		_ = a.conn.Close()
		synctest.Wait()
		time.Sleep(time.Second)
		if w := welcome(b); w.Error != "" {
			t.Fatalf("after the holder left: %s", w.Error)
		}
	})
}

// A live power reading with more channels than a machine has, or a
// channel that is no channel's name, is no reading: each channel is a
// series of the gateway's metrics.
func TestLivePowerIsBounded(t *testing.T) {
	many := map[string]float64{}
	for i := range api.MaxPowerChannels + 1 {
		many[fmt.Sprint("gpu", i)] = 1
	}
	for _, tc := range []struct {
		name  string
		watts map[string]float64
		kept  bool
	}{
		{"a machine's", map[string]float64{"gpu0": 300, "cpu": 90, "system": 500}, true},
		{"too many channels", many, false},
		{"an escape in a key", map[string]float64{"gpu0\x1b[2J": 1}, false},
		{"a key too long", map[string]float64{strings.Repeat("g", api.MaxPowerKeyLen+1): 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, Config{})
				fw := h.worker("o", "w", 1, chat("m"))
				h.controls(fw)(link.TypeHeartbeat, api.Heartbeat{Power: &api.LivePower{At: time.Now(), Watts: tc.watts}})
				if got := h.settled(fw.id, "o").Power; (got != nil) != tc.kept {
					t.Fatalf("power %+v, kept %v", got, tc.kept)
				}
			})
		})
	}
}

// An organisation's fleet lists at most MaxWorkers workers: a newcomer past
// it takes the place of the worker offline longest, and while every one is
// connected it is refused for now, with a wait, not for good.
func TestFleetIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{MaxWorkers: 3, Grace: 100 * time.Millisecond})
		a := h.worker("o", "a", 1, chat("m"))
		b := h.worker("o", "b", 1, chat("m"))
		c := h.worker("o", "c", 1, chat("m"))

		hello := api.Hello{Protocol: link.Protocol, Name: "d", SessionID: "s", MaxConcurrent: 1, Models: []api.Model{chat("m")}}
		if w, _ := h.welcome("o", hello); !strings.Contains(w.Error, "3 workers, none offline") || w.RetryAfterS != 60 {
			t.Fatalf("a fourth worker while three are connected: %+v, want refused for a minute", w)
		}

		for _, fw := range []*fakeWorker{b, c} {
			_ = fw.conn.Close()
			time.Sleep(time.Second)
			h.expect(fw.id, "o", api.StatusOffline)
		}
		d := h.worker("o", "d", 1, chat("m"))
		listed := map[string]bool{}
		for _, w := range h.f.Workers("o") {
			listed[w.WorkerID] = true
		}
		if len(listed) != 3 || !listed[a.id] || listed[b.id] || !listed[c.id] || !listed[d.id] {
			t.Fatalf("listed %v: want a, c and d, b (offline longest) forgotten", listed)
		}
	})
}

// An organisation's worker connections are held to a rate after a burst
// as large as its fleet: a restart brings them all back at once.
func TestWorkerConnectsAreRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := New(Config{})
		for i := range connectBurst {
			if wait := f.AllowConnect("o"); wait != 0 {
				t.Fatalf("connection %d of the burst told to wait %v", i+1, wait)
			}
		}
		wait := f.AllowConnect("o")
		if wait <= 0 || wait > time.Second/20 {
			t.Fatalf("past the burst: wait %v, want up to %v", wait, time.Second/20)
		}
		time.Sleep(wait)
		if wait := f.AllowConnect("o"); wait != 0 {
			t.Fatalf("after the wait: told to wait %v more", wait)
		}
		if wait := f.AllowConnect("other"); wait != 0 {
			t.Fatalf("another organisation told to wait %v", wait)
		}

		// A fleet larger than the burst comes back whole.
		const big = 3 * connectBurst
		f.mu.Lock()
		o := f.org("big")
		for i := range big {
			id := fmt.Sprint("w", i)
			o.workers[id] = &worker{id: id, orgID: "big", offlineSince: time.Now()}
		}
		f.mu.Unlock()
		for i := range big {
			if wait := f.AllowConnect("big"); wait != 0 {
				t.Fatalf("worker %d of %d told to wait %v", i+1, big, wait)
			}
		}
		if wait := f.AllowConnect("big"); wait == 0 {
			t.Fatal("past the fleet's size: no wait")
		}
	})
}
