package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chart"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/termsafe"
)

// The Power pane draws two kinds of data. The live readings come with the
// workers list, polled every tick. The history chart is of one worker, the
// pane's subject, and is fetched more slowly (Model.historyCmd): its
// windows are a minute long, so fetching it every second would bring the
// same document sixty times. Like the polls, at most one fetch is in
// flight.

// historyEvery is how old the subject's history may grow before it is
// fetched again: a window closed on the worker shows within this.
const historyEvery = 20 * time.Second

// powerHistory is what the history fetches brought: the last history that
// arrived, and the last failure, each with the worker it is of. The chart
// draws only its subject's; a failure after a success keeps the chart.
type powerHistory struct {
	of    string
	hist  api.PowerHistory
	errOf string
	err   error
}

// historyMsg answers a history fetch.
type historyMsg struct {
	workerID string
	hist     api.PowerHistory
	err      error
}

// fetchHistory loads the last hour of a worker's power.
func fetchHistory(ctx context.Context, src Source, workerID string, timeout time.Duration) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		h, err := src.WorkerPower(ctx, workerID, api.Range1h)
		return historyMsg{workerID: workerID, hist: h, err: err}
	}
}

// apply stores a fetch's answer.
func (h powerHistory) apply(msg historyMsg) powerHistory {
	if msg.err != nil {
		h.errOf, h.err = msg.workerID, msg.err
		return h
	}
	h.of, h.hist = msg.workerID, msg.hist
	if h.errOf == msg.workerID {
		h.errOf, h.err = "", nil
	}
	return h
}

// powerSubject is the worker the Power pane charts: the one selected in
// the Workers pane, else the first by name that reports power.
func powerSubject(ws []api.Worker, l listState) (api.Worker, bool) {
	rows := workerRows(ws, l.filter)
	if i := l.index(workerIDs(rows)); i >= 0 {
		return rows[i], true
	}
	for _, w := range workerRows(ws, "") {
		if w.Power != nil {
			return w, true
		}
	}
	return api.Worker{}, false
}

// powerPane is the Power pane. It has no UI state of its own: its data is
// the root's, and its subject follows the Workers pane's selection, which
// the root hands it with each view.
type powerPane struct {
	selection listState // the Workers pane's
}

// powerView is everything the Power pane draws.
type powerView struct {
	workers    []api.Worker // connected, by name
	loaded     bool         // the workers list has answered
	today      energyToday
	subject    api.Worker
	hasSubject bool
	history    *api.PowerHistory // the subject's, nil until fetched
	historyErr error             // the subject's last fetch failed
	now        time.Time
	focused    bool
}

func (p powerPane) view(c common, d *snapshot, width, height int, focused bool) string {
	v := powerView{workers: connected(d.workers), loaded: d.haveWorkers, today: d.today, now: c.now, focused: focused}
	v.subject, v.hasSubject = powerSubject(d.workers, p.selection)
	if v.hasSubject {
		if d.power.of == v.subject.WorkerID {
			v.history = &d.power.hist
		}
		if d.power.errOf == v.subject.WorkerID {
			v.historyErr = d.power.err
		}
	}
	return renderPower(v, width, height, c.st)
}

// connected are the workers the pane lists, by name: an offline worker
// reads nothing.
func connected(ws []api.Worker) []api.Worker {
	var out []api.Worker
	for _, w := range workerRows(ws, "") {
		if w.Status != api.StatusOffline {
			out = append(out, w)
		}
	}
	return out
}

// Room in the pane: the chart is drawn only with room for a heading, three
// lines of plot and the time axis, and at least one worker line above it.
const minChartLines = 1 + 3 + 2

