package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"charm.land/lipgloss/v2"
	"golang.org/x/term"

	"github.com/svc-dev/svc/internal/iostreams"
	"github.com/svc-dev/svc/internal/termsafe"
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
// table is made to fit the terminal's width: the columns marked
// shrinkable are cut with "…" (lists are summed up instead), then the
// columns marked optional are left out. Anywhere else it prints the same
// table without colour, cutting nothing but long lists, with RFC 3339
// times; scripts should prefer --json.
type tablePrinter struct {
	out     io.Writer
	tty     bool
	cs      colorScheme
	width   int
	now     func() time.Time
	headers []string
	shrink  map[int]int // column → order in which it gives way, from 1
	drop    []int       // columns left out, in this order, when cutting is not enough
	rows    [][]tableCell
	cur     []tableCell
}

type tableCell struct {
	text  string
	style func(string) string
	// fit, when set, writes the cell in w cells when text is wider,
	// instead of cutting it.
	fit func(w int) string
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

// optional marks the columns, by header, that are left out on a terminal
// the table does not fit once the shrinkable ones are cut, in the order
// they go: what 'show' or --json has anyway.
func (t *tablePrinter) optional(headers ...string) {
	for _, h := range headers {
		if i := slices.Index(t.headers, h); i >= 0 {
			t.drop = append(t.drop, i)
		}
	}
}

// field adds a cell to the current row, styled by style when colour is on.
// The text is escaped, before it is measured: most cells are the server's,
// and a worker's name must not drive the reader's terminal.
func (t *tablePrinter) field(text string, style ...func(string) string) {
	c := tableCell{text: termsafe.Line(text)}
	if len(style) > 0 {
		c.style = style[0]
	}
	t.cur = append(t.cur, c)
}

// listWidth is the most cells a list of many items takes off a terminal,
// where no width is known: a worker's models are a dozen or more ids, and
// a table of them all would be hundreds of characters wide.
const listWidth = 40

// listField adds a cell listing items: all of them where the column has
// room, else as many as fit and a count of the rest ("a, b +9 more").
// noun is what the items are, for a count alone ("12 models"). Off a
// terminal the list takes at most pipeWidth cells, or all it needs when
// pipeWidth is 0.
func (t *tablePrinter) listField(noun string, items []string, pipeWidth int) {
	items = escapeAll(items)
	c := tableCell{text: dash(strings.Join(items, ", ")), fit: func(w int) string { return summarise(items, noun, w) }}
	if !t.tty && pipeWidth > 0 {
		c.text = summarise(items, noun, pipeWidth)
	}
	t.cur = append(t.cur, c)
}

// escapeAll is items escaped for the terminal, in a new slice.
func escapeAll(items []string) []string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = termsafe.Line(s)
	}
	return out
}

// summarise lists items in at most w cells: the most of them that fit
// whole, then how many are left out; "N nouns" or a cut first item where
// not even one fits with the count.
func summarise(items []string, noun string, w int) string {
	if len(items) == 0 {
		return "-"
	}
	for k := len(items); k >= 1; k-- {
		s := strings.Join(items[:k], ", ")
		if k < len(items) {
			s += fmt.Sprintf(" +%d more", len(items)-k)
		}
		if lipgloss.Width(s) <= w {
			return s
		}
	}
	if n := fmt.Sprintf("%d %s", len(items), noun); len(items) > 1 && lipgloss.Width(n) <= w {
		return n
	}
	return truncate(items[0], w)
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
		t.summarise(widths)
	}
	line := func(cells []tableCell) error {
		var b strings.Builder
		pad := -1 // before the first column shown, none
		for i := range n {
			if widths[i] == dropped {
				continue
			}
			var c tableCell
			if i < len(cells) {
				c = cells[i]
			}
			if pad >= 0 {
				b.WriteString(strings.Repeat(" ", pad+2))
			}
			text := truncate(c.text, widths[i])
			pad = widths[i] - lipgloss.Width(text)
			if c.style != nil && t.cs.enabled {
				text = c.style(text)
			}
			b.WriteString(text)
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

// summarise rewrites the cells that can say themselves shorter in the
// widths fit gave their columns, then narrows each such column to its
// widest cell: a summary seldom fills the room it was given.
func (t *tablePrinter) summarise(widths []int) {
	for i := range widths {
		if widths[i] == dropped {
			continue
		}
		fitted, widest := false, lipgloss.Width(t.headers[i])
		for _, r := range t.rows {
			if i >= len(r) {
				continue
			}
			if c := &r[i]; c.fit != nil && lipgloss.Width(c.text) > widths[i] {
				c.text, fitted = c.fit(widths[i]), true
			}
			widest = max(widest, lipgloss.Width(r[i].text))
		}
		if fitted {
			widths[i] = min(widths[i], widest)
		}
	}
}

// minShrink is the narrowest a shrinkable column is cut to.
const minShrink = 12

// dropped is the width of a column left out.
const dropped = -1

// fit makes the table fit the terminal, or come as near as it can: it
// leaves out as few optional columns as cutting the shrinkable ones to
// their least needs, then narrows the shrinkable ones, in their order,
// until the table fits or none can give more.
func (t *tablePrinter) fit(widths []int) {
	leastOf := func(i int) int {
		if t.shrink[i] > 0 {
			return min(widths[i], minShrink)
		}
		return widths[i]
	}
	total, least := -2, -2 // no gap before the first column
	for i, w := range widths {
		total += w + 2
		least += leastOf(i) + 2
	}
	for _, i := range t.drop {
		if least <= t.width {
			break
		}
		least -= leastOf(i) + 2
		total -= widths[i] + 2
		widths[i] = dropped
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
