package tui

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
)

var (
	errConn      = &client.ConnectError{Target: testTarget, Err: errors.New("connection refused")}
	errForbidden = &client.Error{Status: 403, Message: "the key lacks usage:read"}
)

// These tests drive Update directly with hand-made messages: no program,
// no goroutines, every step deterministic. They pin the polling state
// machine and produce the documentation frame.

func directModel(t *testing.T, src Source) Model {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m := newModel(ctx, src, Options{Interval: time.Second, Now: fixedClock, Target: testTarget}, colorprofile.ASCII)
	return m
}

func update(t *testing.T, m Model, msg tea.Msg) (Model, tea.Cmd) {
	t.Helper()
	next, cmd := m.Update(msg)
	return next.(Model), cmd
}

// press is the key press that bubbles/key names s: "tab", "shift+tab",
// "ctrl+c", "enter"; any other s is typed as text.
func press(s string) tea.KeyPressMsg {
	special := map[string]tea.Key{
		"tab":       {Code: tea.KeyTab},
		"shift+tab": {Code: tea.KeyTab, Mod: tea.ModShift},
		"enter":     {Code: tea.KeyEnter},
		"esc":       {Code: tea.KeyEscape},
		"backspace": {Code: tea.KeyBackspace},
		"up":        {Code: tea.KeyUp},
		"down":      {Code: tea.KeyDown},
		"ctrl+c":    {Code: 'c', Mod: tea.ModCtrl},
		"space":     {Code: tea.KeySpace, Text: " "},
	}
	if k, ok := special[s]; ok {
		if k.Keystroke() != s {
			panic("press: " + s + " is " + k.Keystroke())
		}
		return tea.KeyPressMsg(k)
	}
	r := []rune(s)
	return tea.KeyPressMsg{Code: r[0], Text: s}
}

func okPoll(at time.Time) pollMsg {
	f := newFake()
	return pollMsg{at: at, inflight: f.inflight, workers: f.workers, latest: f.latest, summary: f.summary, rows: []api.UsageRow{},
		spend: f.spend, rentals: f.rentals}
}

// TestPauseEndsTheChain checks pausing lets the poll chain run out at the
// next tick and resuming starts exactly one new chain.
func TestPauseEndsTheChain(t *testing.T) {
	m := directModel(t, newFake())
	if !m.chain {
		t.Fatal("Init's poll is not counted as the chain")
	}
	m, cmd := update(t, m, okPoll(t0))
	if cmd == nil {
		t.Fatal("a poll result scheduled no tick")
	}
	m, _ = update(t, m, press("space"))
	// Resuming before the tick fires must not start a second chain.
	m, cmd = update(t, m, press("space"))
	if cmd != nil {
		t.Fatal("resume started a poll while the tick was pending")
	}
	m, _ = update(t, m, press("space"))
	m, cmd = update(t, m, tickMsg{at: t0})
	if cmd != nil || m.chain {
		t.Fatal("a tick while paused polled")
	}
	m, cmd = update(t, m, press("space"))
	if cmd == nil || !m.chain {
		t.Fatal("resume did not poll")
	}
	if _, ok := cmd().(pollMsg); !ok {
		t.Fatal("resume's command is not a poll")
	}
}

// TestPollBackoff checks the schedule: backing off while polls fail,
// back to the interval after one succeeds.
func TestPollBackoff(t *testing.T) {
	m := directModel(t, newFake())
	fail := pollMsg{at: t0}
	fail.inflightErr, fail.workersErr, fail.latestErr, fail.summaryErr, fail.rowsErr, fail.spendErr, fail.rentalsErr =
		errConn, errConn, errConn, errConn, errConn, errConn, errConn
	var got []time.Duration
	for range 5 {
		m, _ = update(t, m, fail)
		got = append(got, m.retryIn)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("retry delays = %v, want %v", got, want)
		}
	}
	m, _ = update(t, m, okPoll(t0.Add(time.Minute)))
	if m.retryIn != time.Second || m.failure.msg != "" {
		t.Errorf("after recovery: retry in %s, error %q", m.retryIn, m.failure.msg)
	}
}

