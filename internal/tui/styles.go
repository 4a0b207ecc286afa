package tui

import (
	"image/color"
	"strconv"

	"charm.land/bubbles/v2/help"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/colorprofile"

	"github.com/svc-dev/svc/internal/chart"
)

// styles is every style the dashboard uses, built for one colour profile so
// the profile (and NO_COLOR) is decided once, for the output actually
// written to. Only the 16 basic ANSI colours are used: they follow the
// terminal's own theme, light or dark, without querying the background.
// A profile without colour (NO_COLOR, not a terminal) gets plain text with
// no escapes at all, bold and reverse included, as lipgloss v1 gave it:
// the selection is marked by characters too.
type styles struct {
	appName  lipgloss.Style // "svc top" in the header
	dim      lipgloss.Style // secondary text: target, units, placeholders
	bold     lipgloss.Style
	colHead  lipgloss.Style // table column headers
	selected lipgloss.Style // the selected row of the focused list
	cursor   lipgloss.Style // the selection marker of an unfocused list

	border      lipgloss.Style // unfocused pane frame
	focusBorder lipgloss.Style // focused pane frame
	title       lipgloss.Style
	focusTitle  lipgloss.Style

	// Health, also used for states and rates.
	ok   lipgloss.Style // healthy, running
	warn lipgloss.Style // stale, draining, queued, outdated version
	bad  lipgloss.Style // unhealthy, errors
	off  lipgloss.Style // offline
	sim  lipgloss.Style // the simulated-worker marker

	spark lipgloss.Style // sparkline blocks

	// color says the profile shows colours: charts tell their lines apart
	// by colour when it does, by marks otherwise.
	color bool

	statusOK    lipgloss.Style
	statusWarn  lipgloss.Style
	statusError lipgloss.Style

	help help.Styles
}

// hasColor says whether profile p shows colours: the 16 basic ones and up.
func hasColor(p colorprofile.Profile) bool { return p >= colorprofile.ANSI }

func newStyles(p colorprofile.Profile) *styles {
	s := &styles{color: hasColor(p)}
	// style is a new style, or a plain one when the profile has no colour.
	style := func(f func(lipgloss.Style) lipgloss.Style) lipgloss.Style {
		if !s.color {
			return lipgloss.NewStyle()
		}
		return f(lipgloss.NewStyle())
	}
	fg := func(c color.Color) lipgloss.Style {
		return style(func(st lipgloss.Style) lipgloss.Style { return st.Foreground(c) })
	}
	boldFg := func(c color.Color) lipgloss.Style {
		return style(func(st lipgloss.Style) lipgloss.Style { return st.Bold(true).Foreground(c) })
	}
	bold := func() lipgloss.Style {
		return style(func(st lipgloss.Style) lipgloss.Style { return st.Bold(true) })
	}
	var (
		green   = lipgloss.Green
		yellow  = lipgloss.Yellow
		red     = lipgloss.Red
		grey    = lipgloss.BrightBlack
		cyan    = lipgloss.Cyan
		magenta = lipgloss.Magenta
	)
	s.appName = boldFg(cyan)
	s.dim = fg(grey)
	s.bold = bold()
	s.colHead = bold()
	s.selected = style(func(st lipgloss.Style) lipgloss.Style { return st.Reverse(true) })
	s.cursor = fg(grey)

	s.border = fg(grey)
	s.focusBorder = fg(cyan)
	s.title = bold()
	s.focusTitle = boldFg(cyan)

	s.ok = fg(green)
	s.warn = fg(yellow)
	s.bad = fg(red)
	s.off = fg(grey)
	s.sim = fg(magenta)

	s.spark = fg(cyan)

	s.statusOK = fg(green)
	s.statusWarn = fg(yellow)
	s.statusError = boldFg(red)

	// bubbles/help's own styles are grey tones picked for a dark or light
	// background; use ours, which follow the terminal's theme and profile.
	s.help = help.Styles{
		Ellipsis:       s.dim,
		ShortKey:       bold(),
		ShortDesc:      s.dim,
		ShortSeparator: s.dim,
		FullKey:        bold(),
		FullDesc:       s.dim,
		FullSeparator:  s.dim,
	}
	return s
}

// series is the style of a chart's i-th line: the colour `svc workers
// power` gives it too.
func (s *styles) series(i int) lipgloss.Style {
	if !s.color {
		return lipgloss.NewStyle()
	}
	return lipgloss.NewStyle().Foreground(lipgloss.Color(strconv.Itoa(chart.ANSIColor(i))))
}
