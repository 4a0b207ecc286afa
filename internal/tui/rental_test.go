package tui

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/charmbracelet/colorprofile"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/money"
)

// rentalFixtureView is the pane over spend and rentals at now, as the
// poll would have stored them.
func rentalFixtureView(spend api.SpendReport, rentals []api.Rental, now time.Time) rentalView {
	d := rentalData{}.apply(pollMsg{spend: spend, rentals: rentals})
	lines, mtd := d.active(now)
	return rentalView{lines: lines, monthToDate: mtd, spend: d.spend, haveSpend: true, loaded: true}
}

// only picks rentals of activeRentals by id.
func only(ids ...string) []api.Rental {
	var out []api.Rental
	for _, r := range activeRentals() {
		for _, id := range ids {
			if r.ID == id {
				out = append(out, r)
			}
		}
	}
	return out
}

func TestRenderRental(t *testing.T) {
	st := plainStyles()
	overBudget := activeSpend()
	overBudget.MonthToDateGBP = money.Pounds(520)
	noBudget := fixtureSpend()
	noBudget.MonthlyBudgetGBP = nil
	// The wide layout's pane at 160 columns is 61 wide; the stacked
	// layout's at 80 is 40.
	for _, tc := range []struct {
		name string
		w, h int
		v    rentalView
	}{
		{"no-rentals", 61, 3, rentalFixtureView(fixtureSpend(), fixtureRentals(), t0)},
		{"provisioning-download", 61, 5, rentalFixtureView(activeSpend(), only("rent_boot", "rent_dl"), t0)},
		{"running", 61, 4, rentalFixtureView(activeSpend(), only("rent_run"), t0)},
		{"not-serving", 61, 5, rentalFixtureView(activeSpend(), only("rent_run", "rent_lost"), t0)},
		{"over-budget", 40, 5, rentalFixtureView(overBudget, only("rent_run", "rent_lost"), t0)},
		{"no-budget", 61, 3, rentalFixtureView(noBudget, fixtureRentals(), t0)},
		{"no-permission", 40, 3, rentalView{refused: rentalRefusal(&client.Error{Status: 403})}},
		{"not-available", 40, 3, rentalView{refused: rentalRefusal(&client.Error{Status: 501})}},
		{"narrow-all", 40, 7, rentalFixtureView(activeSpend(), activeRentals(), t0)},
		{"more-than-fit", 40, 4, rentalFixtureView(activeSpend(), activeRentals(), t0)},
		{"wide-focused", 100, 7, func() rentalView {
			v := rentalFixtureView(activeSpend(), activeRentals(), t0)
			v.focused = true
			return v
		}()},
		{"waiting", 40, 3, rentalView{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := renderRental(tc.v, tc.w, tc.h, st)
			requireSize(t, out, tc.w, tc.h)
			golden(t, out)
		})
	}
}

// TestRenderRentalColour pins the highlight of a rental billed without
// serving (a red "!" and state) and of a month over budget (a red bar).
func TestRenderRentalColour(t *testing.T) {
	over := activeSpend()
	over.MonthToDateGBP = money.Pounds(520)
	out := renderRental(rentalFixtureView(over, only("rent_dl", "rent_run", "rent_lost"), t0), 61, 6, stylesFor(colorprofile.ANSI))
	requireSize(t, out, 61, 6)
	for _, want := range []string{
		"\x1b[31m!", "\x1b[31mbilling, not serving", // billed, not serving
		"\x1b[31m██████", "\x1b[31m104% over budget", // the month
		"\x1b[33m█████", // the download
		"\x1b[32mrunning",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("coloured rental pane lacks %q:\n%s", want, out)
		}
	}
	golden(t, out)
}

// TestRentalCostTicks checks the costs move with the dashboard's clock
// between polls, from price and start, as the gateway bills them.
func TestRentalCostTicks(t *testing.T) {
	d := rentalData{}.apply(pollMsg{spend: activeSpend(), rentals: activeRentals()})
	cost := func(now time.Time) (map[string]money.GBP, money.GBP) {
		lines, mtd := d.active(now)
		out := map[string]money.GBP{}
		for _, l := range lines {
			out[l.r.ID] = l.cost
		}
		return out, mtd
	}
	at0, mtd0 := cost(t0)
	if at0["rent_run"] != 550 || at0["rent_boot"] != 0 || mtd0 != activeSpend().MonthToDateGBP {
		t.Fatalf("at the poll: %v, month %v", at0, mtd0)
	}
	// 36 minutes on: coder at £2.50/h has cost £1.50 more, batch at
	// £2.10/h £1.26, flaky at £0.55/h £0.33; the one booting nothing.
	later, mtd := cost(t0.Add(36 * time.Minute))
	if later["rent_run"] != 700 || later["rent_dl"] != 161 || later["rent_lost"] != 143 || later["rent_boot"] != 0 {
		t.Errorf("36 minutes on: %v", later)
	}
	if mtd != mtd0+150+126+33 {
		t.Errorf("month to date %v, want %v", mtd, mtd0+150+126+33)
	}
	// A clock behind the gateway's never shows less than it said.
	if earlier, _ := cost(t0.Add(-time.Hour)); earlier["rent_run"] != 550 {
		t.Errorf("an hour early: %v", earlier)
	}
	// Half a penny rounds up, as the gateway rounds.
	r := api.Rental{PricePerHourGBP: 1, StartedAt: ptr(t0)}
	if c := tickingCost(r, t0.Add(1800*time.Second)); c != 1 {
		t.Errorf("half a penny = %v", c)
	}
}

