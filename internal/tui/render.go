package tui

import (
	"math"
	"strings"

	"charm.land/lipgloss/v2"

	"github.com/svc-dev/svc/internal/termsafe"
)

// This file holds the layout primitives every pane is drawn with: a framed
// box, table columns and sparklines. They are pure; a pane's render function
// turns its data into body lines and box frames them to an exact size, so
// panes can be joined side by side and stacked without lipgloss measuring
// and re-padding whole blocks.

// frame is one pane's decoration.
type frame struct {
	title   string // in the top border
	footer  string // right-aligned in the bottom border
	focused bool
}

// box frames body into exactly width×height cells: a one-cell border, a
// one-cell padding left and right, the body truncated or padded to fit.
func box(st *styles, f frame, body []string, width, height int) string {
	if width < 4 || height < 2 {
		return blank(width, height)
	}
	h, v, tl, tr, bl, br := "─", "│", "╭", "╮", "╰", "╯"
	bs, ts := st.border, st.title
	if f.focused {
		// A heavier frame marks focus even without colour (NO_COLOR, ASCII).
		h, v, tl, tr, bl, br = "━", "┃", "┏", "┓", "┗", "┛"
		bs, ts = st.focusBorder, st.focusTitle
	}
	inner := width - 2

	var b strings.Builder
	title := truncate(termsafe.Line(f.title), inner-3)
	b.WriteString(bs.Render(tl+h) + " " + ts.Render(title) + " ")
	b.WriteString(bs.Render(strings.Repeat(h, max(0, inner-3-lipgloss.Width(title))) + tr))
	b.WriteByte('\n')

	cw := inner - 2
	for i := range height - 2 {
		var line string
		if i < len(body) {
			line = body[i]
		}
		b.WriteString(bs.Render(v) + " " + fitLine(st, line, cw) + " " + bs.Render(v))
		b.WriteByte('\n')
	}

	footer := truncate(termsafe.Line(f.footer), inner-4)
	if footer == "" {
		b.WriteString(bs.Render(bl + strings.Repeat(h, inner) + br))
	} else {
		fill := inner - 3 - lipgloss.Width(footer)
		b.WriteString(bs.Render(bl+strings.Repeat(h, fill)) + " " + st.dim.Render(footer) + " " + bs.Render(h+br))
	}
	return b.String()
}

// contentSize is the body area box leaves inside width×height.
func contentSize(width, height int) (w, h int) {
	return max(0, width-4), max(0, height-2)
}

// blank is an empty width×height block.
func blank(width, height int) string {
	if width <= 0 || height <= 0 {
		return ""
	}
	line := strings.Repeat(" ", width)
	lines := make([]string, height)
	for i := range lines {
		lines[i] = line
	}
	return strings.Join(lines, "\n")
}

// hjoin puts equal-height blocks side by side.
func hjoin(blocks ...string) string {
	var split [][]string
	n := 0
	for _, b := range blocks {
		if b == "" {
			continue
		}
		lines := strings.Split(b, "\n")
		split = append(split, lines)
		n = max(n, len(lines))
	}
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for _, lines := range split {
			if i < len(lines) {
				b.WriteString(lines[i])
			}
		}
		out[i] = b.String()
	}
	return strings.Join(out, "\n")
}

// vjoin stacks blocks.
func vjoin(blocks ...string) string {
	var out []string
	for _, b := range blocks {
		if b != "" {
			out = append(out, b)
		}
	}
	return strings.Join(out, "\n")
}

// column is one table column.
type column struct {
	title string
	width int  // fixed width, or the minimum of a flexible column
	flex  int  // share of the room left over; 0 for fixed columns
	max   int  // cap of a flexible column; 0 for none
	right bool // right-aligned (numbers)
	// drop orders which columns go first when the width runs out: higher
	// goes first, 0 is never dropped.
	drop int
}

const colGap = 2

// fitColumns decides each column's width in a table of width w: it drops
// optional columns until the minimum widths fit, then shares out the rest
// between the flexible ones. A dropped column gets width 0.
func fitColumns(cols []column, w int) []int {
	widths := make([]int, len(cols))
	alive := make([]bool, len(cols))
	for i := range cols {
		alive[i] = true
	}
	need := func() int {
		n, k := 0, 0
		for i, c := range cols {
			if alive[i] {
				n += c.width
				k++
			}
		}
		return n + colGap*max(0, k-1)
	}
	for need() > w {
		worst := -1
		for i, c := range cols {
			if alive[i] && c.drop > 0 && (worst < 0 || c.drop > cols[worst].drop) {
				worst = i
			}
		}
		if worst < 0 {
			break
		}
		alive[worst] = false
	}
	for i, c := range cols {
		if alive[i] {
			widths[i] = c.width
		}
	}
	// Share the room left, capping columns at their max and handing what a
	// capped column cannot take to the others.
	left := w - need()
	for left > 0 {
		total := 0
		for i, c := range cols {
			if alive[i] && c.flex > 0 && (c.max == 0 || widths[i] < c.max) {
				total += c.flex
			}
		}
		if total == 0 {
			break
		}
		given := 0
		for i, c := range cols {
			if !alive[i] || c.flex == 0 || (c.max != 0 && widths[i] >= c.max) {
				continue
			}
			add := max(1, left*c.flex/total)
			if c.max != 0 {
				add = min(add, c.max-widths[i])
			}
			add = min(add, left-given)
			widths[i] += add
			given += add
			if given == left {
				break
			}
		}
		if given == 0 {
			break
		}
		left -= given
	}
	return widths
}

