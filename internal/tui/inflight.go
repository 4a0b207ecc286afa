package tui

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"charm.land/lipgloss/v2"

	"github.com/svc-dev/svc/internal/api"
)

// inflightPane is the in-flight requests list.
type inflightPane struct {
	list listState
}

// inflightRows filters and orders rows, oldest first. The API already sends
// them oldest first; sorting again keeps the order stable if it stops.
func inflightRows(all []api.InflightRequest, filter string) []api.InflightRequest {
	var out []api.InflightRequest
	for _, r := range all {
		if matches(filter, r.Model, r.WorkerName, r.TaskID, r.State) {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b api.InflightRequest) int { return a.StartedAt.Compare(b.StartedAt) })
	return out
}

func inflightIDs(rows []api.InflightRequest) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.TaskID
	}
	return ids
}

// inflightView is everything the in-flight pane draws.
type inflightView struct {
	rows    []api.InflightRequest // filtered, oldest first
	total   int                   // rows before filtering
	cursor  int                   // selected row, -1 for none
	filter  string
	focused bool
	loaded  bool // false until the first answer arrived
	// denied is the gateway's refusal of the key, when it may not read
	// the requests in flight.
	denied string
	now    time.Time
}

func (p inflightPane) view(c common, d *snapshot, width, height int, focused bool) string {
	rows := inflightRows(d.inflight, p.list.filter)
	return renderInflight(inflightView{
		rows:    rows,
		total:   len(d.inflight),
		cursor:  p.list.index(inflightIDs(rows)),
		filter:  p.list.filter,
		focused: focused,
		loaded:  d.haveInflight,
		denied:  d.inflightDenied,
		now:     c.now,
	}, width, height, c.st)
}

// renderInflight draws the in-flight pane in exactly width×height cells.
func renderInflight(d inflightView, width, height int, st *styles) string {
	cw, ch := contentSize(width, height)
	// A narrow terminal loses whole columns, the least telling first,
	// rather than show the last ones cut short: "1m0" for 1m08s.
	cols := []column{
		{width: 1},
		{title: "MODEL", width: 10, flex: 3, max: 40},
		{title: "WORKER", width: 8, flex: 2, max: 24, drop: 1},
		{title: "TYPE", width: 5, drop: 2},
		{title: "STATE", width: 7},
		{title: "ELAPSED", width: 7, right: true},
		{title: "TOKENS", width: 6, right: true, drop: 3},
		{title: "TOK/S", width: 6, right: true, drop: 4},
	}
	// Wide terminals also get when each request started and its id.
	if cw >= 90 {
		cols = append(cols, column{title: "STARTED", width: 8, drop: 5})
	}
	if cw >= 112 {
		cols = append(cols, column{title: "REQUEST", width: 12, flex: 2, max: 40, drop: 6})
	}
	widths := fitColumns(cols, cw)

	f := frame{title: fmt.Sprintf("In flight (%d)", d.total), focused: d.focused}
	if d.denied != "" {
		f.title = "In flight"
	}
	var body []string
	switch {
	case d.denied != "":
		body = []string{st.dim.Render("not shown: this API key may not read usage (usage:read)")}
	case !d.loaded:
		body = []string{st.dim.Render("waiting for the gateway…")}
	case len(d.rows) == 0 && d.filter != "":
		body = []string{st.dim.Render("no request matches /" + d.filter)}
		f.footer = listFooter(d.filter, 0, d.total, 0, 0)
	case len(d.rows) == 0:
		body = []string{st.dim.Render("no requests in flight")}
	default:
		body = append(body, tableHeader(st, cols, widths))
		visible := ch - 1
		first := window(d.cursor, len(d.rows), visible)
		for i := first; i < len(d.rows) && i < first+visible; i++ {
			body = append(body, inflightRow(st, cols, widths, d.rows[i], i == d.cursor, d.focused, d.now))
		}
		f.footer = listFooter(d.filter, len(d.rows), d.total, first, visible)
	}
	return box(st, f, body, width, height)
}

func inflightRow(st *styles, cols []column, widths []int, r api.InflightRequest, selected, focused bool, now time.Time) string {
	elapsed := time.Duration(r.ElapsedMs) * time.Millisecond
	tokens, rate := "—", "—"
	if r.TokensGenerated != nil {
		tokens = strconv.Itoa(*r.TokensGenerated)
		if elapsed > 0 {
			rate = fmtRate(float64(*r.TokensGenerated) / elapsed.Seconds())
		}
	}
	worker := plain(r.WorkerName)
	if r.WorkerName == "" {
		worker = styled("—", st.dim)
	}
	if r.AudioSeconds != nil {
		tokens = fmtAudio(*r.AudioSeconds)
	}
	cells := []cell{
		marker(st, selected),
		plain(r.Model),
		worker,
		plain(shortType(r.RequestType)),
		styled(r.State, stateStyle(st, r.State)),
		plain(fmtElapsed(elapsed)),
		plain(tokens),
		plain(rate),
		styled(fmtClock(r.StartedAt, now), st.dim),
		styled(r.TaskID, st.dim),
	}
	return tableRow(cols, widths, cells, rowStyle(st, selected, focused))
}

// shortType names a request type in the few cells the table has.
func shortType(t string) string {
	switch t {
	case api.RequestEmbeddings:
		return "embed"
	case api.RequestCompletion:
		return "cmpl"
	case api.RequestAudio:
		return "stt" // speech to text
	case api.RequestSpeech:
		return "tts" // text to speech
	case api.RequestModeration:
		return "mod"
	case api.RequestRerank:
		return "rank"
	case api.RequestImages:
		return "image"
	}
	return t
}

// fmtAudio is a length of audio, shown where a token count would be.
func fmtAudio(seconds float64) string {
	return fmtElapsed(time.Duration(seconds * float64(time.Second)))
}

// stateStyle colours a request's state: a queued request is waiting for a
// worker, which is worth noticing; a running one is fine.
func stateStyle(st *styles, state string) lipgloss.Style {
	if state == api.StateQueued {
		return st.warn
	}
	return st.ok
}
