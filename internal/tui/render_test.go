package tui

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/colorprofile"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
)

// simGateway simulates the usage counters and log of a busy gateway, one
// second per step: a slow wave of load with quicker ripples, the odd 500
// and bursts of 429s, so the traffic pane has something to draw.
type simGateway struct {
	sum  api.UsageSummary
	rows []api.UsageRow // newest first, the last page only
	id   int
}

func newSimGateway() *simGateway {
	return &simGateway{sum: api.UsageSummary{Days: 1, From: "2026-11-21", To: "2026-11-21", UsageTotals: api.UsageTotals{
		Requests: 48000, Succeeded: 47500, Failed: 450, Cancelled: 50, TotalTokens: 9_800_000,
	}}}
}

func (g *simGateway) step(i int) (api.UsageSummary, []api.UsageRow) {
	load := 9 + 6*math.Sin(float64(i)/15) + 3*math.Sin(float64(i)/3.3)
	n := max(0, int(load))
	for j := range n {
		g.id++
		status := 200
		switch {
		case (i*7+j)%61 == 0:
			status = 500
		case i%37 < 3 && j < 3:
			status = 429
		}
		tokens := 60 + (i*13+j*29)%340
		g.sum.Requests++
		g.sum.TotalTokens += int64(tokens)
		if failed(status) {
			g.sum.Failed++
		} else {
			g.sum.Succeeded++
		}
		g.rows = append([]api.UsageRow{{ID: fmt.Sprintf("req_%06d", g.id), StatusCode: status, TotalTokens: tokens}}, g.rows...)
	}
	if len(g.rows) > logLimit {
		g.rows = g.rows[:logLimit]
	}
	return g.sum, append([]api.UsageRow(nil), g.rows...)
}

// simTraffic is n seconds of simulated traffic ending at t0, folded into a
// history the way polls are.
func simTraffic(n int) traffic {
	g := newSimGateway()
	var t traffic
	for i := range n + 1 {
		sum, rows := g.step(i)
		t = t.observe(t0.Add(time.Duration(i-n)*time.Second), &sum, rows)
	}
	return t
}

func TestRenderInflight(t *testing.T) {
	st := plainStyles()
	all := fixtureInflight()
	rows := inflightRows(all, "")
	for _, tc := range []struct {
		name string
		w, h int
		v    inflightView
	}{
		{"80x8", 80, 8, inflightView{rows: rows, total: len(all), cursor: 1, focused: true, loaded: true, now: t0}},
		{"80x5-scrolled", 80, 5, inflightView{rows: rows, total: len(all), cursor: 4, focused: true, loaded: true, now: t0}},
		{"160x10", 160, 10, inflightView{rows: rows, total: len(all), cursor: 0, loaded: true, now: t0}},
		// Narrow: whole columns go (TOK/S, TOKENS, TYPE, WORKER), none is cut.
		{"64x8", 64, 8, inflightView{rows: rows, total: len(all), cursor: 1, focused: true, loaded: true, now: t0}},
		{"50x8", 50, 8, inflightView{rows: rows, total: len(all), cursor: 1, focused: true, loaded: true, now: t0}},
		{"filtered", 80, 6, inflightView{rows: inflightRows(all, "70b"), total: len(all), cursor: 0, filter: "70b", focused: true, loaded: true, now: t0}},
		{"no-match", 80, 5, inflightView{total: len(all), cursor: -1, filter: "zzz", focused: true, loaded: true, now: t0}},
		{"empty", 80, 5, inflightView{cursor: -1, loaded: true, now: t0}},
		{"waiting", 80, 5, inflightView{cursor: -1, now: t0}},
		{"denied", 80, 5, inflightView{cursor: -1, denied: "This API key lacks the usage:read permission", now: t0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := renderInflight(tc.v, tc.w, tc.h, st)
			requireSize(t, out, tc.w, tc.h)
			golden(t, out)
		})
	}
}

