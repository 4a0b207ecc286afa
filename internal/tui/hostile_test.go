package tui

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
)

// hostile is what a worker may call itself to take over the terminal of
// whoever watches it: clear the screen, turn the rest red, set the window
// title and ring, go back over the line; a C1 CSI and a right-to-left
// override besides.
const hostile = "ansi\x1b[2J\x1b[31mEVIL\x1b]0;pwned\x07\r\b\bname\u009b2J\u202eevil"

// hostileShown is the start of hostile as the dashboard shows it, short
// enough for a narrow column.
const hostileShown = `ansi\x1b[2J\x1b[31mEVIL`

// ownSGR are the dashboard's own styles: colours, bold, reverse, resets.
var ownSGR = regexp.MustCompile("\x1b\\[[0-9;:]*m")

// requireInert fails when frame holds anything of the API's text that a
// terminal would act on. The dashboard's own SGR styling is fine, but
// hostile carries an SGR of its own, which must not come through raw.
func requireInert(t *testing.T, what, frame string) {
	t.Helper()
	for _, raw := range []string{"\x1b[31mEVIL", "\x1b[2J", "\x1b]", "\x1b[8m", "\x1b[1A"} {
		if strings.Contains(frame, raw) {
			t.Errorf("%s passes %q through:\n%s", what, raw, frame)
		}
	}
	s := ownSGR.ReplaceAllString(frame, "")
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			t.Errorf("%s has byte %#x", what, s[i])
		case r == '\n':
		case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			t.Errorf("%s has %U at %d:\n%q", what, r, i, s)
		}
		i += n
	}
}

func hostileWorkers() []api.Worker {
	ws := fixtureWorkers()
	w := &ws[0]
	w.WorkerName, w.Version = hostile, "v1.2.0+\x1b[5m"
	w.Models[0].ID = "llama\x1b[8m:8b\tx\ny"
	w.Models[0].Capabilities = []string{"chat\x07"}
	w.Models[0].Engine = "ollama\r"
	w.Engines = []api.EngineInfo{{Kind: "ollama\x1b[0m", URL: "http://127.0.0.1:11434/\x1b]8;;http://evil/\x07x"}}
	w.Power.Channels = append(w.Power.Channels, api.PowerChannel{Key: "gpu\x1b[2J\u202e", Scope: api.ScopeGPU, Method: api.MethodMeasured})
	w.Power.Watts["gpu\x1b[2J\u202e"] = 12
	return ws
}

func hostileEvents() []api.WorkerEvent {
	ev := fixtureEvents()
	ev[0].EventType = "model_loaded\x1b[31m"
	ev[0].Detail = ptr("loaded\x1b[1A\x1b[2K all good\r\nnext\u0085line")
	ev[1].Actor = ptr("alice\x1b[8m")
	return ev
}

func hostileInflight() []api.InflightRequest {
	rs := fixtureInflight()
	rs[0].Model, rs[0].WorkerName, rs[0].State = "llama\x1b[31m:8b", hostile, "running\x1b[2J"
	return rs
}

func hostileRentals() []api.Rental {
	rs := activeRentals()
	rs[0].BootPhase = ptr("pulling_\x1b[2J_image")
	rs[1].Name, rs[1].Label = hostile, "A100\x1b]0;x\x07"
	return rs
}

func hostileHistory() api.PowerHistory {
	key := "gpu\x1b[2J\u202e"
	chs := append(gpuAChannels(), api.PowerChannel{Key: key, Scope: api.ScopeGPU, Method: api.MethodMeasured})
	return history("wk_01hq3a", chs, api.MethodMeasured, func(i int) map[string]float64 {
		return map[string]float64{"gpu0": 300, "gpu1": 200, "cpu": 50, "system": 600, key: float64(10 + i)}
	})
}

