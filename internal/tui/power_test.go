package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/charmbracelet/colorprofile"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
)

var errPlan = &client.Error{Status: 403, Type: api.TypePlanRequired,
	Message: "Power history is part of the Pro and Enterprise plans; this organisation is on free"}

// powerFixtureView is the Power pane over the fixture fleet charting
// subject, whose history is hist (nil: not fetched yet).
func powerFixtureView(subject string, hist *api.PowerHistory) powerView {
	ws := fixtureWorkers()
	v := powerView{workers: connected(ws), loaded: true, today: energyToday{}.note(ws, t0), history: hist, now: t0}
	for _, w := range ws {
		if w.WorkerID == subject {
			v.subject, v.hasSubject = w, true
		}
	}
	return v
}

func TestRenderPower(t *testing.T) {
	st := plainStyles()
	gpuA, gpuB := gpuAHistory(), gpuBHistory()
	none := api.PowerHistory{WorkerID: "wk_01hq3d", Range: api.Range1h, ResolutionSeconds: 60}
	// The wide layout's pane at 160x45 is 61x17.
	const w, h = 61, 17
	for _, tc := range []struct {
		name string
		w, h int
		v    func() powerView
	}{
		{"fleet", w, h, func() powerView { return powerFixtureView("wk_01hq3a", &gpuA) }},
		{"gaps", w, h, func() powerView { return powerFixtureView("wk_01hq3b", &gpuB) }},
		{"no-readings", w, h, func() powerView { return powerFixtureView("wk_01hq3d", &none) }},
		{"loading", w, 12, func() powerView { return powerFixtureView("wk_01hq3a", nil) }},
		{"plan-required", w, 12, func() powerView {
			v := powerFixtureView("wk_01hq3a", nil)
			v.historyErr = errPlan
			return v
		}},
		{"stale-history", w, h, func() powerView {
			v := powerFixtureView("wk_01hq3a", &gpuA)
			v.historyErr = &client.ConnectError{Target: testTarget, Err: errors.New("connection refused")}
			return v
		}},
		// Too short for every worker beside a chart: the list keeps the
		// subject in view.
		{"short", w, 10, func() powerView { return powerFixtureView("wk_01hq3e", nil) }},
		// The narrow layout's pane: the fleet in one line.
		{"narrow", 40, 3, func() powerView { return powerFixtureView("wk_01hq3a", &gpuA) }},
		{"none-reporting", 40, 3, func() powerView {
			v := powerFixtureView("wk_01hq3d", nil)
			v.workers = v.workers[:1] // edge-1
			return v
		}},
		{"waiting", 40, 3, func() powerView { return powerView{} }},
		{"no-workers", 40, 3, func() powerView { return powerView{loaded: true} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := renderPower(tc.v(), tc.w, tc.h, st)
			requireSize(t, out, tc.w, tc.h)
			golden(t, out)
		})
	}
}

// TestRenderPowerColour pins the chart in colour: its lines in the
// series' colours, in braille, the axes dim.
func TestRenderPowerColour(t *testing.T) {
	h := gpuAHistory()
	out := renderPower(powerFixtureView("wk_01hq3a", &h), 61, 17, stylesFor(colorprofile.ANSI))
	requireSize(t, out, 61, 17)
	for _, want := range []string{"\x1b[36m━", "\x1b[35m━", "\x1b[33m━", "\x1b[32m━", "\x1b[90m", "⣀"} {
		if !strings.Contains(out, want) {
			t.Errorf("coloured power pane lacks %q", want)
		}
	}
	golden(t, out)
}