// cell is one table cell: plain text and the style it shows in when its
// row is not selected. A suffix (a marker such as "↑" or "sim") is kept
// whole when the text has to be truncated.
type cell struct {
	text        string
	style       *lipgloss.Style
	suffix      string
	suffixStyle *lipgloss.Style
	// drawn is text the dashboard drew itself, styled already (a meter).
	// Any other text is the API's, and is escaped so that a worker's name
	// cannot drive the terminal.
	drawn bool
}

func plain(s string) cell                     { return cell{text: s} }
func styled(s string, st lipgloss.Style) cell { return cell{text: s, style: &st} }
func drawn(s string) cell                     { return cell{text: s, drawn: true} }

// render fits the cell into w cells, styled unless its row is selected.
func (c cell) render(w int, right, selected bool) string {
	text := c.text
	if !c.drawn {
		text = termsafe.Line(text)
	}
	suffix := c.suffix
	if suffix != "" && lipgloss.Width(suffix)+2 > w {
		suffix = "" // no room for text and marker: the text matters more
	}
	if suffix != "" {
		suffix = " " + suffix
	}
	text = truncate(text, w-lipgloss.Width(suffix))
	pad := strings.Repeat(" ", max(0, w-lipgloss.Width(text)-lipgloss.Width(suffix)))
	if !selected {
		if c.style != nil {
			text = c.style.Render(text)
		}
		if c.suffixStyle != nil && suffix != "" {
			suffix = " " + c.suffixStyle.Render(suffix[1:])
		}
	}
	if right {
		return pad + text + suffix
	}
	return text + suffix + pad
}

// tableRow lays out one row. A selected row is drawn in one style end to
// end, ignoring the cells' own colours, so the highlight reads as one bar.
func tableRow(cols []column, widths []int, cells []cell, sel *lipgloss.Style) string {
	var parts []string
	for i, c := range cols {
		w := widths[i]
		if w == 0 {
			continue
		}
		var cl cell
		if i < len(cells) {
			cl = cells[i]
		}
		parts = append(parts, cl.render(w, c.right, sel != nil))
	}
	line := strings.Join(parts, strings.Repeat(" ", colGap))
	if sel != nil {
		return sel.Render(line)
	}
	return line
}

// tableHeader is the column titles row.
func tableHeader(st *styles, cols []column, widths []int) string {
	cells := make([]cell, len(cols))
	for i, c := range cols {
		cells[i] = styled(c.title, st.colHead)
	}
	return tableRow(cols, widths, cells, nil)
}

// window is the first row to show so that cursor stays in view when only
// rows rows fit.
func window(cursor, n, rows int) int {
	if rows <= 0 || n <= rows || cursor < rows {
		return 0
	}
	return min(cursor-rows+1, n-rows)
}

const sparkBlocks = "▁▂▃▄▅▆▇█"

// sparkBlock is the i-th block character, 1 (lowest) to 8 (full).
func sparkBlock(i int) string {
	const size = len("▁")
	return sparkBlocks[(i-1)*size : i*size]
}

// sparkline draws the newest width values of vals (oldest first) as rows
// lines of block characters, newest on the right. Values are scaled to the
// largest one shown. A zero is the lowest block, so "quiet" reads
// differently from "no data yet", which is blank; any non-zero value is at
// least the second block so it never looks like zero.
func sparkline(vals []float64, width, rows int) []string {
	if width <= 0 || rows <= 0 {
		return nil
	}
	if len(vals) > width {
		vals = vals[len(vals)-width:]
	}
	peak := 0.0
	for _, v := range vals {
		if v > peak { // false for NaN, which would poison the scale
			peak = v
		}
	}
	levels := rows * 8
	lv := make([]int, width) // 0: no sample
	off := width - len(vals)
	for i, v := range vals {
		switch {
		case v <= 0 || peak <= 0 || math.IsNaN(v):
			lv[off+i] = 1
		default:
			lv[off+i] = max(2, min(levels, int(math.Ceil(v/peak*float64(levels)))))
		}
	}
	out := make([]string, rows)
	for r := range rows {
		base := (rows - 1 - r) * 8 // levels below this row
		var b strings.Builder
		for _, l := range lv {
			switch n := l - base; {
			case n <= 0:
				b.WriteByte(' ')
			case n >= 8:
				b.WriteString(sparkBlock(8))
			default:
				b.WriteString(sparkBlock(n))
			}
		}
		out[r] = b.String()
	}
	return out
}
