package tui

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/lipgloss/v2"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/buildinfo"
)

// workersPane is the fleet list.
type workersPane struct {
	list listState
}

// workerRows filters workers by name, id, status or a model id and orders
// them by name, so rows do not jump around between polls.
func workerRows(all []api.Worker, filter string) []api.Worker {
	var out []api.Worker
	for _, w := range all {
		fields := []string{w.WorkerName, w.WorkerID, w.Status}
		for _, m := range w.Models {
			fields = append(fields, m.ID)
		}
		if matches(filter, fields...) {
			out = append(out, w)
		}
	}
	slices.SortStableFunc(out, func(a, b api.Worker) int {
		return cmp.Or(cmp.Compare(a.WorkerName, b.WorkerName), cmp.Compare(a.WorkerID, b.WorkerID))
	})
	return out
}

func workerIDs(rows []api.Worker) []string {
	ids := make([]string, len(rows))
	for i, w := range rows {
		ids[i] = w.WorkerID
	}
	return ids
}

// workersView is everything the workers pane draws.
type workersView struct {
	rows    []api.Worker // filtered, by name
	total   int
	cursor  int
	filter  string
	latest  string // newest worker release, "" when unknown
	focused bool
	loaded  bool
	// denied is the gateway's refusal of the key, when it may not read
	// the workers.
	denied string
}

func (p workersPane) view(c common, d *snapshot, width, height int, focused bool) string {
	rows := workerRows(d.workers, p.list.filter)
	return renderWorkers(workersView{
		rows:    rows,
		total:   len(d.workers),
		cursor:  p.list.index(workerIDs(rows)),
		filter:  p.list.filter,
		latest:  d.latest,
		focused: focused,
		loaded:  d.haveWorkers,
		denied:  d.workersDenied,
	}, width, height, c.st)
}

// renderWorkers draws the workers pane in exactly width×height cells.
func renderWorkers(d workersView, width, height int, st *styles) string {
	cw, ch := contentSize(width, height)
	// A narrow terminal loses whole columns, the least telling first,
	// rather than show the last ones cut short.
	cols := []column{
		{width: 1},
		{title: "NAME", width: 10, flex: 2, max: 28},
		{title: "STATUS", width: 9},
		{title: "VERSION", width: 9, drop: 4},
		{title: "MODELS", width: 8, flex: 4, drop: 1},
		{title: "ACTIVE", width: 6, right: true},
		{title: "QUEUE", width: 5, right: true, drop: 2},
		{title: "SEEN", width: 4, right: true, drop: 3},
	}
	if cw >= 112 {
		cols = append(cols, column{title: "ENGINES", width: 10, flex: 1, max: 30, drop: 5})
	}
	widths := fitColumns(cols, cw)

	f := frame{title: workersTitle(d), focused: d.focused}
	var body []string
	switch {
	case d.denied != "":
		body = []string{st.dim.Render("not shown: this API key may not read workers (workers:read)")}
	case !d.loaded:
		body = []string{st.dim.Render("waiting for the gateway…")}
	case len(d.rows) == 0 && d.filter != "":
		body = []string{st.dim.Render("no worker matches /" + d.filter)}
		f.footer = listFooter(d.filter, 0, d.total, 0, 0)
	case len(d.rows) == 0:
		body = []string{st.dim.Render("no workers connected")}
	default:
		body = append(body, tableHeader(st, cols, widths))
		visible := ch - 1
		first := window(d.cursor, len(d.rows), visible)
		for i := first; i < len(d.rows) && i < first+visible; i++ {
			body = append(body, workerRow(st, cols, widths, d.rows[i], d.latest, i == d.cursor, d.focused))
		}
		f.footer = listFooter(d.filter, len(d.rows), d.total, first, visible)
	}
	if f.footer == "" && d.latest != "" {
		f.footer = "latest " + d.latest
	}
	return box(st, f, body, width, height)
}

// workersTitle counts workers by health, the fleet's one-line summary.
func workersTitle(d workersView) string {
	if d.total == 0 {
		return "Workers"
	}
	t := fmt.Sprintf("Workers (%d", d.total)
	if healthy := countHealthy(d.rows); d.filter == "" && healthy != d.total {
		t += fmt.Sprintf(", %d healthy", healthy)
	}
	return t + ")"
}

func workerRow(st *styles, cols []column, widths []int, w api.Worker, latest string, selected, focused bool) string {
	name := plain(w.WorkerName)
	if w.Simulated {
		name.suffix, name.suffixStyle = "sim", &st.sim
	}
	version := plain(w.Version)
	if w.Version == "" {
		version = styled("—", st.dim)
	}
	if buildinfo.Outdated(w.Version, latest) {
		version.suffix, version.suffixStyle = "↑", &st.warn
	}
	active := fmt.Sprintf("%d/%d", w.ActiveTasks, w.MaxConcurrent)
	if w.MaxConcurrent <= 0 {
		active = fmt.Sprint(w.ActiveTasks)
	}
	cells := []cell{
		marker(st, selected),
		name,
		workerStatus(st, w),
		version,
		plain(modelIDs(w.Models)),
		plain(active),
		plain(fmt.Sprint(w.QueueDepth)),
		styled(fmtAge(time.Duration(w.LastSeenSecondsAgo)*time.Second), st.dim),
		styled(engineKinds(w.Engines), st.dim),
	}
	return tableRow(cols, widths, cells, rowStyle(st, selected, focused))
}

// workerStatus is the status cell, coloured by health. A draining worker
// shows "draining": it matters more than "healthy" when deciding why a
// worker takes no new requests.
func workerStatus(st *styles, w api.Worker) cell {
	if w.Draining && w.Status == api.StatusHealthy {
		return styled("draining", st.warn)
	}
	return styled(w.Status, healthStyle(st, w.Status))
}

func healthStyle(st *styles, status string) lipgloss.Style {
	switch status {
	case api.StatusHealthy:
		return st.ok
	case api.StatusStale:
		return st.warn
	case api.StatusUnhealthy:
		return st.bad
	default:
		return st.off
	}
}

func modelIDs(ms []api.Model) string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	if len(ids) == 0 {
		return "—"
	}
	return strings.Join(ids, ", ")
}

func engineKinds(es []api.EngineInfo) string {
	var kinds []string
	for _, e := range es {
		if !slices.Contains(kinds, e.Kind) {
			kinds = append(kinds, e.Kind)
		}
	}
	return strings.Join(kinds, ", ")
}
