package tui

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"charm.land/lipgloss/v2"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/money"
)

// The Rental spend pane draws two calls of every poll: the month's spend
// (GET /api/v1/compute/spend) and the rentals (GET
// /api/v1/compute/instances). Between polls the costs of running rentals
// tick up by the dashboard's own clock, from each rental's price and the
// time its billing started, as the gateway bills them.

// rentalData is what the rental calls brought, each part kept from the
// last poll that answered it, as the other panes keep theirs.
type rentalData struct {
	spend       api.SpendReport
	haveSpend   bool
	rentals     []api.Rental // every rental, newest first
	haveRentals bool
	// refused says why the gateway shows this key no rentals, while it
	// does: see rentalRefusal.
	refused string
}

// rentalRefusal names a refusal by the rental endpoints that polling again
// will not change: the key lacks compute:write (403), or the gateway rents
// no GPUs (404, 501). It is "" for any other outcome.
func rentalRefusal(err error) string {
	var ae *client.Error
	if !errors.As(err, &ae) {
		return ""
	}
	switch ae.Status {
	case http.StatusForbidden:
		return "needs compute:write to see rentals"
	case http.StatusNotFound, http.StatusNotImplemented:
		return "not available on this gateway"
	}
	return ""
}

// apply stores a poll's answers to the rental calls.
func (d rentalData) apply(m pollMsg) rentalData {
	if m.spendErr == nil {
		d.spend, d.haveSpend = m.spend, true
	}
	if m.rentalsErr == nil {
		d.rentals, d.haveRentals = m.rentals, true
	}
	switch {
	case m.spendErr == nil && m.rentalsErr == nil:
		d.refused = ""
	case rentalRefusal(m.spendErr) != "":
		d.refused = rentalRefusal(m.spendErr)
	case rentalRefusal(m.rentalsErr) != "":
		d.refused = rentalRefusal(m.rentalsErr)
	}
	return d
}

// rentalLine is an active rental as the pane draws it.
type rentalLine struct {
	r    api.Rental
	cost money.GBP // by the dashboard's clock
	// notServing marks a rental billed without serving: running with its
	// worker not connected, or a spend line that says it is not serving.
	notServing bool
}

// active are the rentals not stopped, newest first, with their costs at
// now, and the month to date at now: the gateway's figure plus what the
// running rentals have cost since it was given.
func (d rentalData) active(now time.Time) (lines []rentalLine, monthToDate money.GBP) {
	serving := map[string]bool{}
	for _, l := range d.spend.Lines {
		serving[l.RentalID] = l.Serving
	}
	monthToDate = d.spend.MonthToDateGBP
	for _, r := range d.rentals {
		if r.Status == api.RentalStopped {
			continue
		}
		l := rentalLine{r: r, cost: tickingCost(r, now)}
		if r.Status == api.RentalRunning {
			s, listed := serving[r.ID]
			l.notServing = !r.Connected || (listed && !s)
		}
		monthToDate += l.cost - r.AccruedCostGBP
		lines = append(lines, l)
	}
	return lines, monthToDate
}

// tickingCost is what r has cost by now: its price for every whole second
// since its billing started, rounded to the penny half up as the gateway
// rounds it; never less than the gateway last said, should the two clocks
// disagree.
func tickingCost(r api.Rental, now time.Time) money.GBP {
	if r.StartedAt == nil || r.StoppedAt != nil {
		return r.AccruedCostGBP
	}
	secs := int64(now.Sub(*r.StartedAt) / time.Second)
	if secs <= 0 {
		return r.AccruedCostGBP
	}
	return max(r.AccruedCostGBP, money.GBP((int64(r.PricePerHourGBP)*secs+1800)/3600))
}

// rentalPane is the Rental spend pane. It has no UI state of its own.
type rentalPane struct{}

// rentalView is everything the Rental spend pane draws.
type rentalView struct {
	lines       []rentalLine
	monthToDate money.GBP
	spend       api.SpendReport
	haveSpend   bool
	loaded      bool // some rental call has answered
	refused     string
	focused     bool
}

func (rentalPane) view(c common, d *snapshot, width, height int, focused bool) string {
	lines, mtd := d.rental.active(c.now)
	return renderRental(rentalView{
		lines: lines, monthToDate: mtd, spend: d.rental.spend, haveSpend: d.rental.haveSpend,
		loaded: d.rental.haveSpend || d.rental.haveRentals, refused: d.rental.refused, focused: focused,
	}, width, height, c.st)
}

// rentalRows is how many rentals the pane lists below its spend line, so
// the layout can give it the room.
func (d rentalData) rentalRows() int {
	if d.refused != "" {
		return 0
	}
	n := 0
	for _, r := range d.rentals {
		if r.Status != api.RentalStopped {
			n++
		}
	}
	return n
}

