package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"charm.land/lipgloss/v2"
	"golang.org/x/term"

	"github.com/svc-dev/svc/internal/iostreams"
)

// colorScheme styles text with ANSI escapes when colour is enabled and
// returns it untouched otherwise. Raw escapes rather than a renderer that
// probes the terminal: iostreams has already decided.
type colorScheme struct{ enabled bool }

func (c colorScheme) sgr(code, s string) string {
	if !c.enabled || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func (c colorScheme) bold(s string) string   { return c.sgr("1", s) }
func (c colorScheme) faint(s string) string  { return c.sgr("2", s) }
func (c colorScheme) red(s string) string    { return c.sgr("31", s) }
func (c colorScheme) green(s string) string  { return c.sgr("32", s) }
func (c colorScheme) yellow(s string) string { return c.sgr("33", s) }
func (c colorScheme) gray(s string) string   { return c.sgr("90", s) }

// tablePrinter prints rows for people. On a terminal the columns are
// aligned, coloured when allowed, times are ages ("3m ago"), and the
// columns marked shrinkable are cut with "…" to fit the terminal's width.
// Anywhere else it prints the same table without colour, cutting nothing,
// with RFC 3339 times; scripts should prefer --json.
type tablePrinter struct {
	out     io.Writer
	tty     bool
	cs      colorScheme
	width   int
	now     func() time.Time
	headers []string
	shrink  map[int]int // column → order in which it gives way, from 1
	rows    [][]tableCell
	cur     []tableCell
}

type tableCell struct {
	text  string
	style func(string) string
}

// defaultWidth is assumed when the terminal's width cannot be read.
const defaultWidth = 100

func newTablePrinter(ios *iostreams.IOStreams, headers ...string) *tablePrinter {
	tty := ios.IsStdoutTTY()
	return &tablePrinter{
		out: ios.Out, tty: tty, cs: colorScheme{ios.ColorEnabled()},
		width: termWidth(ios.Out, tty, defaultWidth), now: time.Now, headers: headers, shrink: map[int]int{},
	}
}

// termWidth is w's width in cells when it is a terminal, else fallback.
func termWidth(w io.Writer, tty bool, fallback int) int {
	if f, ok := w.(*os.File); ok && tty {
		if n, _, err := term.GetSize(int(f.Fd())); err == nil && n > 0 {
			return n
		}
	}
	return fallback
}

// shrinkable marks the columns, by header, that may be cut on a
// terminal, in the order they give way: the first down to its minimum
// before the next.
func (t *tablePrinter) shrinkable(headers ...string) {
	for order, h := range headers {
		for i, th := range t.headers {
			if th == h {
				t.shrink[i] = order + 1
			}
		}
	}
}

// field adds a cell to the current row, styled by style when colour is on.
func (t *tablePrinter) field(text string, style ...func(string) string) {
	c := tableCell{text: text}
	if len(style) > 0 {
		c.style = style[0]
	}
	t.cur = append(t.cur, c)
}

// timeField adds a time: an age on a terminal, RFC 3339 elsewhere.
func (t *tablePrinter) timeField(ts time.Time) { t.field(t.fmtTime(ts)) }

func (t *tablePrinter) fmtTime(ts time.Time) string {
	if !t.tty {
		return fmtTime(ts)
	}
	return fmtAge(t.now().Sub(ts))
}

// fmtTimePtr is fmtTime for an optional time: "-" when nil.
func (t *tablePrinter) fmtTimePtr(ts *time.Time) string {
	if ts == nil {
		return "-"
	}
	return t.fmtTime(*ts)
}

// row adds a whole row of unstyled cells.
func (t *tablePrinter) row(cols ...string) {
	for _, c := range cols {
		t.field(c)
	}
	t.endRow()
}

func (t *tablePrinter) endRow() {
	t.rows = append(t.rows, t.cur)
	t.cur = nil
}

// render writes the table.
func (t *tablePrinter) render() error {
	if len(t.cur) > 0 {
		t.endRow()
	}
	n := len(t.headers)
	widths := make([]int, n)
	for i, h := range t.headers {
		widths[i] = lipgloss.Width(h)
	}
	for _, r := range t.rows {
		for i := 0; i < n && i < len(r); i++ {
			widths[i] = max(widths[i], lipgloss.Width(r[i].text))
		}
	}
	if t.tty {
		t.fit(widths)
	}
	line := func(cells []tableCell) error {
		var b strings.Builder
		for i := range n {
			var c tableCell
			if i < len(cells) {
				c = cells[i]
			}
			text := truncate(c.text, widths[i])
			pad := widths[i] - lipgloss.Width(text)
			if c.style != nil && t.cs.enabled {
				text = c.style(text)
			}
			b.WriteString(text)
			if i < n-1 {
				b.WriteString(strings.Repeat(" ", pad+2))
			}
		}
		// Empty cells at the end leave no trailing blanks.
		_, err := io.WriteString(t.out, strings.TrimRight(b.String(), " ")+"\n")
		return err
	}
	head := make([]tableCell, n)
	for i, h := range t.headers {
		head[i] = tableCell{text: h, style: t.cs.bold}
	}
	if err := line(head); err != nil {
		return err
	}
	for _, r := range t.rows {
		if err := line(r); err != nil {
			return err
		}
	}
	return nil
}

// minShrink is the narrowest a shrinkable column is cut to.
const minShrink = 12

// fit narrows the shrinkable columns, in their order, until the table
// fits the terminal or none can give more.
func (t *tablePrinter) fit(widths []int) {
	total := 2 * (len(widths) - 1)
	for _, w := range widths {
		total += w
	}
	for total > t.width {
		next := -1
		for i, w := range widths {
			if o := t.shrink[i]; o > 0 && w > minShrink && (next < 0 || o < t.shrink[next]) {
				next = i
			}
		}
		if next < 0 {
			return
		}
		cut := min(total-t.width, widths[next]-minShrink)
		widths[next] -= cut
		total -= cut
	}
}

// truncate cuts s to at most w display cells, ending in "…".
func truncate(s string, w int) string {
	if lipgloss.Width(s) <= w {
		return s
	}
	var b strings.Builder
	used := 0
	for _, r := range s {
		rw := lipgloss.Width(string(r))
		if used+rw > w-1 {
			break
		}
		b.WriteRune(r)
		used += rw
	}
	return b.String() + "…"
}

// fmtAge says how long ago something happened, coarsely.
func fmtAge(d time.Duration) string {
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
	}
}

// fmtMs prints a duration in milliseconds readably: 850ms, 1.2s, 3m4s.
func fmtMs(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", ms)
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return d.Truncate(time.Second).String()
	}
}

func fmtMsPtr(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return fmtMs(*ms)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
