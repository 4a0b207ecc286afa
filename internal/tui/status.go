package tui

import (
	"fmt"
	"time"

	"charm.land/lipgloss/v2"

	"github.com/svc-dev/svc/internal/termsafe"
)

// headerView is what the top line shows.
type headerView struct {
	target   string
	workers  int
	healthy  int
	inflight int
	// haveWorkers and haveInflight: the counts are known. A key that may
	// not read one of them gets no count of it, rather than a 0.
	haveWorkers, haveInflight bool
	now                       time.Time
}

// renderHeader draws the one-line header: what is being watched, the
// fleet in two numbers and the clock.
func renderHeader(d headerView, width int, st *styles) string {
	left := st.appName.Render("svc top")
	if d.target != "" {
		left += "  " + st.dim.Render(truncate(d.target, max(0, width/2)))
	}
	clock := d.now.Format("15:04:05")
	// The longest summary that fits: a narrow terminal keeps the clock and
	// the in-flight count rather than cutting a sentence in half.
	right := clock
	var summaries []string
	switch {
	case d.haveWorkers && d.haveInflight:
		summaries = []string{
			fmt.Sprintf("%d/%d workers healthy · %d in flight · %s", d.healthy, d.workers, d.inflight, clock),
			fmt.Sprintf("%d/%d healthy · %d in flight · %s", d.healthy, d.workers, d.inflight, clock),
			fmt.Sprintf("%d in flight · %s", d.inflight, clock),
		}
	case d.haveWorkers:
		summaries = []string{
			fmt.Sprintf("%d/%d workers healthy · %s", d.healthy, d.workers, clock),
			fmt.Sprintf("%d/%d healthy · %s", d.healthy, d.workers, clock),
		}
	case d.haveInflight:
		summaries = []string{fmt.Sprintf("%d in flight · %s", d.inflight, clock)}
	}
	for _, r := range summaries {
		if lipgloss.Width(left)+1+len([]rune(r)) <= width {
			right = r
			break
		}
	}
	return fitLine(st, spreadLine(left, right, width), width)
}

// statusView is what the bottom line shows.
type statusView struct {
	paused   bool
	err      string        // the failed poll's message; "" after a success
	retryIn  time.Duration // until the next attempt, when err is set
	everOK   bool          // some poll has succeeded
	age      time.Duration // since the last successful poll
	interval time.Duration

	filtering   bool
	typable     bool   // the focused pane is a list, so typing filters it
	filterLabel string // the pane being filtered
	filterInput string // the text input's view
}

// renderStatus draws the status bar. Errors keep the last data on screen,
// so the bar says how old that data is. The right side changes least and is
// kept whole; the message on the left is what gets truncated.
func renderStatus(d statusView, width int, st *styles) string {
	right := statusRight(d, st)
	lw := max(0, width-lipgloss.Width(right)-1)
	var left string
	switch {
	case d.filtering:
		left = st.bold.Render("filter "+d.filterLabel+": ") + d.filterInput
	case d.paused:
		left = st.statusWarn.Render("❚❚ paused") + st.dim.Render(" · space resumes")
	case d.err != "":
		retry := " — retrying"
		if d.retryIn > 0 {
			retry += " in " + fmtRetry(d.retryIn)
		}
		// The gateway's error message, or a proxy's: escaped.
		msg := truncate("✖ "+termsafe.Line(d.err), max(1, lw-lipgloss.Width(retry)))
		left = st.statusError.Render(msg) + st.dim.Render(retry)
	case d.everOK:
		left = st.statusOK.Render("● live")
		// The interval and the hint are whole or not there: cut, they
		// would run into the right side's words ("every 1 updated").
		if every := st.dim.Render(" · every " + fmtRetry(d.interval)); lipgloss.Width(left+every) < lw {
			left += every
			if hint := st.dim.Render(" · type to filter"); d.typable && lipgloss.Width(left+hint) < lw {
				left += hint
			}
		}
	default:
		left = st.dim.Render("connecting…")
	}
	return fitLine(st, spreadLine(fitLine(st, left, lw), right, width), width)
}

func statusRight(d statusView, st *styles) string {
	switch {
	case d.filtering:
		return st.dim.Render("enter keep · esc clear")
	case d.paused && d.everOK:
		return st.dim.Render("data " + fmtAge(d.age) + " old · ? help")
	case d.paused:
		return st.dim.Render("? help")
	case d.err != "" && d.everOK:
		return st.statusWarn.Render("stale " + fmtAge(d.age))
	case d.err != "":
		return st.dim.Render("no data yet")
	case d.everOK:
		return st.dim.Render("updated " + fmtAge(d.age) + " ago · ? help")
	}
	return st.dim.Render("? help")
}

// fmtRetry formats a short wait: 250ms, 2s, 1.5s.
func fmtRetry(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