// TestRentalNotServing checks both signs of a rental billed without
// serving: a worker not connected, and a spend line saying so.
func TestRentalNotServing(t *testing.T) {
	rentals := only("rent_run", "rent_lost")
	spend := activeSpend()
	spend.Lines[1].Serving = false // rent_run: connected, but the gateway says it serves nothing
	lines, _ := rentalData{}.apply(pollMsg{spend: spend, rentals: rentals}).active(t0)
	if len(lines) != 2 || !lines[0].notServing || !lines[1].notServing {
		t.Errorf("lines %+v", lines)
	}
	// A rental the spend report does not list yet is judged by its worker.
	lines, _ = rentalData{}.apply(pollMsg{spend: fixtureSpend(), rentals: rentals}).active(t0)
	if lines[0].notServing || !lines[1].notServing {
		t.Errorf("lines %+v", lines)
	}
}

// TestRentalRefusal checks a key without compute:write gets the pane's
// message, not an error in the status bar, and that other failures of the
// rental calls are reported and keep the last data.
func TestRentalRefusal(t *testing.T) {
	m := directModel(t, newFake())
	p := okPoll(t0)
	p.spend, p.rentals = activeSpend(), activeRentals()
	m, _ = update(t, m, p)
	forbidden := &client.Error{Status: 403, Message: "This key lacks the compute:write permission"}

	p = okPoll(t0.Add(time.Second))
	p.spendErr, p.rentalsErr = forbidden, forbidden
	m, _ = update(t, m, p)
	if m.failure.msg != "" || m.retryIn != m.interval {
		t.Errorf("a refusal is a failure: %+v, retry in %s", m.failure, m.retryIn)
	}
	if view := m.View().Content; !strings.Contains(view, "needs compute:write to see rentals") || !strings.Contains(view, "● live") {
		t.Errorf("view:\n%s", view)
	}

	// Permission granted: the data comes back, the message goes.
	p = okPoll(t0.Add(2 * time.Second))
	p.spend, p.rentals = activeSpend(), activeRentals()
	m, _ = update(t, m, p)
	if m.data.rental.refused != "" || m.data.rental.rentalRows() != 4 {
		t.Errorf("after the refusal: %+v", m.data.rental)
	}

	p = okPoll(t0.Add(3 * time.Second))
	p.spendErr, p.rentals = &client.Error{Status: 500, Message: "boom"}, activeRentals()
	m, _ = update(t, m, p)
	if m.failure.msg != "rental spend: gateway error 500: boom" {
		t.Errorf("failure %q", m.failure.msg)
	}
	if !strings.Contains(m.View().Content, "not serving") {
		t.Errorf("the last rentals were dropped:\n%s", m.View().Content)
	}
}

// TestTeaRental runs the dashboard with rentals in both layouts: the pane
// grows a line per active rental.
func TestTeaRental(t *testing.T) {
	for _, tc := range []struct {
		name string
		w, h int
		set  func(f *fakeSource)
		want []string
	}{
		// Wide enough for the power chart: wait for its history too.
		{"160x45", 160, 45, func(f *fakeSource) { f.spend, f.rentals = activeSpend(), activeRentals() },
			[]string{"Rental spend (4 active)", "not serving", "£376.55", "no power readings in the last hour"}},
		{"100x30", 100, 30, func(f *fakeSource) { f.spend, f.rentals = activeSpend(), activeRentals() },
			[]string{"Rental spend (4 active)", "not serving", "£376.55"}},
		// A key without compute:write: the pane says so, the dashboard is
		// live.
		{"no-permission", 80, 24, func(f *fakeSource) {
			f.rentalErr = &client.Error{Status: 403, Message: "This API key lacks the compute:write permission"}
		}, []string{"needs compute:write to see rentals", "● live"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake()
				fake.set(tc.set)
				tm := startTea(t, fake, tc.w, tc.h)
				waitFor(t, tm, tc.want...)
				m := quit(t, tm)
				view := m.View().Content
				requireSize(t, view, tc.w, tc.h)
				for _, w := range tc.want {
					if !strings.Contains(view, w) {
						t.Errorf("view lacks %q:\n%s", w, view)
					}
				}
				golden(t, view)
			})
		})
	}
}
