package tui

import "charm.land/bubbles/v2/key"

// keyMap is every binding of the dashboard, also the source of the help
// line (bubbles/help reads the bindings' help texts).
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

	// Keys while the filter is being typed.
	Keep  key.Binding
	Clear key.Binding
}

func newKeyMap() keyMap {
	return keyMap{
		Next:    key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next pane")),
		Prev:    key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "prev pane")),
		Up:      key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:    key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		Filter:  key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter")),
		Details: key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "details")),
		Back:    key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back")),
		Pause:   key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "pause")),
		Help:    key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:    key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
		Keep:    key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "keep filter")),
		Clear:   key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear filter")),
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

func (c contextKeys) ShortHelp() []key.Binding {
	k := c.km
	switch {
	case c.filtering:
		return []key.Binding{k.Keep, k.Clear, k.Up, k.Down}
	case c.details:
		return []key.Binding{k.Back, k.Up, k.Down, k.Pause, k.Quit}
	case c.list:
		return []key.Binding{k.Next, k.Up, k.Down, k.Filter, k.Details, k.Pause, k.Quit}
	}
	return []key.Binding{k.Next, k.Prev, k.Pause, k.Quit}
}

func (c contextKeys) FullHelp() [][]key.Binding {
	k := c.km
	return [][]key.Binding{
		{k.Next, k.Prev, k.Up, k.Down},
		{k.Filter, k.Details, k.Back},
		{k.Pause, k.Help, k.Quit},
	}
}