func TestInflightOrderAndRates(t *testing.T) {
	rows := inflightRows(fixtureInflight(), "")
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.TaskID)
	}
	want := "req_c9e2f5b0 req_7f3a9b12 req_8d21c0e6 req_b3f1d7aa req_a0c4e411"
	if got := strings.Join(ids, " "); got != want {
		t.Errorf("order = %s, want oldest first %s", got, want)
	}
	out := renderInflight(inflightView{rows: rows, total: len(rows), cursor: 0, loaded: true, now: t0}, 100, 8, plainStyles())
	// 310 tokens in 12.4s is 25/s; 1234 in 48s is 25.7/s.
	for _, s := range []string{"25.7", "25 ", "queued", "embed", "—"} {
		if !strings.Contains(out, s) {
			t.Errorf("in-flight pane lacks %q:\n%s", s, out)
		}
	}
}

// Audio requests show their kind and, for a transcription, the length of
// its audio where a chat shows tokens.
func TestInflightAudio(t *testing.T) {
	rows := []api.InflightRequest{
		{TaskID: "req_1", Model: "stt-large-v3-turbo", WorkerName: "gpu-a", RequestType: api.RequestAudio,
			StartedAt: t0.Add(-4 * time.Second), ElapsedMs: 4200, State: api.StateRunning, AudioSeconds: ptr(182.5)},
		{TaskID: "req_2", Model: "kokoro", WorkerName: "gpu-a", RequestType: api.RequestSpeech,
			StartedAt: t0.Add(-time.Second), ElapsedMs: 900, State: api.StateRunning},
	}
	out := renderInflight(inflightView{rows: rows, total: 2, cursor: 0, loaded: true, now: t0}, 100, 6, plainStyles())
	for _, s := range []string{"stt-large-v3-turbo", " stt ", "3m02s", "kokoro", " tts "} {
		if !strings.Contains(out, s) {
			t.Errorf("in-flight pane lacks %q:\n%s", s, out)
		}
	}
	details := strings.Join(requestDetailLines(requestDetailsView{req: rows[0], now: t0}, plainStyles()), "\n")
	if !strings.Contains(details, "182.5 s") || strings.Contains(details, "Tokens") {
		t.Errorf("details of a transcription:\n%s", details)
	}
}

func TestRenderWorkers(t *testing.T) {
	st := plainStyles()
	all := workerRows(fixtureWorkers(), "")
	for _, tc := range []struct {
		name string
		w, h int
		v    workersView
	}{
		{"80x9", 80, 9, workersView{rows: all, total: len(all), cursor: 1, latest: "v1.3.0", focused: true, loaded: true}},
		{"80x6-scrolled", 80, 6, workersView{rows: all, total: len(all), cursor: 5, latest: "v1.3.0", focused: true, loaded: true}},
		{"160x10", 160, 10, workersView{rows: all, total: len(all), cursor: 0, latest: "v1.3.0", loaded: true}},
		// Narrow: whole columns go (VERSION, SEEN, QUEUE, MODELS), none is cut.
		{"64x9", 64, 9, workersView{rows: all, total: len(all), cursor: 1, latest: "v1.3.0", focused: true, loaded: true}},
		{"44x9", 44, 9, workersView{rows: all, total: len(all), cursor: 1, latest: "v1.3.0", focused: true, loaded: true}},
		{"filtered", 80, 6, workersView{rows: workerRows(fixtureWorkers(), "llama"), total: len(all), cursor: 0, filter: "llama", latest: "v1.3.0", focused: true, loaded: true}},
		{"empty", 80, 5, workersView{cursor: -1, loaded: true}},
		{"denied", 80, 5, workersView{cursor: -1, denied: "This API key lacks the workers:read permission"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := renderWorkers(tc.v, tc.w, tc.h, st)
			requireSize(t, out, tc.w, tc.h)
			golden(t, out)
		})
	}
}

