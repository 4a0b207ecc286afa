package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chart"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
	"github.com/svc-dev/svc/internal/termsafe"
)

// PowerOptions are the flags of `svc workers power`.
type PowerOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
	Worker    string // an id or a name
	Range     string
}

// NewCmdWorkersPower builds `svc workers power`.
func NewCmdWorkersPower(f *Factory, runF func(*PowerOptions) error) *cobra.Command {
	opts := &PowerOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "power WORKER",
		Short: "Chart a worker's power draw over the last hour, day, week or month",
		Long: `Chart the power WORKER drew over --range (1h, 24h, 7d or 30d): one line per
channel (each GPU, the processor as cpu or soc, the whole machine as system) in
watts, averaged over windows of 1 minute (1h), 5 minutes (24h) or an hour (7d,
30d). Windows without readings are gaps, not zero. Below the chart are the
whole machine's energy, average and peak power over the range, the share of
the range with readings, and the channels: where each is read from and
whether it is measured or estimated.

WORKER is a worker's id or its name as 'svc workers' lists it. Power history
is part of the Pro and Enterprise plans; the live reading in
'svc workers --json' is on every plan.`,
		Example: `  svc workers power gpu-box-1
  svc workers power wk_0123456789abcdef --range 7d
  svc workers power gpu-box-1 --range 24h --jq .totals.energy_kwh`,
		Args:              exactArgs(1),
		ValidArgsFunction: completeWorkers(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Worker = args[0]
			if _, _, ok := api.RangeResolution(opts.Range); !ok {
				return usageErrorf("--range must be one of %s, got %q", strings.Join(powerRanges(), ", "), opts.Range)
			}
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, powerRun(cmd.Context(), opts))
		},
	}
	cmd.Flags().StringVar(&opts.Range, "range", api.Range1h, "how far back: "+strings.Join(powerRanges(), ", "))
	opts.Exporter.AddFlags(cmd, false)
	_ = cmd.RegisterFlagCompletionFunc("range", cobra.FixedCompletions(powerRanges(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func powerRanges() []string { return []string{api.Range1h, api.Range24h, api.Range7d, api.Range30d} }

func powerRun(ctx context.Context, opts *PowerOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	w, err := resolveWorker(ctx, c, opts.Worker)
	if err != nil {
		return err
	}
	h, err := c.WorkerPower(ctx, w.WorkerID, opts.Range)
	if client.IsStatus(err, 404) {
		return withHint(err, "WORKER is a worker's id or name as 'svc workers' lists them.")
	}
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, h)
	}
	// People read their own clock; scripts reading the text get UTC, as
	// the tables give them RFC 3339 times.
	now := time.Now()
	if !opts.IO.IsStdoutTTY() {
		now = now.UTC()
	}
	return printPower(opts.IO, powerReport{worker: w, hist: h, now: now, width: chartWidth(opts.IO)})
}

// resolveWorker finds the worker arg names: its id, its name, or a unique
// start of an id. One that is not listed is taken as an id: the list holds
// only workers connected now or lately, and the gateway, which keeps their
// history longer, is the judge of whether it exists.
func resolveWorker(ctx context.Context, c *client.Client, arg string) (api.Worker, error) {
	workers, err := c.Workers(ctx)
	if err != nil {
		return api.Worker{}, err
	}
	w, ok, err := pick(workers, arg, "worker", func(w api.Worker) string { return w.WorkerID }, func(w api.Worker) string { return w.WorkerName })
	if !ok && err == nil {
		w = api.Worker{WorkerID: arg}
	}
	return w, err
}

// completeWorkers offers the workers' names, which are what people type.
func completeWorkers(f *Factory) cobra.CompletionFunc {
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
		workers, err := c.Workers(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		out := make([]cobra.Completion, 0, len(workers))
		for _, w := range workers {
			out = append(out, cobra.CompletionWithDesc(w.WorkerName, w.WorkerID))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// pipeWidth is the chart's width off a terminal, where no width can be
// read and 80 columns suit a file, a pager or a mail.
const pipeWidth = 80

// chartWidth is the terminal's width, or pipeWidth.
func chartWidth(ios *iostreams.IOStreams) int {
	return termWidth(ios.Out, ios.IsStdoutTTY(), pipeWidth)
}

// chartHeight is the chart's lines, axes included: ten lines of plot are
// forty rows of dots, one every 12.5 W on a 500 W axis, and leave the
// totals on the first screen of a 24-line terminal.
const chartHeight = 12

// powerReport is what `svc workers power` prints.
type powerReport struct {
	worker api.Worker // WorkerName is "" when the list did not have it
	hist   api.PowerHistory
	now    time.Time // the end of the range, in the zone times are shown in
	width  int
}

// printPower prints the chart, the totals and the channels.
func printPower(ios *iostreams.IOStreams, r powerReport) error {
	out := ios.Out
	cs := colorScheme{ios.ColorEnabled()}
	h := r.hist
	name := r.worker.WorkerName
	if name == "" {
		name = h.WorkerID
	}
	c := chart.Power(h, r.now)
	if _, err := fmt.Fprintf(out, "%s  %s\n", cs.bold(termsafe.Line(name)), cs.gray(describeRange(h, c.From, c.To))); err != nil {
		return err
	}
	if len(h.Points) == 0 {
		_, err := fmt.Fprintf(out, "No power readings in the %s: the worker reports none, or was not connected.\n", rangeName(h.Range))
		if err != nil || len(h.Channels) == 0 {
			return err
		}
		fmt.Fprintln(out)
		return printChannels(ios, h.Channels)
	}

	c.Color, c.Axis = cs.enabled, cs.gray
	for i := range c.Series {
		// A series is labelled with its channel's key, the worker's text.
		c.Series[i].Label = termsafe.Line(c.Series[i].Label)
		c.Series[i].Style = ansiStyle(cs, chart.ANSIColor(i))
	}
	lines := append([]string{c.Legend()}, c.Render(r.width, chartHeight)...)
	for _, l := range lines {
		if _, err := fmt.Fprintln(out, strings.TrimRight(l, " ")); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	t := h.Totals
	method := "-"
	if h.Machine != nil {
		method = *h.Machine
	}
	if err := fields(out,
		[2]string{"Energy", fmtKWh(t.EnergyKWh)},
		[2]string{"Average", fmtWatts(t.AvgW)},
		[2]string{"Peak", fmtWatts(t.PeakW)},
		[2]string{"Coverage", strconv.FormatFloat(t.Coverage*100, 'f', 0, 64) + "%"},
		[2]string{"Method", method},
	); err != nil {
		return err
	}
	fmt.Fprintln(out)
	return printChannels(ios, h.Channels)
}

func printChannels(ios *iostreams.IOStreams, channels []api.PowerChannel) error {
	tp := newTablePrinter(ios, "KEY", "SCOPE", "NAME", "SOURCE", "METHOD", "LIMIT")
	tp.shrinkable("NAME")
	for i, ch := range channels {
		tp.field(ch.Key, ansiStyle(tp.cs, chart.ANSIColor(i)))
		tp.field(ch.Scope)
		tp.field(dash(ch.Name))
		tp.field(dash(ch.Source))
		method := ch.Method
		if method == api.MethodEstimated {
			tp.field(method, tp.cs.yellow)
		} else {
			tp.field(dash(method))
		}
		if ch.PowerLimitW != nil {
			tp.field(fmtWatts(*ch.PowerLimitW))
		} else {
			tp.field("-")
		}
		tp.endRow()
	}
	return tp.render()
}

// ansiStyle colours text with basic ANSI colour n (0-15) when colour is on.
func ansiStyle(cs colorScheme, n int) func(string) string {
	code := 30 + n
	if n >= 8 {
		code = 90 + n - 8
	}
	return func(s string) string { return cs.sgr(strconv.Itoa(code), s) }
}

// describeRange says what the chart covers: "last hour, 1-minute windows,
// 2026-01-02 02:05 to 03:05 UTC".
func describeRange(h api.PowerHistory, from, to time.Time) string {
	win := time.Duration(h.ResolutionSeconds) * time.Second
	span := from.Format("2006-01-02 15:04") + " to "
	if y1, m1, d1 := from.Date(); y1 == to.Year() && m1 == to.Month() && d1 == to.Day() {
		span += to.Format("15:04 MST")
	} else {
		span += to.Format("2006-01-02 15:04 MST")
	}
	return fmt.Sprintf("%s, %s windows, %s", rangeName(h.Range), fmtWindow(win), span)
}

// rangeName names a range in words, falling back to the API's own.
func rangeName(rng string) string {
	switch rng {
	case api.Range1h:
		return "last hour"
	case api.Range24h:
		return "last 24 hours"
	case api.Range7d:
		return "last 7 days"
	case api.Range30d:
		return "last 30 days"
	}
	return "last " + rng
}

func fmtWindow(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + "-hour"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + "-minute"
	}
	return strconv.Itoa(int(d/time.Second)) + "-second"
}

// fmtWatts prints power to the watt, or to a tenth below 10 W.
func fmtWatts(w float64) string {
	if w < 10 {
		return strconv.FormatFloat(w, 'f', 1, 64) + " W"
	}
	return strconv.FormatFloat(w, 'f', 0, 64) + " W"
}

// fmtKWh prints energy with three significant figures or more: an hour
// of an idle box is a few hundredths of a kWh.
func fmtKWh(kwh float64) string {
	prec := 1
	switch {
	case kwh < 1:
		prec = 3
	case kwh < 100:
		prec = 2
	}
	return strconv.FormatFloat(kwh, 'f', prec, 64) + " kWh"
}