// TestPartialFailureKeepsOtherData checks a key without usage:read still
// sees its workers, with the missing part named in the status bar.
func TestPartialFailureKeepsOtherData(t *testing.T) {
	m := directModel(t, newFake())
	p := okPoll(t0)
	p.summaryErr, p.rowsErr = errForbidden, errForbidden
	m, _ = update(t, m, p)
	if !m.data.haveWorkers || len(m.data.workers) != 6 {
		t.Fatal("workers not stored")
	}
	if !strings.HasPrefix(m.failure.msg, "usage summary: forbidden (403)") || !m.failure.auth {
		t.Errorf("failure = %+v", m.failure)
	}
	if m.retryIn != 5*time.Second {
		t.Errorf("retry in %s, want the slow auth retry", m.retryIn)
	}

	// Without usage:read the requests in flight are not shown, nor
	// counted as none.
	p = okPoll(t0.Add(time.Second))
	p.inflightErr, p.summaryErr, p.rowsErr = errForbidden, errForbidden, errForbidden
	m = directModel(t, newFake())
	m, _ = update(t, m, p)
	frame := m.frame()
	if strings.Count(frame, "not shown: this API key may not read usage") != 2 || strings.Contains(frame, "collecting") ||
		strings.Contains(frame, "in flight ·") ||
		strings.Contains(frame, "waiting for the gateway") || !strings.Contains(frame, "3/6 workers healthy") {
		t.Errorf("a key without usage:read sees:\n%s", frame)
	}
}

func TestStaleEventsIgnored(t *testing.T) {
	m := directModel(t, newFake())
	m, _ = update(t, m, okPoll(t0))
	m, _ = update(t, m, press("tab"))
	m, first := update(t, m, press("enter")) // edge-1
	m, _ = update(t, m, press("esc"))
	m, _ = update(t, m, press("down"))
	m, _ = update(t, m, press("enter")) // gpu-a
	if m.details.worker.WorkerName != "gpu-a" {
		t.Fatalf("details of %s", m.details.worker.WorkerName)
	}
	// The first opening's answer arrives late: it must not show under gpu-a.
	msg := first().(eventsMsg)
	m, _ = update(t, m, msg)
	if m.details.eventsLoaded {
		t.Error("a stale events answer was shown")
	}
	m, _ = update(t, m, eventsMsg{seq: m.details.seq, events: fixtureEvents()})
	if !m.details.eventsLoaded || len(m.details.events) != 5 {
		t.Error("the current events answer was dropped")
	}
}

// TestSelectionFollowsRow checks the selection stays on the same request
// when rows above it finish, and moves to a neighbour when it finishes.
func TestSelectionFollowsRow(t *testing.T) {
	m := directModel(t, newFake())
	m, _ = update(t, m, okPoll(t0))
	m, _ = update(t, m, press("down"))
	m, _ = update(t, m, press("down")) // req_8d21c0e6, third oldest
	without := func(ids ...string) []api.InflightRequest {
		var out []api.InflightRequest
		for _, r := range fixtureInflight() {
			if !slices.Contains(ids, r.TaskID) {
				out = append(out, r)
			}
		}
		return out
	}
	// The two older requests finish: the selected row is now the first.
	p := okPoll(t0.Add(time.Second))
	p.inflight = without("req_c9e2f5b0", "req_7f3a9b12")
	m, _ = update(t, m, p)
	if m.inflight.list.selID != "req_8d21c0e6" {
		t.Fatalf("selection moved to %s", m.inflight.list.selID)
	}
	// The selected request finishes: the row now first takes the selection.
	p = okPoll(t0.Add(2 * time.Second))
	p.inflight = without("req_c9e2f5b0", "req_7f3a9b12", "req_8d21c0e6")
	m, _ = update(t, m, p)
	if m.inflight.list.selID != "req_b3f1d7aa" {
		t.Fatalf("selection = %q after its row finished", m.inflight.list.selID)
	}
}