// TestRenderWorkersColour pins the colours: health, the outdated-version
// arrow, the sim marker, the focused frame and the selection.
func TestRenderWorkersColour(t *testing.T) {
	all := workerRows(fixtureWorkers(), "")
	out := renderWorkers(workersView{rows: all, total: len(all), cursor: 1, latest: "v1.3.0", focused: true, loaded: true}, 100, 9, stylesFor(colorprofile.ANSI))
	requireSize(t, out, 100, 9)
	for _, want := range []string{
		"\x1b[32mhealthy", "\x1b[33mstale", "\x1b[31munhealthy", "\x1b[90moffline", "\x1b[33mdraining", // health
		"\x1b[33m↑", "\x1b[35msim", // markers
		"\x1b[7m", // the selected row
	} {
		if !strings.Contains(out, want) {
			t.Errorf("coloured workers pane lacks %q", want)
		}
	}
	golden(t, out)
}

func TestWorkerFilter(t *testing.T) {
	for filter, want := range map[string][]string{
		"":          {"edge-1", "gpu-a", "gpu-b", "gpu-c", "local-sim", "old-box"},
		"GPU":       {"gpu-a", "gpu-b", "gpu-c"},
		"embed":     {"gpu-a", "local-sim"}, // by model id
		"wk_01hq3f": {"old-box"},            // by id
		"nothing":   nil,
	} {
		var got []string
		for _, w := range workerRows(fixtureWorkers(), filter) {
			got = append(got, w.WorkerName)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("filter %q: got %v, want %v", filter, got, want)
		}
	}
}

func TestRenderTraffic(t *testing.T) {
	st := plainStyles()
	hist := simTraffic(200)
	v := trafficView{samples: hist.samples, today: hist.today, haveToday: true}
	for _, tc := range []struct {
		name string
		w, h int
		v    trafficView
	}{
		{"80x5", 80, 5, v},
		{"120x5", 120, 5, v},
		{"60x23-tall", 60, 23, trafficView{samples: hist.samples, today: hist.today, haveToday: true, focused: true}},
		{"collecting", 80, 5, trafficView{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := renderTraffic(tc.v, tc.w, tc.h, st)
			requireSize(t, out, tc.w, tc.h)
			golden(t, out)
		})
	}
}

func TestTrafficObserve(t *testing.T) {
	sum := func(to string, req, tok, failed int64) *api.UsageSummary {
		return &api.UsageSummary{To: to, UsageTotals: api.UsageTotals{Requests: req, TotalTokens: tok, Failed: failed}}
	}
	row := func(id string, status int) api.UsageRow { return api.UsageRow{ID: id, StatusCode: status} }

	var tr traffic
	// The first poll is only a baseline, and its rows are history.
	tr = tr.observe(t0, sum("d1", 100, 1000, 5), []api.UsageRow{row("a", 429), row("b", 200)})
	if len(tr.samples) != 0 {
		t.Fatalf("first poll made %d samples", len(tr.samples))
	}
	// 2s later: 10 requests, 500 tokens, 3 failures of which the log shows
	// two 429s and a 500 (a 499 is a cancel, not a failure).
	rows := []api.UsageRow{row("f", 429), row("e", 429), row("d", 500), row("c", 499), row("a", 429), row("b", 200)}
	tr = tr.observe(t0.Add(2*time.Second), sum("d1", 110, 1500, 8), rows)
	s := tr.samples[0]
	if s.Req != 10 || s.Tok != 500 || s.R429 != 2 || s.Err != 1 || s.Dt != 2 {
		t.Fatalf("sample = %+v", s)
	}
	if r := s.rate(s.Req); r != 5 {
		t.Errorf("requests/s = %v, want 5", r)
	}
	// A failed summary makes no sample and keeps the rows unseen.
	tr2 := tr.observe(t0.Add(3*time.Second), nil, []api.UsageRow{row("g", 429)})
	if len(tr2.samples) != 1 || len(tr2.seen) != len(rows) {
		t.Errorf("a poll without a summary changed the history")
	}
	// The UTC day rolled over: the counters restart, no negative sample.
	tr = tr.observe(t0.Add(4*time.Second), sum("d2", 3, 30, 0), nil)
	if len(tr.samples) != 1 {
		t.Errorf("day rollover made a sample: %+v", tr.samples)
	}
	// History is bounded.
	for i := range maxSamples + 20 {
		tr = tr.observe(t0.Add(time.Duration(5+i)*time.Second), sum("d2", int64(10+i), 100, 0), nil)
	}
	if len(tr.samples) != maxSamples {
		t.Errorf("history holds %d samples, want %d", len(tr.samples), maxSamples)
	}
}

