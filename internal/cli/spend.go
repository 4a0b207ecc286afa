package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
)

// SpendOptions are the flags of `svc spend`.
type SpendOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
}

// NewCmdSpend builds `svc spend`.
func NewCmdSpend(f *Factory, runF func(*SpendOptions) error) *cobra.Command {
	opts := &SpendOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "spend",
		Short: "Show this month's GPU rental spend against the budget",
		Long: `Show what GPU rentals have cost in the current calendar month (UTC): the total
against the organisation's monthly budget (a bar on a terminal), how many
rentals are active, the credit left, then a line per rental of the month with
its hours billed and cost. A running rental that is billed without serving
(its worker not connected) is marked.

The budget, credit and card are set on the gateway's host with 'svc admin
budget', 'svc admin credit' and 'svc admin card'. Needs a key with the
compute:write permission.

` + clientHelp,
		Example: `  svc spend
  svc spend --jq .month_to_date_gbp
  svc spend --jq '.lines[] | select(.serving == false and .status == "running") | .rental_id'`,
		GroupID: groupClient,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, computeError(spendRun(cmd.Context(), opts), false))
		},
	}
	AddClientFlags(cmd)
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

// spendBarWidth is the budget bar's width on a terminal.
const spendBarWidth = 24

func spendRun(ctx context.Context, opts *SpendOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	s, err := c.Spend(ctx)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, s)
	}
	cs := colorScheme{opts.IO.ColorEnabled()}
	decor := map[string]func(string) string{}
	period := "this month (UTC)"
	if !s.PeriodStart.IsZero() {
		period = s.PeriodStart.UTC().Format("January 2006") + " to date (UTC)"
	}
	spent := fmtGBP(s.MonthToDateGBP) + " (no monthly budget)"
	if b := s.MonthlyBudgetGBP; b != nil {
		spent = fmtGBP(s.MonthToDateGBP) + " of " + fmtGBP(*b)
		frac := 1.0
		if *b > 0 {
			frac = float64(s.MonthToDateGBP) / float64(*b)
		}
		style := cs.green
		switch {
		case frac >= 1:
			style = cs.red
		case frac >= 0.8:
			style = cs.yellow
		}
		pct := strconv.Itoa(int(frac*100)) + "%"
		if frac >= 1 {
			pct += ", budget reached: no new rentals"
		}
		if opts.IO.IsStdoutTTY() {
			decor["Spent"] = func(s string) string { return s + "  " + bar(frac, spendBarWidth, style) + " " + style(pct) }
		} else {
			spent += " (" + pct + ")"
		}
	}
	if s.CreditRemainingGBP <= 0 {
		decor["Credit left"] = cs.red
	}
	if err := styledFields(opts.IO.Out, decor,
		[2]string{"Period", period},
		[2]string{"Spent", spent},
		[2]string{"Active", plural(s.ActiveCount, "rental")},
		[2]string{"Credit left", fmtGBP(s.CreditRemainingGBP)},
	); err != nil {
		return err
	}
	if len(s.Lines) == 0 {
		return nil
	}
	fmt.Fprintln(opts.IO.Out)
	tp := newTablePrinter(opts.IO, "RENTAL", "GPU", "TIER", "STATUS", "PRICE/H", "HOURS", "COST")
	tp.shrinkable("TIER", "GPU")
	short := abbrevFor(s.Lines, func(l api.SpendLine) string { return l.RentalID })
	for _, l := range s.Lines {
		tp.field(short.of(l.RentalID))
		tp.field(dash(l.Label))
		tp.field(dash(l.TierLabel))
		status, style := spendStatus(tp.cs, l)
		tp.field(status, style)
		tp.field(fmtGBP(l.PricePerHourGBP))
		tp.field(fmtHours(l.Hours))
		tp.field(fmtGBP(l.CostGBP))
		tp.endRow()
	}
	return tp.render()
}

// spendStatus is a spend line's status; one billed without serving says
// so, as in 'svc rentals'.
func spendStatus(cs colorScheme, l api.SpendLine) (string, func(string) string) {
	switch l.Status {
	case api.RentalRunning:
		if !l.Serving {
			return "running, not serving", cs.red
		}
		return l.Status, cs.green
	case api.RentalProvisioning:
		return l.Status, cs.yellow
	}
	return l.Status, cs.gray
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
