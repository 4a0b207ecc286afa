package tui

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/termsafe"
)

type detailsKind int

const (
	noDetails detailsKind = iota
	workerDetails
	requestDetails
)

// eventsLimit is how many recent events the worker details show.
const eventsLimit = 20

// detailsModel is the details view over the panes, for one worker or one
// request. It keeps a copy of its subject, refreshed by each poll, so the
// view stays readable after the subject leaves the list (a request that
// finished, a worker that went away).
type detailsModel struct {
	kind   detailsKind
	seq    int // tells this opening's events answer from a stale one
	worker api.Worker
	req    api.InflightRequest
	gone   bool // the subject is no longer in the polled data
	scroll int

	events       []api.WorkerEvent
	eventsErr    error
	eventsLoaded bool
}

// eventsMsg answers the events fetch started when a worker's details open.
type eventsMsg struct {
	seq    int
	events []api.WorkerEvent
	err    error
}

// fetchEvents loads a worker's recent events, once, when its details open.
func fetchEvents(ctx context.Context, src Source, seq int, workerID string, timeout time.Duration) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		ev, err := src.WorkerEvents(ctx, client.EventQuery{WorkerID: workerID, Limit: eventsLimit})
		return eventsMsg{seq: seq, events: ev, err: err}
	}
}

// refresh updates the subject from a poll's data.
func (d detailsModel) refresh(s *snapshot) detailsModel {
	switch d.kind {
	case workerDetails:
		if !s.haveWorkers {
			return d
		}
		d.gone = true
		for _, w := range s.workers {
			if w.WorkerID == d.worker.WorkerID {
				d.worker, d.gone = w, false
			}
		}
	case requestDetails:
		if !s.haveInflight {
			return d
		}
		d.gone = true
		for _, r := range s.inflight {
			if r.TaskID == d.req.TaskID {
				d.req, d.gone = r, false
			}
		}
	}
	return d
}

func (d detailsModel) view(c common, s *snapshot, width, height int) string {
	switch d.kind {
	case workerDetails:
		return renderWorkerDetails(d.workerView(c, s), width, height, c.st)
	case requestDetails:
		return renderRequestDetails(d.requestView(c), width, height, c.st)
	}
	return blank(width, height)
}

func (d detailsModel) workerView(c common, s *snapshot) workerDetailsView {
	return workerDetailsView{
		worker:       d.worker,
		gone:         d.gone,
		latest:       s.latest,
		events:       d.events,
		eventsErr:    d.eventsErr,
		eventsLoaded: d.eventsLoaded,
		scroll:       d.scroll,
		now:          c.now,
	}
}

func (d detailsModel) requestView(c common) requestDetailsView {
	return requestDetailsView{req: d.req, gone: d.gone, scroll: d.scroll, now: c.now}
}

// maxScroll is the largest useful scroll offset in a width×height view,
// so scrolling past the end does not have to be scrolled back.
func (d detailsModel) maxScroll(c common, s *snapshot, width, height int) int {
	cw, ch := contentSize(width, height)
	var n int
	switch d.kind {
	case workerDetails:
		n = len(workerDetailLines(d.workerView(c, s), cw, c.st))
	case requestDetails:
		n = len(requestDetailLines(d.requestView(c), c.st))
	}
	return max(0, n-ch)
}

// workerDetailsView is everything a worker's details draw.
type workerDetailsView struct {
	worker       api.Worker
	gone         bool
	latest       string
	events       []api.WorkerEvent
	eventsErr    error
	eventsLoaded bool
	scroll       int
	now          time.Time
}

// field is one "label  value" line of a details view, the value in parts:
// the API's text, escaped, each part in its style.
func field(st *styles, label string, value ...cell) string {
	var b strings.Builder
	b.WriteString(st.dim.Render(padRight(label, 11)))
	for _, c := range value {
		text := c.text
		if !c.drawn {
			text = termsafe.Line(text)
		}
		if c.style != nil {
			text = c.style.Render(text)
		}
		b.WriteString(text)
	}
	return b.String()
}

