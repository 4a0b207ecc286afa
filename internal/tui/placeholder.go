package tui

import (
	"fmt"
	"strings"
)

// The rental pane has no API behind it yet. It is a pane type holding
// optional data and a render function that draws "not available" while
// the data is nil; wiring an API later means adding a poll that fills the
// data in (and fields to the struct), nothing else.

// rentalData is what rented GPUs cost.
type rentalData struct {
	Currency string  // ISO code, e.g. "USD"
	PerHour  float64 // current burn rate
	Today    float64 // spent since 00:00 UTC
}

type rentalPane struct{ data *rentalData }

func (p rentalPane) view(c common, _ *snapshot, width, height int, focused bool) string {
	return renderRental(p.data, width, height, focused, c.st)
}

// renderRental draws the rental-spend pane; d is nil until the API exists.
func renderRental(d *rentalData, width, height int, focused bool, st *styles) string {
	f := frame{title: "Rental spend", focused: focused}
	if d == nil {
		return box(st, f, []string{st.dim.Render("not available")}, width, height)
	}
	cur := strings.ToUpper(d.Currency)
	body := []string{fmt.Sprintf("%.2f %s/h  %s", d.PerHour, cur, st.dim.Render(fmt.Sprintf("%.2f %s today", d.Today, cur)))}
	return box(st, f, body, width, height)
}
