package tui

import (
	"strconv"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/svc-dev/svc/internal/chart"
)

// styles is every style the dashboard uses, built from one renderer so the
// colour profile (and NO_COLOR) is decided once, for the output actually
// written to. Only the 16 basic ANSI colours are used: they follow the
// terminal's own theme, light or dark, without querying the background.
type styles struct {
	r *lipgloss.Renderer

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

func newStyles(r *lipgloss.Renderer) *styles {
	var (
		green   = lipgloss.Color("2")
		yellow  = lipgloss.Color("3")
		red     = lipgloss.Color("1")
		grey    = lipgloss.Color("8")
		cyan    = lipgloss.Color("6")
		magenta = lipgloss.Color("5")
	)
	s := &styles{r: r}
	s.appName = r.NewStyle().Bold(true).Foreground(cyan)
	s.dim = r.NewStyle().Foreground(grey)
	s.bold = r.NewStyle().Bold(true)
	s.colHead = r.NewStyle().Bold(true)
	s.selected = r.NewStyle().Reverse(true)
	s.cursor = r.NewStyle().Foreground(grey)

	s.border = r.NewStyle().Foreground(grey)
	s.focusBorder = r.NewStyle().Foreground(cyan)
	s.title = r.NewStyle().Bold(true)
	s.focusTitle = r.NewStyle().Bold(true).Foreground(cyan)

	s.ok = r.NewStyle().Foreground(green)
	s.warn = r.NewStyle().Foreground(yellow)
	s.bad = r.NewStyle().Foreground(red)
	s.off = r.NewStyle().Foreground(grey)
	s.sim = r.NewStyle().Foreground(magenta)

	s.spark = r.NewStyle().Foreground(cyan)

	s.color = r.ColorProfile() != termenv.Ascii

	s.statusOK = r.NewStyle().Foreground(green)
	s.statusWarn = r.NewStyle().Foreground(yellow)
	s.statusError = r.NewStyle().Foreground(red).Bold(true)

	// bubbles/help builds its styles on the default renderer; rebuild them on
	// ours so a custom output's profile applies to the help line too.
	s.help = help.Styles{
		Ellipsis:       s.dim,
		ShortKey:       r.NewStyle().Bold(true),
		ShortDesc:      s.dim,
		ShortSeparator: s.dim,
		FullKey:        r.NewStyle().Bold(true),
		FullDesc:       s.dim,
		FullSeparator:  s.dim,
	}
	return s
}

// series is the style of a chart's i-th line: the colour `svc workers
// power` gives it too.
func (s *styles) series(i int) lipgloss.Style {
	return s.r.NewStyle().Foreground(lipgloss.Color(strconv.Itoa(chart.ANSIColor(i))))
}
