package cli

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
	"github.com/svc-dev/svc/internal/money"
	"github.com/svc-dev/svc/internal/termsafe"
)

// RentalsOptions are the flags of `svc rentals`.
type RentalsOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
}

// NewCmdRentals builds `svc rentals` (the list) and its `show` and
// `audit` subcommands; runF replaces the list in tests.
func NewCmdRentals(f *Factory, runF func(*RentalsOptions) error) *cobra.Command {
	opts := &RentalsOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "rentals",
		Short: "List the organisation's GPU rentals",
		Long: `List the organisation's GPU rentals, newest first: a short id (any unique start
of an id names a rental in the other commands), name, GPU, tier, status, the
boot phase or the model download's progress, the price per hour, the cost so
far and the hours billed, and when billing started (when its worker first
connected). A running rental whose worker is not connected is billed without
serving: its status says so ("running, not serving").

Needs a key with the compute:write permission.

` + clientHelp,
		Example: `  svc rentals
  svc rentals --jq '.[] | select(.status != "stopped") | .id'
  svc rentals show 1a2b3c4d
  svc rentals audit 1a2b3c4d`,
		GroupID: groupClient,
		Args:    groupArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, computeError(rentalsRun(cmd.Context(), opts), false))
		},
	}
	AddClientFlags(cmd)
	opts.Exporter.AddFlags(cmd, false)
	cmd.AddCommand(NewCmdRentalsShow(f, nil), NewCmdRentalsAudit(f, nil))
	return cmd
}

func rentalsRun(ctx context.Context, opts *RentalsOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	rentals, err := c.Rentals(ctx)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, rentals)
	}
	if len(rentals) == 0 && opts.IO.IsStdoutTTY() {
		_, err := fmt.Fprintln(opts.IO.Out, "No rentals. Rent a GPU with: svc rent GPU --tier TIER ('svc catalogue' lists them)")
		return err
	}
	// Whether the worker is connected is in STATUS ("running, not
	// serving" when billed without it), so it takes no column.
	tp := newTablePrinter(opts.IO, "ID", "NAME", "GPU", "TIER", "STATUS", "PHASE/DOWNLOAD", "PRICE/H", "COST", "HOURS", "STARTED")
	tp.shrinkable("NAME", "TIER", "GPU")
	tp.optional("STARTED", "TIER", "HOURS")
	short := abbrevFor(rentals, func(r api.Rental) string { return r.ID })
	for _, r := range rentals {
		tp.field(short.of(r.ID))
		tp.field(dash(r.Name))
		tp.field(rentalGPU(r))
		tp.field(rentalTier(r))
		status, style := rentalStatus(tp.cs, r)
		tp.field(status, style)
		tp.field(rentalPhase(r))
		tp.field(fmtGBP(r.PricePerHourGBP))
		tp.field(fmtGBP(r.AccruedCostGBP))
		tp.field(fmtHours(rentalHours(r)))
		tp.field(tp.fmtTimePtr(r.StartedAt))
		tp.endRow()
	}
	return tp.render()
}

// RentalOptions are the flags of `svc rentals show` and `svc rentals audit`.
type RentalOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
	ID        string // an id, a unique start of one, or a name
}