func TestFleetPower(t *testing.T) {
	at := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	f := fleetPower(connected(fixtureWorkers()), energyToday{}.note(fixtureWorkers(), at))
	// gpu-a 498 W measured, gpu-b 421 W and gpu-c 31 W estimated; edge-1
	// and local-sim read nothing; old-box is offline.
	if f.watts != 950 || !f.estimated || f.reporting != 3 || fmt.Sprintf("%.2f", f.todayKWh) != "8.73" || !f.haveToday {
		t.Errorf("fleet = %+v", f)
	}
	// A reading without its system channel sums what it has, as an
	// estimate.
	w, est := machineWatts(&api.LivePower{Watts: map[string]float64{"gpu0": 200, "cpu": 50},
		Channels: []api.PowerChannel{{Key: "gpu0", Scope: api.ScopeGPU}, {Key: "cpu", Scope: api.ScopeCPU}, {Key: "system", Scope: api.ScopeSystem}}})
	if w != 250 || !est {
		t.Errorf("machineWatts = %v, %v", w, est)
	}
}

// What a machine used today stays in the fleet's figure once its worker
// leaves, until the UTC day ends.
func TestEnergyTodayKeepsWorkersGone(t *testing.T) {
	kwh := func(v float64) *api.LivePower { return &api.LivePower{EnergyTodayKWh: &v} }
	at := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	both := []api.Worker{{WorkerID: "a", Power: kwh(2)}, {WorkerID: "b", Power: kwh(3)}}
	aLeft := []api.Worker{{WorkerID: "a", Power: nil, Status: api.StatusOffline}, {WorkerID: "b", Power: kwh(3.5)}}
	e := energyToday{}.note(both, at)
	e = e.note(aLeft, at.Add(time.Minute))
	if f := fleetPower(connected(aLeft), e); !f.haveToday || f.todayKWh != 5.5 {
		t.Fatalf("after a left: %+v, want a's 2 kWh and b's 3.5", f)
	}
	// Drawn when no worker connected reports now, or none is connected.
	none := []api.Worker{{WorkerID: "a", WorkerName: "a", Status: api.StatusOffline}, {WorkerID: "b", WorkerName: "b", Status: api.StatusHealthy}}
	for _, ws := range [][]api.Worker{none, none[:1]} {
		out := renderPower(powerView{workers: connected(ws), loaded: true, today: e, now: t0}, 60, 6, plainStyles())
		if !strings.Contains(out, "5.50 kWh today") {
			t.Errorf("energy today not drawn with %d connected, none reporting:\n%s", len(connected(ws)), out)
		}
	}
	e = e.note(aLeft[1:], time.Date(2026, 1, 3, 0, 1, 0, 0, time.UTC))
	if f := fleetPower(connected(aLeft), e); f.todayKWh != 3.5 {
		t.Fatalf("the next day: %+v, want b's alone", f)
	}
}

func TestPowerSubject(t *testing.T) {
	ws := fixtureWorkers()
	ids := workerIDs(workerRows(ws, ""))
	var l listState
	l = l.sync(ids)
	if w, _ := powerSubject(ws, l); w.WorkerName != "edge-1" {
		t.Errorf("subject %s, want the Workers pane's selection", w.WorkerName)
	}
	// A filter that hides every worker leaves no selection: the first
	// worker reporting power is charted.
	l.filter = "nothing"
	if w, ok := powerSubject(ws, l); !ok || w.WorkerName != "gpu-a" {
		t.Errorf("subject %s, want the first reporting", w.WorkerName)
	}
	if _, ok := powerSubject(nil, listState{}); ok {
		t.Error("a subject without workers")
	}
}

func TestPowerHistoryApply(t *testing.T) {
	var h powerHistory
	h = h.apply(historyMsg{workerID: "a", hist: api.PowerHistory{WorkerID: "a"}})
	h = h.apply(historyMsg{workerID: "a", err: errConn})
	if h.of != "a" || h.errOf != "a" {
		t.Fatalf("a failure dropped the chart: %+v", h)
	}
	h = h.apply(historyMsg{workerID: "b", err: errPlan})
	if h.of != "a" || h.errOf != "b" {
		t.Fatalf("%+v", h)
	}
	h = h.apply(historyMsg{workerID: "b", hist: api.PowerHistory{WorkerID: "b"}})
	if h.of != "b" || h.err != nil {
		t.Fatalf("a success kept the error: %+v", h)
	}
}

