package tui

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"charm.land/lipgloss/v2"
)

// truncate shortens plain text to w cells, ending it with … when cut.
func truncate(s string, w int) string {
	if w <= 0 {
		return ""
	}
	if lipgloss.Width(s) <= w {
		return s
	}
	if w == 1 {
		return "…"
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		rw := lipgloss.Width(string(r))
		if n+rw > w-1 {
			break
		}
		b.WriteRune(r)
		n += rw
	}
	b.WriteString("…")
	return b.String()
}

// padRight pads s (which may hold escape codes) with spaces to w cells.
func padRight(s string, w int) string {
	if n := lipgloss.Width(s); n < w {
		return s + strings.Repeat(" ", w-n)
	}
	return s
}

// padLeft right-aligns s in w cells.
func padLeft(s string, w int) string {
	if n := lipgloss.Width(s); n < w {
		return strings.Repeat(" ", w-n) + s
	}
	return s
}

// fitLine makes a (possibly styled) line exactly w cells wide. Renderers
// truncate their cells themselves; this is the backstop that keeps a frame
// rectangular whatever a pane produced.
func fitLine(st *styles, s string, w int) string {
	if w <= 0 {
		return ""
	}
	if lipgloss.Width(s) > w {
		s = lipgloss.NewStyle().MaxWidth(w).Render(s)
	}
	return padRight(s, w)
}

// spreadLine puts left and right on one line of width w, truncating the
// left part first since the right part (ages, clocks, hints) is short and
// more important to keep whole.
func spreadLine(left, right string, w int) string {
	lw, rw := lipgloss.Width(left), lipgloss.Width(right)
	if lw+1+rw > w {
		return left
	}
	return left + strings.Repeat(" ", w-lw-rw) + right
}

// fmtElapsed formats a running time compactly: 0.8s, 12s, 3m05s, 2h10m.
func fmtElapsed(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	default:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
}

// fmtAge formats an age at the coarsest useful unit: 3s, 5m, 2h, 4d.
func fmtAge(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

// fmtCount formats a count: 999, 1,234, 45.6k, 1.2M.
func fmtCount(n int64) string {
	switch {
	case n < 0:
		return "-" + fmtCount(-n)
	case n < 10_000:
		s := strconv.FormatInt(n, 10)
		if len(s) > 3 {
			s = s[:len(s)-3] + "," + s[len(s)-3:]
		}
		return s
	case n < 1_000_000:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e3)) + "k"
	case n < 1_000_000_000:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e6)) + "M"
	default:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e9)) + "G"
	}
}

// fmtRate formats a per-second rate: 0, 0.4, 12.4, 356, 1.2k.
func fmtRate(v float64) string {
	switch {
	case v <= 0 || math.IsNaN(v):
		return "0"
	case v < 100:
		return trimZero(fmt.Sprintf("%.1f", v))
	case v < 1000:
		return fmt.Sprintf("%.0f", v)
	case v < 1e6:
		return trimZero(fmt.Sprintf("%.1f", v/1e3)) + "k"
	default:
		return trimZero(fmt.Sprintf("%.1f", v/1e6)) + "M"
	}
}

// fmtPct formats a share in [0, 1] as a percentage.
func fmtPct(x float64) string {
	if x <= 0 || math.IsNaN(x) {
		return "0%"
	}
	if x < 0.1 {
		return trimZero(fmt.Sprintf("%.1f", x*100)) + "%"
	}
	return fmt.Sprintf("%.0f%%", x*100)
}

func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }

// fmtContext formats a context window: 8k, 128k, 1M.
func fmtContext(n int) string {
	switch {
	case n <= 0:
		return "—"
	case n < 1024:
		return strconv.Itoa(n)
	case n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n%1024 == 0:
		return strconv.Itoa(n>>10) + "k"
	default:
		return fmtCount(int64(n))
	}
}

// fmtClock formats t in the dashboard clock's location, with the date when
// it is not today's.
func fmtClock(t, now time.Time) string {
	t = t.In(now.Location())
	y1, m1, d1 := t.Date()
	y2, m2, d2 := now.Date()
	if y1 == y2 && m1 == m2 && d1 == d2 {
		return t.Format("15:04:05")
	}
	return t.Format("Jan 02 15:04")
}

func itoa(n int) string { return strconv.Itoa(n) }