// rentalCommand completes cmd as a command on one rental named by its
// only argument, run by run (or runF in tests).
func rentalCommand(f *Factory, cmd *cobra.Command, runF func(*RentalOptions) error, run func(context.Context, *RentalOptions) error) *cobra.Command {
	opts := &RentalOptions{IO: f.IO}
	cmd.Args = exactArgs(1)
	cmd.ValidArgsFunction = completeRentals(f, false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		opts.ID = args[0]
		if err := opts.Exporter.Prepare(); err != nil {
			return err
		}
		opts.APIClient = f.apiClientFunc(cmd)
		if runF != nil {
			return runF(opts)
		}
		return f.explainAPIError(cmd, computeError(run(cmd.Context(), opts), false))
	}
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

// NewCmdRentalsShow builds `svc rentals show`.
func NewCmdRentalsShow(f *Factory, runF func(*RentalOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one rental",
		Long: `Show every field of one rental: its GPU and tier, status and boot phase, the
model download's progress, its worker, the models it installs, its price, cost
and billed time, and when it was created, started and stopped. ID is a
rental's id, any unique start of one, or its name.`,
		Example: `  svc rentals show 1a2b3c4d
  svc rentals show 1a2b --jq .model_download.progress_pct`,
	}
	return rentalCommand(f, cmd, runF, rentalShowRun)
}

func rentalShowRun(ctx context.Context, opts *RentalOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	r, err := resolveRental(ctx, c, opts.ID)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, r)
	}
	cs := colorScheme{opts.IO.ColorEnabled()}
	status, statusStyle := rentalStatus(cs, r)
	style := map[string]func(string) string{"Status": statusStyle}
	download := "-"
	if d := r.ModelDownload; d != nil {
		download = fmtDownload(d)
	}
	yesNo := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	tier := rentalTier(r)
	if r.RequestedTierID != "" && r.RequestedTierID != tier {
		tier += " (" + r.RequestedTierID + ")"
	}
	gpu := rentalGPU(r)
	if r.GPUModelID != "" && r.GPUModelID != gpu {
		gpu += " (" + r.GPUModelID + ")"
	}
	errText := "-"
	if r.Error != nil && *r.Error != "" {
		errText, style["Error"] = *r.Error, cs.red
	}
	phase := "-"
	if r.BootPhase != nil {
		phase = *r.BootPhase
	}
	return styledFields(opts.IO.Out, style,
		[2]string{"ID", r.ID},
		[2]string{"Name", dash(r.Name)},
		[2]string{"GPU", gpu},
		[2]string{"Tier", tier},
		[2]string{"Status", status},
		[2]string{"Boot phase", phase},
		[2]string{"Download", download},
		[2]string{"Connected", yesNo(r.Connected)},
		[2]string{"Serving", yesNo(rentalServing(r))},
		[2]string{"Worker", dash(r.WorkerID)},
		[2]string{"Models", dash(strings.Join(r.Models, ", "))},
		[2]string{"Price", fmtGBP(r.PricePerHourGBP) + "/h"},
		[2]string{"Cost", fmtGBP(r.AccruedCostGBP)},
		[2]string{"Billed", fmtBilled(r)},
		[2]string{"Provider", dash(r.Provider)},
		[2]string{"Created", fmtTime(r.CreatedAt)},
		[2]string{"Started", fmtTimePtr(r.StartedAt)},
		[2]string{"Stopped", fmtTimePtr(r.StoppedAt)},
		[2]string{"Error", errText},
	)
}

// NewCmdRentalsAudit builds `svc rentals audit`.
func NewCmdRentalsAudit(f *Factory, runF func(*RentalOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit ID",
		Short: "Show where a rental was placed and its history",
		Long: `Show a rental's placement record: the provider and its machine, the
jurisdiction tier delivered, the data centre's region and country, and the
operator's legal entity and domicile; then every event of the rental, oldest
first. The record exists once the rental has been placed on a machine. ID is a
rental's id, any unique start of one, or its name.`,
		Example: `  svc rentals audit 1a2b3c4d
  svc rentals audit 1a2b3c4d --jq '.events[] | select(.type == "stopped")'`,
	}
	return rentalCommand(f, cmd, runF, rentalAuditRun)
}

func rentalAuditRun(ctx context.Context, opts *RentalOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	r, err := resolveRental(ctx, c, opts.ID)
	if err != nil {
		return err
	}
	p, err := c.RentalAudit(ctx, r.ID)
	if client.IsStatus(err, http.StatusNotFound) {
		// The rental exists (it was just read), so the record is what is
		// missing: it is written when a machine is found.
		return withHint(err, fmt.Sprintf("Rental %s has no placement record: it has not been placed on a machine yet, or never was ('svc rentals show %s').",
			shortID(r.ID), shortID(r.ID)))
	}
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, p)
	}
	tier := dash(p.TierLabel)
	if p.TierID != "" {
		tier += " (" + p.TierID + ")"
	}
	operator := dash(p.OperatorEntity)
	if p.OperatorDomicile != "" {
		operator += ", domiciled in " + p.OperatorDomicile
	}
	if err := fields(opts.IO.Out,
		[2]string{"Rental", p.RentalID},
		[2]string{"Provider", dash(p.Provider)},
		[2]string{"Instance", dash(p.InstanceID)},
		[2]string{"Tier", tier},
		[2]string{"Region", dash(p.Region)},
		[2]string{"Country", dash(p.Country)},
		[2]string{"Operator", operator},
		[2]string{"Placed", fmtTime(p.PlacedAt)},
	); err != nil {
		return err
	}
	if len(p.Events) == 0 {
		return nil
	}
	fmt.Fprintln(opts.IO.Out)
	tp := newTablePrinter(opts.IO, "TIME", "EVENT", "DETAIL")
	tp.shrinkable("DETAIL")
	for _, e := range p.Events {
		tp.timeField(e.At)
		tp.field(e.Type)
		tp.field(dash(e.Detail))
		tp.endRow()
	}
	return tp.render()
}

// StopOptions are the flags of `svc stop`.
type StopOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
	ID        string // an id, a unique start of one, or a name
	Yes       bool
}