// renderWorkerDetails draws a worker's details in exactly width×height cells.
func renderWorkerDetails(d workerDetailsView, width, height int, st *styles) string {
	cw, _ := contentSize(width, height)
	title := "Worker " + d.worker.WorkerName
	if d.worker.Simulated {
		title += " (simulated)"
	}
	return scrolled(st, frame{title: title, focused: true}, workerDetailLines(d, cw, st), d.scroll, width, height)
}

func workerDetailLines(d workerDetailsView, cw int, st *styles) []string {
	w := d.worker
	var lines []string
	if d.gone {
		lines = append(lines, st.warn.Render("no longer listed by the gateway; showing the last known state"), "")
	}
	lines = append(lines, field(st, "ID", plain(w.WorkerID)))
	lines = append(lines, field(st, "Status", workerStatus(st, w)))
	version := []cell{plain(cmp.Or(w.Version, "—"))}
	if buildinfo.Outdated(w.Version, d.latest) {
		version = append(version, plain(" "), styled("↑ latest is "+d.latest, st.warn))
	}
	lines = append(lines, field(st, "Version", version...))
	load := fmt.Sprintf("%d of %d slots busy · %d queued", w.ActiveTasks, w.MaxConcurrent, w.QueueDepth)
	if w.MaxConcurrent <= 0 {
		load = fmt.Sprintf("%d running · %d queued", w.ActiveTasks, w.QueueDepth)
	}
	lines = append(lines, field(st, "Load", plain(load)))
	seen := fmtAge(time.Duration(w.LastSeenSecondsAgo)*time.Second) + " ago"
	switch {
	case w.OfflineSince != nil:
		seen += " · offline since " + fmtClock(*w.OfflineSince, d.now)
	case w.ConnectedAt != nil:
		seen += " · connected " + fmtClock(*w.ConnectedAt, d.now)
	}
	lines = append(lines, field(st, "Last seen", plain(seen)))
	if len(w.Engines) > 0 {
		var es []string
		for _, e := range w.Engines {
			s := e.Kind
			if e.URL != "" {
				s += " " + e.URL
			}
			if e.Simulated {
				s += " (simulated)"
			}
			es = append(es, s)
		}
		lines = append(lines, field(st, "Engines", plain(strings.Join(es, ", "))))
	}

	lines = append(lines, "", st.bold.Render(fmt.Sprintf("Models (%d)", len(w.Models))))
	if len(w.Models) == 0 {
		lines = append(lines, st.dim.Render("none"))
	} else {
		cols := []column{
			{title: "ID", width: 12, flex: 2, max: 40},
			{title: "CAPABILITIES", width: 12, flex: 3},
			{title: "CONTEXT", width: 7, right: true},
			{title: "ENGINE", width: 6, drop: 2},
			{title: "LOADED", width: 6, drop: 1},
		}
		widths := fitColumns(cols, cw)
		lines = append(lines, tableHeader(st, cols, widths))
		for _, m := range w.Models {
			loaded := "—"
			if m.Loaded != nil {
				loaded = map[bool]string{true: "yes", false: "no"}[*m.Loaded]
				if *m.Loaded && m.AlwaysOn {
					loaded = "always"
				}
			}
			caps := strings.Join(m.Capabilities, ", ")
			if caps == "" {
				caps = "—"
			}
			lines = append(lines, tableRow(cols, widths, []cell{
				plain(m.ID), plain(caps), plain(fmtContext(m.ContextWindow)), plain(m.Engine), plain(loaded),
			}, nil))
		}
	}

	lines = append(lines, "", st.bold.Render("Recent events"))
	switch {
	case d.eventsErr != nil:
		lines = append(lines, st.bad.Render("could not load events: "+termsafe.Line(d.eventsErr.Error())))
	case !d.eventsLoaded:
		lines = append(lines, st.dim.Render("loading…"))
	case len(d.events) == 0:
		lines = append(lines, st.dim.Render("none"))
	default:
		// Times are clock times; older events need the date as well.
		timeW := 8
		for _, e := range d.events {
			timeW = max(timeW, len(fmtClock(e.CreatedAt, d.now)))
		}
		cols := []column{
			{title: "TIME", width: timeW},
			{title: "EVENT", width: 14},
			{title: "DETAIL", width: 10, flex: 1},
		}
		widths := fitColumns(cols, cw)
		lines = append(lines, tableHeader(st, cols, widths))
		for _, e := range d.events {
			detail := ""
			if e.Detail != nil {
				detail = *e.Detail
			}
			if e.Actor != nil && *e.Actor != "" {
				detail = strings.TrimSpace(detail + " (by " + *e.Actor + ")")
			}
			lines = append(lines, tableRow(cols, widths, []cell{
				styled(fmtClock(e.CreatedAt, d.now), st.dim), plain(e.EventType), plain(detail),
			}, nil))
		}
	}
	return lines
}