// TestDetailsOutliveTheirRow checks a request's details stay readable
// after it finishes, marked as finished.
func TestDetailsOutliveTheirRow(t *testing.T) {
	m := directModel(t, newFake())
	m, _ = update(t, m, okPoll(t0))
	m, _ = update(t, m, press("enter"))
	p := okPoll(t0.Add(time.Second))
	p.inflight = nil
	m, _ = update(t, m, p)
	view := m.View().Content
	if !strings.Contains(view, "finished: no longer in flight") || !strings.Contains(view, "req_c9e2f5b0") {
		t.Errorf("view:\n%s", view)
	}
}

func TestViewBeforeFirstSize(t *testing.T) {
	m := directModel(t, newFake())
	requireSize(t, m.View().Content, defaultWidth, defaultHeight)
}

// docWorkers and docInflight are the fleet of the documentation frame:
// three workers, one simulated and one offline.
func docWorkers() []api.Worker {
	ws := fixtureWorkers()
	gpuA, sim, old := ws[0], ws[4], ws[5]
	sim.ActiveTasks = 1
	return []api.Worker{gpuA, sim, old}
}

func docInflight() []api.InflightRequest {
	rs := fixtureInflight()
	qwen := rs[0]
	qwen.TaskID, qwen.Model, qwen.ElapsedMs, qwen.StartedAt, qwen.TokensGenerated = "req_d41e09c2", "qwen2.5-coder:32b", 4200, t0.Add(-4200*time.Millisecond), ptr(96)
	queued := rs[3]
	queued.Model = "llama3.1:8b"
	return []api.InflightRequest{rs[4], rs[0], qwen, queued, rs[2]}
}

// TestDocsFrame renders the frame the README shows: three minutes of
// simulated traffic and three rentals through the real Update path, at
// 100x30. -update
// rewrites both the golden file and docs/top-frame.txt.
func TestDocsFrame(t *testing.T) {
	m := directModel(t, newFake())
	m, _ = update(t, m, tea.WindowSizeMsg{Width: 100, Height: 30})
	g := newSimGateway()
	for i := range maxSamples + 1 {
		sum, rows := g.step(i)
		m, _ = update(t, m, pollMsg{
			at: t0.Add(time.Duration(i-maxSamples) * time.Second), inflight: docInflight(), workers: docWorkers(),
			latest: "v1.3.0", summary: sum, rows: rows,
			spend: activeSpend(), rentals: append(only("rent_dl", "rent_run", "rent_lost"), fixtureRentals()...),
		})
	}
	view := m.View().Content
	requireSize(t, view, 100, 30)
	golden(t, view)

	doc := filepath.Join("..", "..", "docs", "top-frame.txt")
	if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" {
		if err := os.WriteFile(doc, []byte(view+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(doc)
	if err != nil || string(b) != view+"\n" {
		t.Errorf("%s is out of date; run go test ./internal/tui -run TestDocsFrame -update", doc)
	}
	readmeFrame(t, view)
}

// readmeFrame checks that the README shows the frame as docs/top-frame.txt
// has it: the first code block after the line that names the file, which
// -update rewrites.
func readmeFrame(t *testing.T, view string) {
	t.Helper()
	path := filepath.Join("..", "..", "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	at := strings.Index(readme, "(frame from [docs/top-frame.txt]")
	start := strings.Index(readme[max(at, 0):], "```\n")
	if at < 0 || start < 0 {
		t.Fatalf("%s no longer names docs/top-frame.txt before a code block", path)
	}
	start += at + len("```\n")
	end := strings.Index(readme[start:], "```\n")
	if end < 0 {
		t.Fatalf("%s: the frame's code block does not end", path)
	}
	end += start
	if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" {
		readme = readme[:start] + view + "\n" + readme[end:]
		if err := os.WriteFile(path, []byte(readme), 0o644); err != nil {
			t.Fatal(err)
		}
		end = start + len(view) + 1
	}
	if readme[start:end] != view+"\n" {
		t.Errorf("%s shows another frame than docs/top-frame.txt; run go test ./internal/tui -run TestDocsFrame -update", path)
	}
}