// NewCmdStop builds `svc stop`.
func NewCmdStop(f *Factory, runF func(*StopOptions) error) *cobra.Command {
	opts := &StopOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "stop ID",
		Short: "Stop a GPU rental",
		Long: `Stop a rental: its machine is destroyed, its worker leaves the fleet and billing
stops at once. A stopped rental cannot be started again. ID is a rental's id,
any unique start of one, or its name, as 'svc rentals' lists them.

On a terminal svc stop asks first, showing what the rental has cost; --yes
skips the question, and is needed when stdin is not a terminal. It prints the
final cost and the hours billed. Needs a key with the compute:write
permission whose user is an owner or operator of the organisation.

` + clientHelp,
		Example: `  svc stop 1a2b3c4d
  svc stop 1a2b3c4d --yes --jq .accrued_cost_gbp
  svc rentals --jq '.[] | select(.status != "stopped") | .id' | xargs -n1 svc stop --yes`,
		GroupID:           groupClient,
		Args:              exactArgs(1),
		ValidArgsFunction: completeRentals(f, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			// Refused before anything is sent: a script must say what it
			// means rather than stop a machine on an unanswered question.
			if !opts.Yes && !opts.IO.IsStdinTTY() {
				return usageErrorf("not stopping %s without confirmation: stdin is not a terminal; pass --yes to stop it", opts.ID)
			}
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, computeError(stopRun(cmd.Context(), opts), true))
		},
	}
	AddClientFlags(cmd)
	cmd.Flags().BoolVarP(&opts.Yes, "yes", "y", false, "stop without asking")
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

func stopRun(ctx context.Context, opts *StopOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	r, err := resolveRental(ctx, c, opts.ID)
	if err != nil {
		return err
	}
	if r.Status == api.RentalStopped {
		if opts.Exporter.Enabled() {
			return opts.Exporter.Write(opts.IO.Out, r)
		}
		_, err := printf(opts.IO.Out, "Rental %s (%s) is already stopped: %s for %s hours.\n",
			shortID(r.ID), rentalGPU(r), fmtGBP(r.AccruedCostGBP), fmtHours(rentalHours(r)))
		return err
	}
	if !opts.Yes {
		ok, err := confirm(ctx, opts.IO, fmt.Sprintf("Stop rental %s (%s, %s so far)? [y/N] ", shortID(r.ID), termsafe.Line(rentalGPU(r)), fmtGBP(r.AccruedCostGBP)))
		if err != nil && ctx.Err() == nil {
			return err
		}
		if !ok {
			// Not an error to report, but the rental was not stopped, which
			// a caller chaining on the exit status must not take for done.
			fmt.Fprintln(opts.IO.ErrOut, "Not stopped.")
			return exitStatus(exitError)
		}
	}
	stopped, err := c.StopRental(ctx, r.ID)
	if client.IsStatus(err, http.StatusBadGateway) {
		// The provider did not confirm the machine is gone; the gateway
		// ended the billing at the call and keeps trying.
		return withHint(err, fmt.Sprintf("Billing stopped with this call; the gateway keeps trying to destroy the machine. 'svc rentals show %s' says when it has.", shortID(r.ID)))
	}
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, stopped)
	}
	_, err = printf(opts.IO.Out, "Stopped rental %s (%s): %s for %s hours.\n",
		shortID(stopped.ID), rentalGPU(stopped), fmtGBP(stopped.AccruedCostGBP), fmtHours(rentalHours(stopped)))
	return err
}