// Every pane and details view draws the API's text escaped, with colour
// and without: the only escapes in a frame are the dashboard's own.
func TestHostileRender(t *testing.T) {
	ws := workerRows(hostileWorkers(), "")
	rs := inflightRows(hostileInflight(), "")
	var req api.InflightRequest
	for _, r := range rs {
		if r.WorkerName == hostile {
			req = r
		}
	}
	hist := hostileHistory()
	store := &api.StoreHealth{State: api.StoreRetrying, Error: "disk \x1b[2Jfull\r\u009b"}
	for _, p := range []colorprofile.Profile{colorprofile.ASCII, colorprofile.ANSI} {
		st := stylesFor(p)
		renders := map[string]string{
			"workers": renderWorkers(workersView{rows: ws, total: len(ws), cursor: 0, latest: "v1.3.0", focused: true, loaded: true}, 160, 10, st),
			"worker details": renderWorkerDetails(workerDetailsView{worker: ws[0], latest: "v1.3.0", events: hostileEvents(),
				eventsLoaded: true, now: t0}, 160, 40, st),
			"events error": renderWorkerDetails(workerDetailsView{worker: ws[0], eventsLoaded: true, now: t0,
				eventsErr: &client.Error{Status: 500, Message: "boom\x1b[2J"}}, 160, 40, st),
			"inflight":        renderInflight(inflightView{rows: rs, total: len(rs), cursor: 0, focused: true, loaded: true, now: t0}, 160, 10, st),
			"request details": renderRequestDetails(requestDetailsView{req: req, now: t0}, 100, 14, st),
			"rental": renderRental(func() rentalView {
				lines, mtd := rentalData{rentals: hostileRentals(), haveRentals: true}.active(t0)
				return rentalView{lines: lines, monthToDate: mtd, loaded: true}
			}(), 80, 8, st),
			"power": renderPower(powerView{workers: connected(ws), loaded: true, today: energyToday{}.note(ws, t0),
				subject: ws[0], hasSubject: true, history: &hist, now: t0}, 100, 20, st),
			"power error": renderPower(powerView{workers: connected(ws), loaded: true, subject: ws[0], hasSubject: true,
				historyErr: &client.Error{Status: 502, Message: "bad\x1b]0;x\x07gateway"}, now: t0}, 100, 20, st),
			"status":        renderStatus(statusView{err: "gateway error 500: " + hostile, retryIn: time.Second}, 160, st),
			"store warning": renderStoreWarning(store, t0, 160, st),
		}
		for name, out := range renders {
			t.Run(fmt.Sprintf("%s/%s", p, name), func(t *testing.T) {
				requireInert(t, name, out)
				if p == colorprofile.ASCII && strings.Contains(out, "\x1b") {
					t.Errorf("ESC without colour:\n%s", out)
				}
			})
		}
		for name, want := range map[string]string{
			"workers":         hostileShown,
			"worker details":  `loaded\x1b[1A\x1b[2K all good\r\nnext\u0085line`,
			"inflight":        `llama\x1b[31m:8b`,
			"request details": `running\x1b[2J`,
			"power":           `gpu\x1b[2J\u202e`,
			"status":          hostileShown,
			"store warning":   `disk \x1b[2Jfull\r\u009b`,
		} {
			if !strings.Contains(ownSGR.ReplaceAllString(renders[name], ""), want) {
				t.Errorf("%s %s lacks %q:\n%s", p, name, want, renders[name])
			}
		}
	}
}

// A hostile fleet drawn through the model, as svc top draws it: panes,
// then a worker's details with its events, in colour.
func TestHostileFrame(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m := newModel(ctx, newFake(), Options{Interval: time.Second, Now: fixedClock, Target: testTarget}, colorprofile.ANSI)
	m, _ = update(t, m, tea.WindowSizeMsg{Width: 160, Height: 45})
	m, _ = update(t, m, pollMsg{at: t0, inflight: hostileInflight(), workers: hostileWorkers(), latest: "v1.3.0",
		rows: []api.UsageRow{}, rentals: hostileRentals(), spend: fixtureSpend(),
		summaryErr: &client.Error{Status: 500, Message: "summary\x1b[2J\x1b]0;x\x07 failed"},
		health:     api.Health{Store: &api.StoreHealth{State: api.StoreRetrying, Error: "disk\x1b[2J full"}}})
	m, _ = update(t, m, historyMsg{workerID: "wk_01hq3a", hist: hostileHistory()})
	frame := m.View().Content
	requireInert(t, "panes", frame)
	if !strings.Contains(frame, "\x1b[") {
		t.Fatalf("no colour in a coloured frame: the test draws without styles:\n%s", frame)
	}
	if !strings.Contains(ownSGR.ReplaceAllString(frame, ""), `summary\x1b[2J\x1b]0;x\a failed`) {
		t.Errorf("the status bar lacks the escaped error:\n%s", frame)
	}

	m, _ = update(t, m, press("tab"))
	m, _ = update(t, m, press("enter"))
	m, _ = update(t, m, eventsMsg{seq: m.details.seq, events: hostileEvents()})
	frame = m.View().Content
	requireInert(t, "details", frame)
	if !strings.Contains(frame, "Worker "+hostileShown) {
		t.Errorf("the details are not the hostile worker's:\n%s", frame)
	}
}
