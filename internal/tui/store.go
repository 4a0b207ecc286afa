package tui

import (
	"fmt"
	"strings"
	"time"

	"charm.land/lipgloss/v2"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/termsafe"
)

// storeAlert is whether the gateway's store warrants the warning line
// under the header: only while its writes fail or it refuses inference.
func storeAlert(h *api.StoreHealth) bool { return h != nil && h.State != api.StoreOK && h.State != "" }

// renderStoreWarning draws the line that says the gateway's usage store
// cannot write: rows are held and retried, or, at the bound, new
// inference is refused. The longest wording that fits is used.
func renderStoreWarning(h *api.StoreHealth, now time.Time, width int, st *styles) string {
	cause := termsafe.Line(h.Error)
	if cause == "" {
		cause = "writes behind"
	}
	head := "⚠ usage store: " + cause
	style := st.statusWarn
	what := "rows kept and retried; inference served"
	short := "retrying"
	if h.State == api.StoreRefusing {
		head = "✖ usage store: " + cause
		style = st.statusError
		what = "new inference refused (503)"
		short = "inference refused"
	}
	if h.FailingSince != nil {
		head += " since " + fmtClock(*h.FailingSince, now)
	}
	waiting := fmtCount(int64(h.PendingUsageRows)) + " rows waiting"
	backlog := fmt.Sprintf("%s of %s held", fmtBytes(h.BacklogBytes), fmtBytes(h.BacklogLimitBytes))
	var dropped []string
	if h.DroppedEvents > 0 {
		dropped = append(dropped, fmtCount(int64(h.DroppedEvents))+" events")
	}
	if h.DroppedPowerReports > 0 {
		dropped = append(dropped, fmtCount(int64(h.DroppedPowerReports))+" power reports")
	}
	lost := ""
	if len(dropped) > 0 {
		lost = strings.Join(dropped, ", ") + " dropped"
	}
	join := func(parts ...string) string {
		var keep []string
		for _, p := range parts {
			if p != "" {
				keep = append(keep, p)
			}
		}
		return strings.Join(keep, " · ")
	}
	line := head
	for _, s := range []string{
		join(head, what, waiting, backlog, lost),
		join(head, what, waiting, lost),
		join(head, what, waiting),
		join(head, short, waiting),
		join(head, short),
	} {
		if lipgloss.Width(s) <= width {
			line = s
			break
		}
	}
	return fitLine(st, style.Render(truncate(line, width)), width)
}

// fmtBytes formats a size in bytes: 512 B, 1.5 MB, 64 MB.
func fmtBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<10))) + " kB"
	case n < 1<<30:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<20))) + " MB"
	}
	return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<30))) + " GB"
}