// Streams count their tokens as they generate them, and a stream that
// completes adds only what was not counted of it while it ran.
func TestTrafficCountsStreamsAsTheyGenerate(t *testing.T) {
	sum := func(req, tok int64) *api.UsageSummary {
		return &api.UsageSummary{To: "d", UsageTotals: api.UsageTotals{Requests: req, TotalTokens: tok}}
	}
	gen := func(pairs ...any) []api.InflightRequest {
		var out []api.InflightRequest
		for i := 0; i < len(pairs); i += 2 {
			n := pairs[i+1].(int)
			out = append(out, api.InflightRequest{TaskID: pairs[i].(string), TokensGenerated: &n})
		}
		return out
	}
	var tr traffic
	tr = tr.progress(gen()).observe(t0, sum(0, 0), []api.UsageRow{})
	// Two streams at 150 tokens/s for a second each, nothing completed.
	tr = tr.progress(gen("a", 150, "b", 150)).observe(t0.Add(time.Second), sum(0, 0), []api.UsageRow{})
	tr = tr.progress(gen("a", 300, "b", 300)).observe(t0.Add(2*time.Second), sum(0, 0), []api.UsageRow{})
	if s := tr.samples[len(tr.samples)-1]; s.Tok != 300 || s.rate(s.Tok) != 300 {
		t.Fatalf("while streaming: %+v", s)
	}
	// a ends at 400 completion tokens after a 20-token prompt: 420 in the
	// totals, 300 of which were counted; b goes on.
	tr = tr.progress(gen("b", 450)).observe(t0.Add(3*time.Second), sum(1, 420), []api.UsageRow{})
	if s := tr.samples[len(tr.samples)-1]; s.Tok != 120+150 {
		t.Fatalf("after a stream completed: %+v, want 270 tokens", s)
	}
	// A failed poll of the requests in flight changes nothing.
	if tr2 := tr.progress(nil); tr2.live != 0 || tr2.done != 0 || len(tr2.gen) != 1 {
		t.Fatalf("failed poll: %+v", tr2)
	}
}

// TestTrafficObserveTruncatedPage checks a page of nothing but new rows is
// scaled to the exact failure count instead of undercounting 429s.
func TestTrafficObserveTruncatedPage(t *testing.T) {
	var tr traffic
	base := &api.UsageSummary{To: "d", UsageTotals: api.UsageTotals{Requests: 0, Failed: 0}}
	tr = tr.observe(t0, base, []api.UsageRow{{ID: "old"}})
	page := make([]api.UsageRow, logLimit)
	for i := range page {
		page[i] = api.UsageRow{ID: fmt.Sprint(i), StatusCode: 200}
		if i%10 == 0 {
			page[i].StatusCode = 429 // 20 of the 200 rows
		} else if i%10 == 1 {
			page[i].StatusCode = 503 // 20 more failures
		}
	}
	// 1000 requests happened, 200 failed: the page saw half of its failures
	// as 429s, so about 100 429s overall.
	tr = tr.observe(t0.Add(time.Second), &api.UsageSummary{To: "d", UsageTotals: api.UsageTotals{Requests: 1000, Failed: 200}}, page)
	if s := tr.samples[0]; s.R429 != 100 || s.Err != 100 {
		t.Errorf("sample = %+v, want 100 429s and 100 other errors", s)
	}
}

