package tui

import "charm.land/bubbles/v2/key"

// keyMap is every binding of the dashboard, also the source of the help
// line (bubbles/help reads the bindings' help texts).
//
// In the two lists, printable keys are a filter's text: a model or worker
// name typed straight away ("qwen") filters instead of running the
// commands its letters are bound to elsewhere (q would quit, p pause, k and
// j move). There the commands are keys no name holds: ? (help), space
// (pause), / (the filter itself) and the non-printable ones; ctrl+c quits
// anywhere. The single-letter commands act where nothing is typed: the
// other panes and the details view.
type keyMap struct {
	Next    key.Binding
	Prev    key.Binding
	Up      key.Binding
	Down    key.Binding
	Filter  key.Binding
	Details key.Binding
	Back    key.Binding
	Pause   key.Binding
	Help    key.Binding
	Quit    key.Binding
	// Interrupt quits whatever has the keyboard, a filter being typed
	// included.
	Interrupt key.Binding

	// Keys while the filter is being typed.
	Keep  key.Binding
	Clear key.Binding
}

func newKeyMap() keyMap {
	return keyMap{
		Next:      key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next pane")),
		Prev:      key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "prev pane")),
		Up:        key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑↓", "move")),
		Down:      key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓", "down")),
		Filter:    key.NewBinding(key.WithKeys("/"), key.WithHelp("type", "filter")),
		Details:   key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "open")),
		Back:      key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back")),
		Pause:     key.NewBinding(key.WithKeys("space", "p"), key.WithHelp("space", "pause")),
		Help:      key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:      key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
		Interrupt: key.NewBinding(key.WithKeys("ctrl+c"), key.WithHelp("ctrl+c", "quit")),
		Keep:      key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "keep filter")),
		Clear:     key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear filter")),
	}
}

// contextKeys is the help for what the dashboard is showing: bindings that
// do nothing in the current mode are left out of the help line.
type contextKeys struct {
	km        keyMap
	details   bool
	filtering bool
	list      bool // the focused pane is a list
}

// ShortHelp lists Up without Down: Up's help (↑↓ move) stands for both
// arrows, which the line has no room to list apart.
func (c contextKeys) ShortHelp() []key.Binding {
	k := c.km
	switch {
	case c.filtering:
		return []key.Binding{k.Keep, k.Clear, k.Up, k.Interrupt}
	case c.details:
		return []key.Binding{k.Back, k.Up, k.Pause, k.Quit}
	case c.list:
		// Quitting comes early: q does not quit here, and a narrow help
		// line is cut from the end.
		return []key.Binding{k.Filter, k.Interrupt, k.Next, k.Up, k.Details, k.Pause}
	}
	return []key.Binding{k.Next, k.Prev, k.Pause, k.Quit}
}

func (c contextKeys) FullHelp() [][]key.Binding {
	k := c.km
	return [][]key.Binding{
		{k.Next, k.Prev, k.Up},
		{k.Filter, k.Details, k.Back},
		{k.Pause, k.Help, k.Quit, k.Interrupt},
	}
}