// renderPower draws the Power pane in exactly width×height cells: the
// fleet's draw now and today, a line per connected worker with its
// channels' watts, and the subject's last hour as a chart, each given what
// room there is in that order.
func renderPower(v powerView, width, height int, st *styles) string {
	cw, ch := contentSize(width, height)
	f := frame{title: "Power", focused: v.focused}
	fl := fleetPower(v.workers, v.today)
	// What the fleet used today stays in view when its workers went.
	today := ""
	if fl.haveToday {
		today = st.dim.Render(" · ") + fmtKWh(fl.todayKWh) + " today"
	}
	switch {
	case !v.loaded:
		return box(st, f, []string{st.dim.Render("waiting for the gateway…")}, width, height)
	case len(v.workers) == 0:
		return box(st, f, []string{st.dim.Render("no workers connected") + today}, width, height)
	}

	summary := st.dim.Render("no worker reports power") + today
	if fl.reporting > 0 {
		summary = st.bold.Render(approx(fl.estimated)+fmtWatts(fl.watts)) + " now" + today
	}
	reporting := fmt.Sprintf("%d of %d reporting", fl.reporting, len(v.workers))

	rest := max(0, ch-1)
	chartLines := 0
	if v.hasSubject && rest >= minChartLines+1 {
		// The chart takes what the workers' lines leave, but never less
		// than half the room: a long list scrolls instead, keeping the
		// subject in view.
		chartLines = min(rest-1, max(minChartLines, rest/2, rest-len(v.workers)))
	}
	rows := min(len(v.workers), rest-chartLines)

	body := []string{summary}
	if chartLines > 0 { // the footer is the chart's
		body[0] = spreadLine(summary, st.dim.Render(reporting), cw)
	} else {
		f.footer = reporting
	}
	cursor := -1
	for i, w := range v.workers {
		if v.hasSubject && w.WorkerID == v.subject.WorkerID {
			cursor = i
		}
	}
	first := window(max(0, cursor), len(v.workers), rows)
	cols := []column{
		{width: 1},
		{title: "NAME", width: 8, flex: 1, max: 20},
		{title: "NOW", width: 8, right: true},
		{title: "CHANNELS", width: 10, flex: 4},
	}
	widths := fitColumns(cols, cw)
	for i := first; i < first+rows; i++ {
		body = append(body, powerRow(st, cols, widths, v.workers[i], i == cursor))
	}
	if chartLines > 0 {
		lines, footer := historyBlock(v, cw, chartLines, st)
		body = append(body, lines...)
		f.footer = footer
	}
	return box(st, f, body, width, height)
}

// fleet is the fleet's draw: the sum of the whole-machine readings of the
// workers reporting, and of what the machines seen today used since
// midnight UTC.
type fleet struct {
	watts     float64
	estimated bool // some of watts is estimated, not measured
	reporting int
	todayKWh  float64
	haveToday bool // some worker's energy today is known
}

func fleetPower(ws []api.Worker, today energyToday) fleet {
	var f fleet
	for _, w := range ws {
		if w.Power == nil {
			continue
		}
		watts, estimated := machineWatts(w.Power)
		f.watts += watts
		f.estimated = f.estimated || estimated
		f.reporting++
	}
	for _, kwh := range today.byWorker {
		f.todayKWh += kwh
		f.haveToday = true
	}
	return f
}

// energyToday is what each worker's machine used since midnight UTC, as
// the workers list last told it. A worker that goes offline is listed
// with no power, and what its machine used today stays in the fleet's
// figure, which would otherwise fall as workers leave; a new UTC day
// starts afresh.
type energyToday struct {
	day      string // YYYY-MM-DD, UTC
	byWorker map[string]float64
}

// note takes the workers list as of at.
func (e energyToday) note(ws []api.Worker, at time.Time) energyToday {
	if day := at.UTC().Format(time.DateOnly); day != e.day || e.byWorker == nil {
		e = energyToday{day: day, byWorker: map[string]float64{}}
	}
	for _, w := range ws {
		if w.Power != nil && w.Power.EnergyTodayKWh != nil {
			e.byWorker[w.WorkerID] = *w.Power.EnergyTodayKWh
		}
	}
	return e
}

// machineWatts is a reading's whole-machine figure: its system channel.
// Should that be missing from a reading, the channels it has are summed,
// which falls short of the machine by whatever no channel covers, so the
// figure counts as estimated.
func machineWatts(p *api.LivePower) (watts float64, estimated bool) {
	for _, ch := range p.Channels {
		if ch.Scope == api.ScopeSystem {
			if w, ok := p.Watts[ch.Key]; ok {
				return w, p.Machine == api.MethodEstimated || ch.Method == api.MethodEstimated
			}
		}
	}
	for _, w := range p.Watts {
		watts += w
	}
	return watts, true
}

