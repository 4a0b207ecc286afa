package tui

import (
	"strings"

	"charm.land/lipgloss/v2"
)

// listState is the UI state of a list pane: which row is selected and the
// filter applied. The selection is remembered by id, not index, because the
// rows are replaced every second and a request finishing above the cursor
// must not move the highlight to another row.
type listState struct {
	selID  string
	cursor int // last known index, used when selID disappears
	filter string
}

// index is the selected row among ids: where selID is, or the old index
// clamped when that row is gone. -1 for an empty list.
func (l listState) index(ids []string) int {
	if len(ids) == 0 {
		return -1
	}
	for i, id := range ids {
		if id == l.selID {
			return i
		}
	}
	return min(max(l.cursor, 0), len(ids)-1)
}

// sync re-anchors the selection after the rows changed.
func (l listState) sync(ids []string) listState {
	if i := l.index(ids); i >= 0 {
		l.cursor, l.selID = i, ids[i]
	}
	return l
}

// move moves the selection by delta rows, stopping at the ends.
func (l listState) move(delta int, ids []string) listState {
	i := l.index(ids)
	if i < 0 {
		return l
	}
	i = min(max(i+delta, 0), len(ids)-1)
	l.cursor, l.selID = i, ids[i]
	return l
}

// matches reports whether any of fields contains the filter, ignoring case.
func matches(filter string, fields ...string) bool {
	if filter == "" {
		return true
	}
	f := strings.ToLower(filter)
	for _, s := range fields {
		if strings.Contains(strings.ToLower(s), f) {
			return true
		}
	}
	return false
}

// listFooter describes a list's extent for its bottom border: the filter
// and match count, or which rows are shown when not all fit.
func listFooter(filter string, shown, total, first, visible int) string {
	var parts []string
	if filter != "" {
		parts = append(parts, "/"+filter+": "+itoa(shown)+" of "+itoa(total))
	}
	if visible > 0 && shown > visible {
		parts = append(parts, itoa(first+1)+"-"+itoa(min(shown, first+visible))+" of "+itoa(shown))
	}
	return strings.Join(parts, " · ")
}

// marker is the selection column: a › on the selected row, so the
// selection shows without colour too.
func marker(st *styles, selected bool) cell {
	if selected {
		return styled("›", st.cursor)
	}
	return plain("")
}

// rowStyle is the whole-row highlight: only the focused pane's selection is
// highlighted; an unfocused pane keeps just its marker.
func rowStyle(st *styles, selected, focused bool) *lipgloss.Style {
	if selected && focused {
		return &st.selected
	}
	return nil
}