// TestHistorySchedule drives the history fetch through Update: at once
// for the first subject, again after historyEvery, at once when the
// selection moves, one at a time, and not while paused.
func TestHistorySchedule(t *testing.T) {
	m := directModel(t, newFake())
	if m.historyBusy {
		t.Fatal("a history fetch before the workers are known")
	}
	fetching := func(want string) {
		t.Helper()
		if !m.historyBusy || m.historyOf != want {
			t.Fatalf("fetching %q (busy %v), want %s", m.historyOf, m.historyBusy, want)
		}
	}
	idle := func() {
		t.Helper()
		if m.historyBusy {
			t.Fatalf("fetching %s, want none", m.historyOf)
		}
	}
	answer := func() {
		t.Helper()
		m, _ = update(t, m, historyMsg{workerID: m.historyOf, hist: api.PowerHistory{WorkerID: m.historyOf}})
	}

	m, _ = update(t, m, okPoll(t0))
	fetching("wk_01hq3d") // edge-1, the Workers pane's first row
	answer()
	idle()
	m, _ = update(t, m, okPoll(t0.Add(10*time.Second)))
	idle() // fetched 10s ago
	m, _ = update(t, m, okPoll(t0.Add(historyEvery)))
	fetching("wk_01hq3d")
	answer()

	m, _ = update(t, m, press("tab"))
	m, _ = update(t, m, press("down"))
	fetching("wk_01hq3a") // the selection moved to gpu-a
	m, _ = update(t, m, press("down"))
	fetching("wk_01hq3a") // gpu-b waits for gpu-a's answer
	answer()
	fetching("wk_01hq3b")
	if m.data.power.of != "wk_01hq3a" {
		t.Errorf("gpu-a's answer was not kept: %+v", m.data.power)
	}
	m, _ = update(t, m, press("space"))
	answer()
	m, _ = update(t, m, press("up"))
	idle() // paused
}

func TestFetchHistory(t *testing.T) {
	fake := newFake()
	msg := fetchHistory(context.Background(), fake, "wk_01hq3b", time.Second)().(historyMsg)
	if msg.err != nil || msg.workerID != "wk_01hq3b" || len(msg.hist.Points) != 50 {
		t.Fatalf("msg = %+v", msg)
	}
	fake.set(func(f *fakeSource) {
		if strings.Join(f.powerQs, ",") != "wk_01hq3b 1h" {
			t.Errorf("asked for %v", f.powerQs)
		}
	})
}

// TestTeaPower runs the dashboard in the wide layout, where the Power
// pane has room for its chart, for a worker with readings, one with gaps
// and one without readings (edge-1, the first selected).
func TestTeaPower(t *testing.T) {
	for _, tc := range []struct {
		name  string
		downs int    // moves down the Workers pane from edge-1
		want  string // drawn once the subject's history has arrived
	}{
		{"no-readings", 0, "no power readings in the last hour"},
		{"readings", 1, "gpu-a  o gpu0  + gpu1  x cpu  * system"},
		{"gaps", 2, "gpu-b  o gpu0  + cpu  x system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake()
				tm := startTea(t, fake, 160, 45)
				waitFor(t, tm, "local-sim")
				send(tm, "tab")
				for range tc.downs {
					send(tm, "down")
				}
				waitFor(t, tm, tc.want)
				m := quit(t, tm)
				view := m.View().Content
				requireSize(t, view, 160, 45)
				if !strings.Contains(view, "950 W now · 8.73 kWh today") || !strings.Contains(view, "3 of 5 reporting") {
					t.Errorf("no fleet summary:\n%s", view)
				}
				golden(t, view)
			})
		})
	}
}