// requestDetailsView is everything a request's details draw.
type requestDetailsView struct {
	req    api.InflightRequest
	gone   bool
	scroll int
	now    time.Time
}

// renderRequestDetails draws an in-flight request's details in exactly
// width×height cells: every field the API reports.
func renderRequestDetails(d requestDetailsView, width, height int, st *styles) string {
	return scrolled(st, frame{title: "Request " + d.req.TaskID, focused: true}, requestDetailLines(d, st), d.scroll, width, height)
}

func requestDetailLines(d requestDetailsView, st *styles) []string {
	r := d.req
	var lines []string
	if d.gone {
		lines = append(lines, st.dim.Render("finished: no longer in flight; showing its last known state"), "")
	}
	elapsed := time.Duration(r.ElapsedMs) * time.Millisecond
	worker := []cell{plain("— (waiting for a worker)")}
	if r.WorkerName != "" || r.WorkerID != "" {
		worker = []cell{plain(r.WorkerName + " "), styled("("+r.WorkerID+")", st.dim)}
	}
	reqType := r.RequestType
	if r.Stream {
		reqType += ", streaming"
	}
	tokens, rate := "—", "—"
	if r.TokensGenerated != nil {
		tokens = strconv.Itoa(*r.TokensGenerated)
		if elapsed > 0 {
			rate = fmtRate(float64(*r.TokensGenerated)/elapsed.Seconds()) + "/s"
		}
	}
	lines = append(lines,
		field(st, "Request", plain(r.TaskID)),
		field(st, "Model", plain(r.Model)),
		field(st, "Type", plain(reqType)),
		field(st, "State", styled(r.State, stateStyle(st, r.State))),
		field(st, "Worker", worker...),
		field(st, "Started", plain(fmtClock(r.StartedAt, d.now))),
		field(st, "Elapsed", plain(fmtElapsed(elapsed))),
	)
	if r.AudioSeconds != nil {
		lines = append(lines, field(st, "Audio", plain(strconv.FormatFloat(*r.AudioSeconds, 'f', 1, 64)+" s")))
	} else {
		lines = append(lines, field(st, "Tokens", plain(tokens)), field(st, "Tokens/s", plain(rate)))
	}
	return lines
}

// scrolled boxes lines starting at line scroll (clamped so the last page
// stays full) and says in the footer what is out of view.
func scrolled(st *styles, f frame, lines []string, scroll, width, height int) string {
	_, ch := contentSize(width, height)
	scroll = min(max(scroll, 0), max(0, len(lines)-ch))
	if len(lines) > ch {
		f.footer = fmt.Sprintf("%d-%d of %d · ↑↓ scroll", scroll+1, min(len(lines), scroll+ch), len(lines))
	}
	f.footer = strings.TrimPrefix(f.footer+" · esc back", " · ")
	return box(st, f, lines[scroll:], width, height)
}