func TestSparkline(t *testing.T) {
	for _, tc := range []struct {
		vals  []float64
		width int
		rows  int
		want  []string
	}{
		{[]float64{0, 1, 2, 3, 4, 5, 6, 7, 8}, 9, 1, []string{"▁▂▂▃▄▅▆▇█"}},
		{[]float64{5, 5}, 4, 1, []string{"  ██"}},                // no data yet is blank
		{[]float64{0, 0, 0}, 3, 1, []string{"▁▁▁"}},              // quiet is the lowest block
		{[]float64{9, 1, 2, 3, 4}, 3, 1, []string{"▄▆█"}},        // newest width values, scaled to them
		{[]float64{0, 4, 8, 16}, 4, 2, []string{"   █", "▁▄██"}}, // two rows: 16 levels
		{[]float64{0.001, 100}, 2, 1, []string{"▂█"}},            // tiny but non-zero stays visible
		{[]float64{math.NaN(), 1}, 2, 1, []string{"▁█"}},
	} {
		got := sparkline(tc.vals, tc.width, tc.rows)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("sparkline(%v, %d, %d) = %q, want %q", tc.vals, tc.width, tc.rows, got, tc.want)
		}
	}
}

func TestRenderDetails(t *testing.T) {
	st := plainStyles()
	ws := fixtureWorkers()
	reqs := fixtureInflight()
	wv := workerDetailsView{worker: ws[0], latest: "v1.3.0", events: fixtureEvents(), eventsLoaded: true, now: t0}
	for _, tc := range []struct {
		name string
		w, h int
		out  func(w, h int) string
	}{
		{"worker-80x22", 80, 22, func(w, h int) string { return renderWorkerDetails(wv, w, h, st) }},
		{"worker-120x30", 120, 30, func(w, h int) string { return renderWorkerDetails(wv, w, h, st) }},
		{"worker-scrolled", 80, 12, func(w, h int) string {
			v := wv
			v.scroll = 6
			return renderWorkerDetails(v, w, h, st)
		}},
		{"worker-outdated-gone-loading", 80, 18, func(w, h int) string {
			return renderWorkerDetails(workerDetailsView{worker: ws[1], gone: true, latest: "v1.3.0", now: t0}, w, h, st)
		}},
		{"worker-events-error", 80, 14, func(w, h int) string {
			return renderWorkerDetails(workerDetailsView{worker: ws[5], latest: "v1.3.0", eventsErr: errors.New("forbidden"), eventsLoaded: true, now: t0}, w, h, st)
		}},
		{"request-80x14", 80, 14, func(w, h int) string {
			return renderRequestDetails(requestDetailsView{req: reqs[0], now: t0}, w, h, st)
		}},
		{"request-queued-gone", 80, 14, func(w, h int) string {
			return renderRequestDetails(requestDetailsView{req: reqs[3], gone: true, now: t0}, w, h, st)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.out(tc.w, tc.h)
			requireSize(t, out, tc.w, tc.h)
			golden(t, out)
		})
	}
}