// powerRow is a worker's line: its whole-machine watts and each other
// channel's, "~" marking estimates.
func powerRow(st *styles, cols []column, widths []int, w api.Worker, subject bool) string {
	name := plain(w.WorkerName)
	if w.Simulated {
		name.suffix, name.suffixStyle = "sim", &st.sim
	}
	if w.Power == nil {
		return tableRow(cols, widths, []cell{marker(st, subject), name, styled("—", st.dim), styled("no readings", st.dim)}, nil)
	}
	watts, estimated := machineWatts(w.Power)
	var parts []string
	for _, ch := range w.Power.Channels {
		v, ok := w.Power.Watts[ch.Key]
		if ch.Scope == api.ScopeSystem || !ok {
			continue
		}
		parts = append(parts, ch.Key+" "+approx(ch.Method == api.MethodEstimated)+fmtWatts(v))
	}
	return tableRow(cols, widths, []cell{
		marker(st, subject),
		name,
		styled(approx(estimated)+fmtWatts(watts), st.bold),
		plain(strings.Join(parts, " · ")),
	}, nil)
}

// historyBlock is the subject's last hour: a heading naming the worker
// (and the chart's series), then the chart or why there is none, in n
// lines; and the pane's footer, the hour's totals.
func historyBlock(v powerView, cw, n int, st *styles) (lines []string, footer string) {
	name := st.bold.Render(termsafe.Line(v.subject.WorkerName))
	note := func(s string) ([]string, string) { return []string{name, st.dim.Render(termsafe.Line(s))}, "" }
	switch h := v.history; {
	case h == nil && v.historyErr != nil:
		return note(historyError(v.historyErr))
	case h == nil:
		return note("loading the last hour…")
	case len(h.Points) == 0:
		return note("no power readings in the last hour")
	}
	c := chart.Power(*v.history, v.now)
	c.Color, c.Axis = st.color, styleFunc(st.dim)
	for i := range c.Series {
		// A series is labelled with its channel's key, the worker's text.
		c.Series[i].Label = termsafe.Line(c.Series[i].Label)
		c.Series[i].Style = styleFunc(st.series(i))
	}
	lines = append([]string{name + "  " + c.Legend()}, c.Render(cw, n-1)...)
	t := v.history.Totals
	footer = fmt.Sprintf("1h: %s · avg %s · peak %s", fmtKWh(t.EnergyKWh), fmtWatts(t.AvgW), fmtWatts(t.PeakW))
	if v.historyErr != nil { // the chart is from an earlier fetch
		footer = "history: " + historyError(v.historyErr)
	}
	return lines, footer
}

// historyError says why there is no history. The plan gate is expected on
// the Free plan, not a fault: it says what would lift it.
func historyError(err error) string {
	var ae *client.Error
	if errors.As(err, &ae) && ae.Type == api.TypePlanRequired {
		return "history needs the Pro or Enterprise plan"
	}
	return describeErr(err).msg
}

// styleFunc adapts a style to the chart's plain styling functions.
func styleFunc(s lipgloss.Style) func(string) string {
	return func(t string) string { return s.Render(t) }
}

func approx(estimated bool) string {
	if estimated {
		return "~"
	}
	return ""
}

// fmtWatts formats power: 9.5 W, 412 W, 1.52 kW, 12.5 kW.
func fmtWatts(w float64) string {
	switch {
	case w >= 1e4:
		return fmt.Sprintf("%.1f kW", w/1e3)
	case w >= 1e3:
		return fmt.Sprintf("%.2f kW", w/1e3)
	case w >= 10:
		return fmt.Sprintf("%.0f W", w)
	}
	return fmt.Sprintf("%.1f W", w)
}

// fmtKWh formats energy with about three significant figures.
func fmtKWh(kwh float64) string {
	switch {
	case kwh >= 100:
		return fmt.Sprintf("%.0f kWh", kwh)
	case kwh >= 10:
		return fmt.Sprintf("%.1f kWh", kwh)
	}
	return fmt.Sprintf("%.2f kWh", kwh)
}
