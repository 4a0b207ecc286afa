package tui

import (
	"strings"
	"unicode"

	tea "charm.land/bubbletea/v2"
)

// lineInput is the filter's text field: typing appends, backspace deletes,
// ctrl+w deletes a word and ctrl+u the line. bubbles/textinput would do
// more (cursor movement, clipboard) but imports a clipboard module this
// repository does not carry, and a filter of a few characters needs none of
// it. Like bubbles' components it is a value updated by messages.
type lineInput struct {
	value []rune
	limit int
}

// update applies a key and reports whether it was one the input uses.
func (in lineInput) update(msg tea.KeyPressMsg) (lineInput, bool) {
	switch {
	case msg.Text != "":
		for _, r := range msg.Text {
			if unicode.IsPrint(r) && (in.limit <= 0 || len(in.value) < in.limit) {
				in.value = append(in.value[:len(in.value):len(in.value)], r)
			}
		}
		return in, true
	case msg.Code == tea.KeyBackspace:
		if n := len(in.value); n > 0 {
			in.value = in.value[:n-1]
		}
		return in, true
	}
	switch msg.Keystroke() {
	case "ctrl+w":
		v := strings.TrimRightFunc(string(in.value), unicode.IsSpace)
		if i := strings.LastIndexFunc(v, unicode.IsSpace); i >= 0 {
			in.value = []rune(v[:i+1])
		} else {
			in.value = nil
		}
		return in, true
	case "ctrl+u":
		in.value = nil
		return in, true
	}
	return in, false
}

func (in lineInput) String() string { return string(in.value) }

func (in lineInput) set(s string) lineInput {
	in.value = []rune(s)
	return in
}

// view is the prompt, the text and a block cursor at its end.
func (in lineInput) view(st *styles) string {
	return st.dim.Render("/") + string(in.value) + st.selected.Render(" ")
}