func TestRenderStatus(t *testing.T) {
	st := plainStyles()
	unreachable := describe([]partError{{"workers", &client.ConnectError{Target: "http://127.0.0.1:8080", Err: errors.New("dial tcp 127.0.0.1:8080: connect: connection refused")}}})
	for _, tc := range []struct {
		name string
		w    int
		v    statusView
	}{
		{"live", 80, statusView{everOK: true, age: 0, interval: time.Second}},
		{"live-list", 80, statusView{everOK: true, age: 0, interval: time.Second, typable: true}},
		{"live-list-narrow", 48, statusView{everOK: true, age: 0, interval: time.Second, typable: true}},
		// Too narrow for the interval: it goes whole, never cut to "every 1".
		{"live-35", 35, statusView{everOK: true, age: 0, interval: 15 * time.Second, typable: true}},
		{"connecting", 80, statusView{interval: time.Second}},
		{"error-stale-80", 80, statusView{err: unreachable.msg, retryIn: 4 * time.Second, everOK: true, age: 12 * time.Second}},
		{"error-stale-160", 160, statusView{err: unreachable.msg, retryIn: 4 * time.Second, everOK: true, age: 12 * time.Second}},
		{"error-no-data", 80, statusView{err: "gateway did not answer in time", retryIn: time.Second}},
		{"auth", 120, statusView{err: describeErr(&client.Error{Status: 401, Message: "invalid API key"}).msg, retryIn: 5 * time.Second}},
		{"paused", 80, statusView{paused: true, everOK: true, age: 42 * time.Second}},
		{"filtering", 80, statusView{filtering: true, filterLabel: "workers", filterInput: lineInput{value: []rune("gpu")}.view(st)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := renderStatus(tc.v, tc.w, st)
			requireSize(t, out, tc.w, 1)
			golden(t, out)
		})
	}
}

func TestRenderHeader(t *testing.T) {
	st := plainStyles()
	for _, tc := range []struct {
		name string
		w    int
		v    headerView
	}{
		{"80", 80, headerView{target: "http://127.0.0.1:8080", workers: 6, healthy: 3, inflight: 5, haveWorkers: true, haveInflight: true, now: t0}},
		{"no-data", 80, headerView{target: "https://gw.example.com", now: t0}},
		{"narrow", 40, headerView{target: "https://a-very-long-gateway-name.example.com:8443", workers: 6, healthy: 3, inflight: 5, haveWorkers: true, haveInflight: true, now: t0}},
		// A key that may not read one of them gets no count of it.
		{"workers-only", 80, headerView{target: "http://127.0.0.1:8080", workers: 6, healthy: 3, haveWorkers: true, now: t0}},
		{"inflight-only", 80, headerView{target: "http://127.0.0.1:8080", inflight: 5, haveInflight: true, now: t0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := renderHeader(tc.v, tc.w, st)
			requireSize(t, out, tc.w, 1)
			golden(t, out)
		})
	}
}

func TestDescribeErrors(t *testing.T) {
	connErr := &client.ConnectError{Target: "http://x", Err: errors.New("connection refused")}
	all := func(err error) []partError {
		return []partError{{"workers", err}, {"in-flight requests", err}, {"usage summary", err}, {"usage log", err}, {"latest version", err},
			{"rental spend", err}, {"rentals", err}}
	}
	for _, tc := range []struct {
		errs []partError
		msg  string
		auth bool
	}{
		{all(connErr), "gateway unreachable: connection refused", false},
		{all(&client.Error{Status: 401, Message: "invalid API key"}), "unauthorized (401): invalid API key; check the API key", true},
		{all(&client.Error{Status: 403, Message: "the key lacks usage:read"}), "forbidden (403): the key lacks usage:read", true},
		{all(fmt.Errorf("poll: %w", context.DeadlineExceeded)), "gateway did not answer in time", false},
		{[]partError{{"usage summary", &client.Error{Status: 403, Message: "no usage:read"}}, {"usage log", &client.Error{Status: 403, Message: "no usage:read"}}},
			"usage summary: forbidden (403): no usage:read (+1 more)", true},
		{[]partError{{"latest version", &client.Error{Status: 502, Message: "bad gateway\nsecond line"}}}, "latest version: gateway error 502: bad gateway", false},
	} {
		f := describe(tc.errs)
		if f.msg != tc.msg || f.auth != tc.auth {
			t.Errorf("describe = %q auth=%v, want %q auth=%v", f.msg, f.auth, tc.msg, tc.auth)
		}
	}
}

