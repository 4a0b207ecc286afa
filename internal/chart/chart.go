// Package chart draws time series as line charts in a terminal: braille
// dots (U+2800 block, 2×4 dots a cell) with a value axis and a time axis,
// in exactly the cells it is given. It is pure text in, text out, so that
// `svc workers power` and the Power pane of `svc top` draw the same chart,
// each with its own colours: styles are plain functions, not a renderer.
package chart

import (
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Point is one value of a series: the average over [T, T+Step).
type Point struct {
	T time.Time
	V float64
}

// Series is one line of a chart.
type Series struct {
	Label  string
	Points []Point // oldest first
	// Style colours the series' dots and its legend mark; nil leaves them
	// plain.
	Style func(string) string
	// Mark draws the series in a chart of several series without colour,
	// where braille dots of one line look like any other's; 0 picks a
	// mark by the series' position.
	Mark rune
}

// Chart is a line chart of series over the time range [From, To].
type Chart struct {
	From, To time.Time
	// Step is the window each point averages over. Points more than a step
	// apart are not joined: the time between them had no readings, and a
	// line across it would invent some.
	Step   time.Duration
	Series []Series
	Unit   string // of the values, e.g. "W"; labels get k and M prefixes
	// Color says the series' styles show. Without colour, a chart of
	// several series is drawn one character a point, each series with its
	// mark, instead of in braille.
	Color bool
	// Axis styles the axes and their labels; nil leaves them plain.
	Axis func(string) string
}

// Layout constants: the time axis takes two lines under the plot (the
// rule with its ticks, then the labels), and a plot needs a little room
// before it says anything.
const (
	axisLines = 2
	minPlotW  = 8
	minPlotH  = 2
)

// marks tell series apart without colour, in the order series get them.
const marks = "o+x*#@%="

// mark is the mark of the i-th series.
func (c Chart) mark(i int) rune {
	if m := c.Series[i].Mark; m != 0 {
		return m
	}
	return rune(marks[i%len(marks)])
}

// braille reports whether the chart is drawn in braille dots: always
// unless several series would be told apart by colour that is not there.
func (c Chart) braille() bool { return c.Color || len(c.Series) <= 1 }

// Render draws the chart in exactly width×height cells: height-2 lines of
// plot with the value axis on the left, then the time axis and its labels.
// Without room for a plot it returns blank lines.
func (c Chart) Render(width, height int) []string {
	out := make([]string, max(0, height))
	plotH := height - axisLines
	if plotH < minPlotH || !c.To.After(c.From) {
		return blankLines(out, width)
	}

	// The scale comes first: it decides the labels, hence the gutter,
	// hence how wide the plot is. Its top is the highest point in range:
	// no mean or interpolation between points can rise above it.
	peak := 0.0
	for _, s := range c.Series {
		for _, p := range s.Points {
			if inRange(p.V) && p.V > peak && p.T.Add(c.Step).After(c.From) && p.T.Before(c.To) {
				peak = p.V
			}
		}
	}
	sc := newScale(peak, ticksFor(plotH), c.Unit)
	gutter := sc.labelWidth() + 2 // label, space, axis
	plotW := width - gutter
	if plotW < minPlotW {
		return blankLines(out, width)
	}

	g := newGrid(plotW, plotH, c.braille())
	for i, s := range c.Series {
		vals := sample(s.Points, c.From, c.To, c.step(g.cols()), g.cols())
		g.plot(i, vals, sc.top, c.mark(i))
	}
	axis := c.Axis
	if axis == nil {
		axis = plain
	}
	labels := make(map[int]string)
	for _, v := range sc.ticks() {
		if r := g.row(v, sc.top); labels[r] == "" {
			labels[r] = sc.label(v)
		}
	}
	for r := range plotH {
		tick := "│"
		if labels[r] != "" {
			tick = "┤"
		}
		label := strings.Repeat(" ", gutter-2-cellsOf(labels[r])) + labels[r]
		out[r] = axis(label+" "+tick) + g.line(r, c.Series)
	}
	rule, names := c.timeAxis(plotW)
	out[plotH] = axis(strings.Repeat(" ", gutter-1) + "└" + rule)
	out[plotH+1] = axis(strings.Repeat(" ", gutter) + names)
	return out
}

// step is the points' window, or one column's time when none is known.
func (c Chart) step(cols int) time.Duration {
	if c.Step > 0 {
		return c.Step
	}
	return c.To.Sub(c.From) / time.Duration(max(1, cols))
}

// Legend names the series: each label after its colour or mark, two
// spaces apart.
func (c Chart) Legend() string {
	var b strings.Builder
	for i, s := range c.Series {
		if i > 0 {
			b.WriteString("  ")
		}
		key := "━"
		if !c.braille() {
			key = string(c.mark(i))
		}
		style := s.Style
		if style == nil {
			style = plain
		}
		b.WriteString(style(key) + " " + s.Label)
	}
	return b.String()
}

func plain(s string) string { return s }

func inRange(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func blankLines(out []string, width int) []string {
	for i := range out {
		out[i] = strings.Repeat(" ", max(0, width))
	}
	return out
}

// cellsOf is the cells of a label: labels are ASCII and box drawing, one
// cell a rune.
func cellsOf(s string) int { return utf8.RuneCountInString(s) }

// sample turns points into one value per column of [from, to): the mean
// of the points whose windows overlap the column when a column spans a
// window or more; when columns are finer than windows, the value at the
// column's middle, interpolated between the middles of adjacent windows
// so the line is not a staircase. A column that no window overlaps is
// NaN: a gap, never a zero.
func sample(pts []Point, from, to time.Time, step time.Duration, cols int) []float64 {
	out := make([]float64, cols)
	span := to.Sub(from)
	colDur := float64(span) / float64(cols)
	// adjacent reports whether points i and i+1 are consecutive windows.
	// Half a step of slack absorbs clocks that do not tick exactly.
	adjacent := func(i int) bool {
		return i >= 0 && i+1 < len(pts) && pts[i+1].T.Sub(pts[i].T) <= step+step/2
	}
	mid := func(i int) float64 { return float64(pts[i].T.Sub(from) + step/2) }
	first := 0 // the first point whose window may overlap the column
	for col := range out {
		out[col] = math.NaN()
		a := float64(col) * colDur
		b := a + colDur
		for first < len(pts) && float64(pts[first].T.Sub(from)+step) <= a {
			first++
		}
		var sum float64
		var n int
		last := -1
		for i := first; i < len(pts) && float64(pts[i].T.Sub(from)) < b; i++ {
			if inRange(pts[i].V) {
				sum += pts[i].V
				n++
				last = i
			}
		}
		switch {
		case n == 0:
		case colDur >= float64(step) || n > 1:
			out[col] = sum / float64(n)
		default:
			out[col] = interpolate(pts, last, a+colDur/2, mid, adjacent)
		}
	}
	return out
}

// interpolate is the value at x (from the range's start) near point i:
// on the line between the middles of i and the adjacent window on x's
// side, or i's own value when that side is a gap.
func interpolate(pts []Point, i int, x float64, mid func(int) float64, adjacent func(int) bool) float64 {
	j := i + 1 // the other end of the segment x is on
	if x < mid(i) {
		j = i - 1
	}
	if (j > i && !adjacent(i)) || (j < i && !adjacent(j)) || !inRange(pts[j].V) {
		return pts[i].V
	}
	f := (x - mid(i)) / (mid(j) - mid(i))
	return pts[i].V + f*(pts[j].V-pts[i].V)
}

// ticksFor is how many intervals the value axis is cut into: a label
// about every third line, so they do not crowd.
func ticksFor(plotH int) int { return max(1, min(5, (plotH-1)/2)) }

// scale is the value axis: 0 to top in steps of step, labelled in the
// unit with a prefix that keeps the step's labels short.
type scale struct {
	top, step float64
	div       float64 // 1, 1e3 or 1e6
	prefix    string
	decimals  int
	unit      string
}

// newScale picks a round step (1, 2, 2.5 or 5 times a power of ten) that
// cuts [0, peak] into at most n intervals, and a top that is a whole
// number of steps at or above peak. Power is never negative, so the axis
// starts at zero: the height of a line is then its share of the top.
func newScale(peak float64, n int, unit string) scale {
	if peak <= 0 {
		peak = 1 // nothing drawn: any honest axis will do
	}
	raw := peak / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, f := range []float64{1, 2, 2.5, 5} {
		if f*mag >= raw*(1-1e-9) {
			step = f * mag
			break
		}
	}
	s := scale{step: step, top: step * math.Ceil(peak/step*(1-1e-9)), div: 1, unit: unit}
	// The prefix follows the step, not the top: "800 W, 1000 W" reads
	// better than "0.8 kW, 1.0 kW", and "2 kW, 4 kW" better than "2000 W".
	switch {
	case step >= 1e6:
		s.div, s.prefix = 1e6, "M"
	case step >= 1e3:
		s.div, s.prefix = 1e3, "k"
	}
	for s.decimals < 3 && math.Abs(step/s.div*math.Pow(10, float64(s.decimals))-math.Round(step/s.div*math.Pow(10, float64(s.decimals)))) > 1e-9 {
		s.decimals++
	}
	return s
}

func (s scale) ticks() []float64 {
	var out []float64
	for i := 0; float64(i)*s.step <= s.top*(1+1e-9); i++ {
		out = append(out, float64(i)*s.step)
	}
	return out
}

func (s scale) label(v float64) string {
	l := strconv.FormatFloat(v/s.div, 'f', s.decimals, 64)
	if s.prefix+s.unit != "" {
		l += " " + s.prefix + s.unit
	}
	return l
}

func (s scale) labelWidth() int { return cellsOf(s.label(s.top)) }

// grid is the plot area: per cell, the braille dots set or the mark
// drawn, and which series drew last, whose colour the cell takes.
type grid struct {
	w, h    int
	braille bool
	dots    []uint8 // braille: the pattern of each cell
	mark    []rune  // marks: the character of each cell
	owner   []int   // the series of each cell, -1 for none
}

func newGrid(w, h int, braille bool) *grid {
	g := &grid{w: w, h: h, braille: braille, dots: make([]uint8, w*h), mark: make([]rune, w*h), owner: make([]int, w*h)}
	for i := range g.owner {
		g.owner[i] = -1
	}
	return g
}

// cols is how many values across the plot holds: two a cell in braille.
func (g *grid) cols() int {
	if g.braille {
		return 2 * g.w
	}
	return g.w
}

// level is the height of v as a dot row (braille) or line (marks) from
// the bottom, 0 for zero.
func (g *grid) level(v, top float64) int {
	n := g.h
	if g.braille {
		n *= 4
	}
	return min(n-1, max(0, int(math.Round(v/top*float64(n-1)))))
}

// row is the line, from the top, where v is drawn.
func (g *grid) row(v, top float64) int {
	l := g.level(v, top)
	if g.braille {
		l /= 4
	}
	return g.h - 1 - l
}

// plot draws series i. In braille, consecutive values are joined by a
// vertical run of dots split between their two columns, so steep changes
// read as lines rather than scattered dots.
func (g *grid) plot(i int, vals []float64, top float64, mark rune) {
	prev := -1
	for x, v := range vals {
		if !inRange(v) {
			prev = -1
			continue
		}
		y := g.level(v, top)
		if !g.braille {
			cell := (g.h-1-y)*g.w + x
			g.mark[cell], g.owner[cell] = mark, i
			continue
		}
		g.dot(i, x, y)
		if prev >= 0 && abs(y-prev) > 1 {
			half := (prev + y) / 2
			g.run(i, x-1, prev, half)
			g.run(i, x, half, y)
		}
		prev = y
	}
}

func (g *grid) run(i, x, y0, y1 int) {
	for y := min(y0, y1); y <= max(y0, y1); y++ {
		g.dot(i, x, y)
	}
}

// brailleBit is the bit of the dot at dot column dx, dot row dy from the
// top of a cell: Unicode numbers the dots down the left column, then the
// right, and adds the bottom row (dots 7 and 8) last.
func brailleBit(dx, dy int) uint8 {
	if dy == 3 {
		return 0x40 << dx
	}
	return 1 << (dy + 3*dx)
}

// dot sets the dot at dot column x, dot row y from the bottom.
func (g *grid) dot(i, x, y int) {
	fromTop := 4*g.h - 1 - y
	cell := (fromTop/4)*g.w + x/2
	g.dots[cell] |= brailleBit(x%2, fromTop%4)
	g.owner[cell] = i
}

// line renders row r, each run of cells of one series styled once.
func (g *grid) line(r int, series []Series) string {
	var b, run strings.Builder
	owner := -1
	flush := func() {
		if run.Len() == 0 {
			return
		}
		s := run.String()
		if owner >= 0 && series[owner].Style != nil {
			s = series[owner].Style(s)
		}
		b.WriteString(s)
		run.Reset()
	}
	for x := range g.w {
		cell := r*g.w + x
		if g.owner[cell] != owner {
			flush()
			owner = g.owner[cell]
		}
		switch {
		case g.owner[cell] < 0:
			run.WriteByte(' ')
		case g.braille:
			run.WriteRune(rune(0x2800 + int(g.dots[cell])))
		default:
			run.WriteRune(g.mark[cell])
		}
	}
	flush()
	return b.String()
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// timeAxis is the rule under the plot, w cells, with a tick at each round
// time, and the ticks' labels centred under them where they fit.
func (c Chart) timeAxis(w int) (rule, names string) {
	span := c.To.Sub(c.From)
	step := timeStep(span, w)
	r := []rune(strings.Repeat("─", w))
	n := []rune(strings.Repeat(" ", w))
	end := -1 // the cell after the last label: labels keep a space apart
	for t := firstTick(c.From, step); t.Before(c.To); t = t.Add(step) {
		x := int(float64(t.Sub(c.From)) / float64(span) * float64(w))
		if x >= w {
			break
		}
		r[x] = '┬'
		label := []rune(tickLabel(t, step))
		start := min(max(0, x-len(label)/2), w-len(label))
		if start < 0 || start <= end {
			continue
		}
		copy(n[start:], label)
		end = start + len(label)
	}
	return string(r), string(n)
}

// tickWidth is the widest tick label ("Nov 21"), and tickGap the fewest
// cells between ticks, so that labels never touch.
const (
	tickWidth = 6
	tickGap   = tickWidth + 4
)

// timeStep is the roundest interval between ticks that leaves their
// labels room in w cells.
func timeStep(span time.Duration, w int) time.Duration {
	const day = 24 * time.Hour
	steps := []time.Duration{
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 20 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 3 * time.Hour, 4 * time.Hour, 6 * time.Hour, 12 * time.Hour,
		day, 2 * day, 7 * day, 14 * day,
	}
	for _, s := range steps {
		if float64(s)/float64(span)*float64(w) >= tickGap {
			return s
		}
	}
	return steps[len(steps)-1]
}

// firstTick is the first tick at or after from: a whole number of steps
// after midnight of from's day in from's location, so ticks fall on round
// clock times (or on midnights, for steps of days).
func firstTick(from time.Time, step time.Duration) time.Time {
	y, m, d := from.Date()
	t := time.Date(y, m, d, 0, 0, 0, 0, from.Location())
	if gap := from.Sub(t); gap > 0 {
		t = t.Add((gap + step - 1) / step * step)
	}
	return t
}

// tickLabel is a tick's time of day, or its date at a midnight or when
// ticks are days apart.
func tickLabel(t time.Time, step time.Duration) string {
	if step >= 24*time.Hour || (t.Hour() == 0 && t.Minute() == 0) {
		return t.Format("Jan 2")
	}
	return t.Format("15:04")
}