// confirm asks question on stderr and reads the answer from stdin: only
// y or yes agrees.
func confirm(ctx context.Context, ios *iostreams.IOStreams, question string) (bool, error) {
	fmt.Fprint(ios.ErrOut, question)
	line, err := readLine(ctx, ios.In)
	if err != nil {
		// Ctrl-C is no: the answer's line is ended for the reader.
		fmt.Fprintln(ios.ErrOut)
		return false, fmt.Errorf("read the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

// uuidLen is the length of a rental id written out in full.
const uuidLen = 36

// resolveRental finds the rental arg names: its id, its name, or a unique
// start of an id (the short ids the tables show). One the list does not
// have is asked for as an id, so the gateway's 404 is the answer for it.
func resolveRental(ctx context.Context, c *client.Client, arg string) (api.Rental, error) {
	notFound := func(err error) error {
		if client.IsStatus(err, http.StatusNotFound) {
			return withHint(err, "ID is a rental's id, a unique start of one, or its name, as 'svc rentals' lists them.")
		}
		return err
	}
	if len(arg) == uuidLen {
		r, err := c.Rental(ctx, arg)
		return r, notFound(err)
	}
	list, err := c.Rentals(ctx)
	if err != nil {
		return api.Rental{}, err
	}
	r, ok, err := pick(list, arg, "rental", func(r api.Rental) string { return r.ID }, func(r api.Rental) string { return r.Name })
	if ok || err != nil {
		return r, err
	}
	r, err = c.Rental(ctx, arg)
	return r, notFound(err)
}

// completeRentals offers rental ids, described by name, GPU and status;
// active leaves the stopped ones out.
func completeRentals(f *Factory, active bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := f.APIClient(cmd)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		rentals, err := c.Rentals(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, r := range rentals {
			if active && r.Status == api.RentalStopped {
				continue
			}
			out = append(out, cobra.CompletionWithDesc(r.ID, strings.Join([]string{dash(r.Name), rentalGPU(r), r.Status}, ", ")))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// computeError adds advice to a refusal by the compute endpoints. The
// gateway's 403 names the permission missing; renting and stopping also
// need a role, which a 403 there may be about instead.
func computeError(err error, renting bool) error {
	switch {
	case client.IsStatus(err, http.StatusForbidden) && renting:
		return withHint(err, "Renting and stopping need a key with the compute:write permission whose user is an owner or operator of the organisation.")
	case client.IsStatus(err, http.StatusNotImplemented):
		return withHint(err, "This gateway does not rent GPUs.")
	}
	return err
}

// rentalServing tells whether a rental's worker is connected and healthy
// now; a gateway of an older release says only whether it ever connected.
func rentalServing(r api.Rental) bool {
	if r.Serving != nil {
		return *r.Serving
	}
	return r.Connected && r.Status != api.RentalStopped
}

// rentalStatus is a rental's status as the tables show it, with its
// colour. A running rental whose worker is not serving is billed for
// nothing, which is what its status must say.
func rentalStatus(cs colorScheme, r api.Rental) (string, func(string) string) {
	switch {
	case r.Error != nil && *r.Error != "" && r.Status != api.RentalStopped:
		return r.Status + ", error", cs.red
	case r.Status == api.RentalRunning && !rentalServing(r):
		return "running, not serving", cs.red
	case r.Status == api.RentalRunning:
		return r.Status, cs.green
	case r.Status == api.RentalProvisioning:
		return r.Status, cs.yellow
	}
	return r.Status, cs.gray
}

// rentalPhase is the model download's progress while there is one, else
// the boot phase, for a rental that is not stopped.
func rentalPhase(r api.Rental) string {
	switch {
	case r.Status == api.RentalStopped:
		return "-" // the last milestone it reached is history
	case r.ModelDownload != nil:
		return "downloading " + fmtPct(r.ModelDownload.ProgressPct)
	case r.BootPhase != nil && *r.BootPhase != "":
		return *r.BootPhase
	}
	return "-"
}

func rentalGPU(r api.Rental) string {
	if r.Label != "" {
		return r.Label
	}
	return dash(r.GPUModelID)
}

func rentalTier(r api.Rental) string {
	if r.TierLabel != "" {
		return r.TierLabel
	}
	return dash(r.RequestedTierID)
}

// rentalHours is the billed time in hours: exact from seconds_billed,
// else the gateway's rounded hours_billed.
func rentalHours(r api.Rental) float64 {
	if r.SecondsBilled > 0 {
		return float64(r.SecondsBilled) / 3600
	}
	return r.HoursBilled
}

// fmtBilled is the billed time in hours, with the exact seconds when the
// gateway gives them.
func fmtBilled(r api.Rental) string {
	s := fmtHours(rentalHours(r)) + " h"
	if r.SecondsBilled > 0 {
		s += " (" + strconv.FormatInt(r.SecondsBilled, 10) + " s)"
	}
	return s
}

// fmtGBP writes an amount as people do: £12.34, -£0.50.
func fmtGBP(m money.GBP) string {
	s := m.String()
	if rest, neg := strings.CutPrefix(s, "-"); neg {
		return "-£" + rest
	}
	return "£" + s
}

// fmtHours shows hours to two decimals (36 s); the JSON has them exactly.
func fmtHours(h float64) string { return strconv.FormatFloat(h, 'f', 2, 64) }

// fmtGB is a size in (decimal) gigabytes: 80 GB, 5.2 GB.
func fmtGB(gb float64) string { return strconv.FormatFloat(gb, 'f', -1, 64) + " GB" }

func fmtPct(pct float64) string { return strconv.FormatFloat(pct, 'f', 0, 64) + "%" }

// fmtDownload is a model download's progress: 45% (9.0 of 20.0 GB).
func fmtDownload(d *api.ModelDownload) string {
	return fmt.Sprintf("%s (%.1f of %.1f GB)", fmtPct(d.ProgressPct), float64(d.Completed)/1e9, float64(d.Total)/1e9)
}

// bar draws a fraction of width cells, filled in style; the empty part
// stays visible without colour.
func bar(frac float64, width int, style func(string) string) string {
	frac = min(max(frac, 0), 1)
	n := int(frac*float64(width) + 0.5)
	return style(strings.Repeat("█", n)) + strings.Repeat("░", width-n)
}