func TestBackoff(t *testing.T) {
	var got []time.Duration
	for fails := 1; fails <= 6; fails++ {
		got = append(got, backoff(time.Second, fails, false))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("backoff = %v, want %v", got, want)
	}
	if d := backoff(time.Second, 1, true); d != 5*time.Second {
		t.Errorf("auth backoff = %v, want the ceiling straight away", d)
	}
}

func TestFitColumns(t *testing.T) {
	cols := []column{
		{width: 1},
		{title: "A", width: 10, flex: 1, max: 12},
		{title: "B", width: 10, flex: 1},
		{title: "C", width: 5, drop: 1},
	}
	// 1+10+10+5 and three gaps need 32.
	if got := fmt.Sprint(fitColumns(cols, 32)); got != "[1 10 10 5]" {
		t.Errorf("exact fit = %s", got)
	}
	if got := fmt.Sprint(fitColumns(cols, 31)); got != "[1 12 14 0]" {
		t.Errorf("C dropped = %s", got) // its room and gap go to the flexible columns, A up to its max
	}
	if got := fmt.Sprint(fitColumns(cols, 60)); got != "[1 12 36 5]" {
		t.Errorf("A capped = %s", got)
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s    string
		w    int
		want string
	}{
		{"llama3.1:8b", 20, "llama3.1:8b"},
		{"llama3.1:8b", 6, "llama…"},
		{"llama3.1:8b", 1, "…"},
		{"llama3.1:8b", 0, ""},
		{"模型名称", 5, "模型…"},
	} {
		if got := truncate(tc.s, tc.w); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.s, tc.w, got, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{fmtElapsed(850 * time.Millisecond), "0.8s"},
		{fmtElapsed(48 * time.Second), "48s"},
		{fmtElapsed(3*time.Minute + 5*time.Second), "3m05s"},
		{fmtElapsed(2*time.Hour + 10*time.Minute), "2h10m"},
		{fmtAge(3 * time.Second), "3s"},
		{fmtAge(65 * time.Minute), "1h"},
		{fmtAge(72 * time.Hour), "3d"},
		{fmtCount(1234), "1,234"},
		{fmtCount(45_600), "45.6k"},
		{fmtCount(9_876_543), "9.9M"},
		{fmtRate(0), "0"},
		{fmtRate(0.44), "0.4"},
		{fmtRate(12), "12"},
		{fmtRate(1234), "1.2k"},
		{fmtPct(0.031), "3.1%"},
		{fmtPct(0.5), "50%"},
		{fmtContext(131072), "128k"},
		{fmtContext(1 << 20), "1M"},
		{fmtClock(t0.Add(-time.Hour), t0), "11:00:00"},
		{fmtClock(t0.Add(-30*time.Hour), t0), "Nov 20 06:00"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// Every request type's short name fits the in-flight table's TYPE column.
func TestShortTypeFitsItsColumn(t *testing.T) {
	for _, typ := range []string{api.RequestChat, api.RequestEmbeddings, api.RequestRerank, api.RequestImages,
		api.RequestAudio, api.RequestSpeech, api.RequestModeration} {
		if s := shortType(typ); len(s) > 5 || s == "" {
			t.Errorf("%s is shown as %q", typ, s)
		}
	}
}

// The workers filter matches a worker's status too: typing offline lists
// the offline workers.
func TestWorkersFilterByStatus(t *testing.T) {
	all := fixtureWorkers()
	want := 0
	for _, w := range all {
		if w.Status == api.StatusOffline {
			want++
		}
	}
	if want == 0 {
		t.Fatal("the fixture has no offline worker")
	}
	got := workerRows(all, "OFFLINE")
	if len(got) != want {
		t.Fatalf("%d workers match offline, want %d", len(got), want)
	}
	for _, w := range got {
		if w.Status != api.StatusOffline {
			t.Fatalf("%s (%s) matched offline", w.WorkerName, w.Status)
		}
	}
}