// renderRental draws the Rental spend pane in exactly width×height cells:
// the month to date against the budget, then a line per active rental.
func renderRental(v rentalView, width, height int, st *styles) string {
	cw, ch := contentSize(width, height)
	f := frame{title: "Rental spend", focused: v.focused}
	switch {
	case v.refused != "":
		return box(st, f, []string{st.warn.Render(v.refused)}, width, height)
	case !v.loaded:
		return box(st, f, []string{st.dim.Render("waiting for the gateway…")}, width, height)
	}
	if len(v.lines) > 0 {
		f.title = fmt.Sprintf("Rental spend (%d active)", len(v.lines))
	}

	body := []string{budgetLine(v, cw, st)}
	rows := min(len(v.lines), max(0, ch-1))
	// The minimums fit a GPU's label (A100 80GB), a boot phase and a cost
	// in the stacked layout's 40 columns.
	cols := []column{
		{width: 1},
		{title: "NAME", width: 9, flex: 1, max: 24},
		// The first to go: a GPU's label is also its rentals' default name.
		{title: "GPU", width: 10, flex: 1, max: 14, drop: 2},
		{title: "STATE", width: 13, flex: 3},
		{title: "PRICE", width: 8, right: true, drop: 1},
		{title: "COST", width: 7, right: true},
	}
	widths := fitColumns(cols, cw)
	for _, l := range v.lines[:rows] {
		body = append(body, rentalRow(st, cols, widths, l))
	}

	var footer []string
	switch hidden := len(v.lines) - rows; {
	case len(v.lines) == 0:
		footer = append(footer, "no active rentals")
	case hidden > 0:
		footer = append(footer, fmt.Sprintf("+%d more", hidden))
	}
	if v.haveSpend {
		footer = append(footer, "credit "+fmtGBP(v.spend.CreditRemainingGBP))
	}
	f.footer = strings.Join(footer, " · ")
	return box(st, f, body, width, height)
}

// budgetLine is the month to date, against the budget as a bar when there
// is one.
func budgetLine(v rentalView, cw int, st *styles) string {
	if !v.haveSpend {
		return st.dim.Render("month to date not known yet")
	}
	spent := st.bold.Render(fmtGBP(v.monthToDate))
	budget := v.spend.MonthlyBudgetGBP
	if budget == nil {
		return spent + " this month" + st.dim.Render(" · no budget")
	}
	left := spent + " of " + fmtGBP(*budget)
	if cw >= 50 {
		left += " this month"
	}
	frac := 1.0
	if *budget > 0 {
		frac = float64(v.monthToDate) / float64(*budget)
	}
	style := st.ok
	switch {
	case frac >= 1:
		style = st.bad
	case frac >= 0.8:
		style = st.warn
	}
	pct := fmt.Sprintf("%d%%", int(frac*100))
	if frac >= 1 {
		pct += " over budget"
	}
	right := style.Render(pct)
	bw := cw - lipgloss.Width(left) - lipgloss.Width(right) - 2
	if bw < 4 { // no room for a bar worth reading
		return left + " " + right
	}
	return left + " " + meter(frac, bw, style) + " " + right
}

// rentalRow is an active rental's line: a "!" and red for one billed
// without serving, else its state: the download's progress as a bar while
// models install, its boot phase while provisioning.
func rentalRow(st *styles, cols []column, widths []int, l rentalLine) string {
	r := l.r
	name := r.Name
	// The gateway's default name says less than the GPU's label alone,
	// where a narrow pane has room for one of them.
	if name == "" || name == "Rented "+r.Label {
		name = r.Label
	}
	mark := plain("")
	var state cell
	switch {
	case l.notServing:
		mark = styled("!", st.bad)
		text := "billing, not serving"
		if widths[3] < len(text) {
			text = "not serving"
		}
		state = styled(text, st.bad)
	case r.ModelDownload != nil:
		pct := fmt.Sprintf(" %3.0f%%", r.ModelDownload.ProgressPct)
		w := widths[3] - len(pct)
		if w < 3 {
			state = styled("downloading"+pct, st.warn)
			break
		}
		state = drawn(meter(r.ModelDownload.ProgressPct/100, w, st.warn) + pct)
	case r.Status == api.RentalProvisioning && r.BootPhase != nil && *r.BootPhase != "":
		state = styled(strings.ReplaceAll(*r.BootPhase, "_", " "), st.warn)
	case r.Status == api.RentalProvisioning:
		state = styled(r.Status, st.warn)
	default:
		state = styled(r.Status, st.ok)
	}
	return tableRow(cols, widths, []cell{
		mark,
		plain(name),
		styled(r.Label, st.dim),
		state,
		styled(fmtGBP(r.PricePerHourGBP)+"/h", st.dim),
		styled(fmtGBP(l.cost), st.bold),
	}, nil)
}

// meter draws frac of width cells, the filled part in style; the empty
// part stays visible without colour.
func meter(frac float64, width int, style lipgloss.Style) string {
	frac = min(max(frac, 0), 1)
	n := int(frac*float64(width) + 0.5)
	return style.Render(strings.Repeat("█", n)) + strings.Repeat("░", width-n)
}

// fmtGBP writes an amount as people do: £12.34, -£0.50.
func fmtGBP(m money.GBP) string {
	s := m.String()
	if rest, neg := strings.CutPrefix(s, "-"); neg {
		return "-£" + rest
	}
	return "£" + s
}
