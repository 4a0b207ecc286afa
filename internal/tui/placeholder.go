package tui

import (
	"fmt"
	"strings"
)

// The power and rental panes have no API behind them yet. Each is a pane
// type holding optional data and a render function that draws "not
// available" while the data is nil; wiring an API later means adding a
// poll that fills the data in (and fields to these structs), nothing else.

// powerData is the fleet's power draw.
type powerData struct {
	Watts     float64 // summed over the workers reporting a reading
	Reporting int     // workers with a reading
	Workers   int     // workers connected
}

// rentalData is what rented GPUs cost.
type rentalData struct {
	Currency string  // ISO code, e.g. "USD"
	PerHour  float64 // current burn rate
	Today    float64 // spent since 00:00 UTC
}

type powerPane struct{ data *powerData }

type rentalPane struct{ data *rentalData }

func (p powerPane) view(c common, _ *snapshot, width, height int, focused bool) string {
	return renderPower(p.data, width, height, focused, c.st)
}

func (p rentalPane) view(c common, _ *snapshot, width, height int, focused bool) string {
	return renderRental(p.data, width, height, focused, c.st)
}

// renderPower draws the power pane; d is nil until the API exists.
func renderPower(d *powerData, width, height int, focused bool, st *styles) string {
	f := frame{title: "Power", focused: focused}
	if d == nil {
		return box(st, f, []string{st.dim.Render("not available")}, width, height)
	}
	body := []string{fmt.Sprintf("%s W  %s", fmtRate(d.Watts), st.dim.Render(fmt.Sprintf("from %d of %d workers", d.Reporting, d.Workers)))}
	return box(st, f, body, width, height)
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
