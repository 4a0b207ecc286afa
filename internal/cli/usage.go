package cli

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
)

// NewCmdUsage builds `svc usage` and its subcommands.
func NewCmdUsage(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show requests in flight, the request log and usage totals",
		Long: `Usage of the key's organisation: requests running now, completed requests, and
totals over the last days (UTC days, today included). Needs a key with the
usage:read permission.

` + clientHelp,
		Example: `  svc usage                       # the request log, as svc usage logs
  svc usage inflight
  svc usage logs --limit 20 --status 429 --model sim-chat
  svc usage logs --worker gpu-box-1 --json --jq '.[] | select(.status_code==499) | .id'
  svc usage summary --days 7
  svc usage breakdown --sort requests`,
		GroupID: groupClient,
		Args:    groupArgs,
	}
	AddClientFlags(cmd)
	// Alone, svc usage lists the log: the list people look for first. It
	// takes the log's flags, bound to the same options as svc usage logs.
	logs := NewCmdUsageLogs(f, nil)
	cmd.Flags().AddFlagSet(logs.Flags())
	cmd.RunE = logs.RunE
	cmd.AddCommand(
		NewCmdUsageInflight(f, nil),
		logs,
		NewCmdUsageSummary(f, nil),
		NewCmdUsageDaily(f, nil),
		NewCmdUsageBreakdown(f, nil),
	)
	return cmd
}

// UsageInflightOptions are the flags of `svc usage inflight`.
type UsageInflightOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
	WorkerID  string
}

// NewCmdUsageInflight builds `svc usage inflight`.
func NewCmdUsageInflight(f *Factory, runF func(*UsageInflightOptions) error) *cobra.Command {
	opts := &UsageInflightOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "inflight",
		Short: "List the requests running now, oldest first",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, usageInflightRun(cmd.Context(), opts))
		},
	}
	cmd.Flags().StringVar(&opts.WorkerID, "worker", "", "only requests on this worker (its name or id)")
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

// workerID is the id of the worker a --worker flag names, by name or id;
// "" for none.
func workerID(ctx context.Context, c *client.Client, arg string) (string, error) {
	if arg == "" {
		return "", nil
	}
	w, err := resolveWorker(ctx, c, arg)
	if client.IsStatus(err, http.StatusForbidden) {
		// A key with usage:read alone may filter by a worker it may not
		// list: by its id, as a name would silently match nothing.
		id, ok := wholeWorkerID(arg)
		if !ok {
			return "", usageErrorf("--worker %q: naming a worker, or a start of its id, needs a key with workers:read; give its whole id (wk_ and 16 hexadecimal digits)", arg)
		}
		return id, nil
	}
	if err == nil && w.WorkerName == "" && !strings.HasPrefix(arg, "wk_") {
		// Not listed, and no id: a worker forgotten since its requests
		// is named by its id, and a mistyped name must not filter
		// everything out without a word.
		return "", usageErrorf("--worker %q: no worker of that name or id is listed; a worker no longer listed is named by its whole id (wk_...)", arg)
	}
	return w.WorkerID, err
}

// wholeWorkerID is arg as a worker's whole id, "wk_" and the 16
// hexadecimal digits of its hash, in the lower case ids are kept in; false
// for anything else, a start of one (wk_3f2a) included. A key that may not
// list workers filters by whole ids only, as anything else would silently
// match nothing.
func wholeWorkerID(arg string) (string, bool) {
	id := strings.ToLower(arg)
	hash, ok := strings.CutPrefix(id, "wk_")
	if !ok || len(hash) != 16 {
		return "", false
	}
	if _, err := hex.DecodeString(hash); err != nil {
		return "", false
	}
	return id, true
}

func usageInflightRun(ctx context.Context, opts *UsageInflightOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	id, err := workerID(ctx, c, opts.WorkerID)
	if err != nil {
		return err
	}
	reqs, err := c.Inflight(ctx, id)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, reqs)
	}
	tp := newTablePrinter(opts.IO, "ID", "MODEL", "TYPE", "STATE", "WORKER", "STARTED", "ELAPSED", "TOKENS")
	tp.shrinkable("WORKER")
	short := abbrevFor(reqs, func(r api.InflightRequest) string { return r.TaskID })
	for _, r := range reqs {
		tp.field(short.of(r.TaskID))
		tp.field(r.Model)
		typ := r.RequestType
		if r.Stream {
			typ += " (stream)"
		}
		tp.field(typ)
		style := tp.cs.green
		if r.State == api.StateQueued {
			style = tp.cs.yellow
		}
		tp.field(r.State, style)
		tp.field(dash(r.WorkerName))
		tp.timeField(r.StartedAt)
		tp.field(fmtMs(r.ElapsedMs))
		tp.field(intPtr(r.TokensGenerated))
		tp.endRow()
	}
	return tp.render()
}

// UsageLogsOptions are the flags of `svc usage logs`.
type UsageLogsOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
	Query     client.LogsQuery
}

// NewCmdUsageLogs builds `svc usage logs`.
func NewCmdUsageLogs(f *Factory, runF func(*UsageLogsOptions) error) *cobra.Command {
	opts := &UsageLogsOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "logs",
		Short: "List completed requests, newest first",
		Long: `List completed requests, newest first: successes, failures and cancels (status
499). TOKENS is prompt/completion, marked ~ when the gateway estimated them.
--json prints every field of the log (see docs/usage.md).`,
		Example: `  svc usage logs --limit 100 --offset 100
  svc usage logs --json --jq '.[] | select(.status_code==499) | .id'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkPage(opts.Query.Limit, opts.Query.Offset); err != nil {
				return err
			}
			if s := opts.Query.Status; s != 0 && (s < 100 || s > 599) {
				return usageErrorf("--status %d: a status code is between 100 and 599", s)
			}
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, usageLogsRun(cmd.Context(), opts))
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Query.Limit, "limit", 50, "how many requests, 1-1000")
	fl.IntVar(&opts.Query.Offset, "offset", 0, "how many of the newest requests to skip")
	fl.StringVar(&opts.Query.WorkerID, "worker", "", "only requests served by this worker (its name or id)")
	fl.IntVar(&opts.Query.Status, "status", 0, "only requests answered with this status code, such as 429 or 499")
	fl.StringVar(&opts.Query.Model, "model", "", "only requests for this model")
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

func usageLogsRun(ctx context.Context, opts *UsageLogsOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	q := opts.Query
	if q.WorkerID, err = workerID(ctx, c, q.WorkerID); err != nil {
		return err
	}
	rows, err := c.UsageLogs(ctx, q)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, rows)
	}
	tp := newTablePrinter(opts.IO, "TIME", "ID", "MODEL", "STATUS", "TOKENS", "DURATION", "TTFT", "ENERGY", "WORKER", "NOTE")
	tp.shrinkable("NOTE", "WORKER")
	cs := tp.cs
	short := abbrevFor(rows, func(r api.UsageRow) string { return r.ID })
	for _, r := range rows {
		tp.timeField(r.CreatedAt)
		tp.field(short.of(r.ID))
		tp.field(r.Model)
		style := cs.green
		switch {
		case r.StatusCode == 499:
			style = cs.yellow
		case r.StatusCode >= 400:
			style = cs.red
		}
		tp.field(strconv.Itoa(r.StatusCode), style)
		tokens := fmt.Sprintf("%d/%d", r.PromptTokens, r.CompletionTokens)
		if r.TokensEstimated {
			tokens = "~" + tokens
		}
		tp.field(tokens)
		tp.field(fmtMs(r.RequestDurationMs))
		tp.field(fmtMsPtr(r.TimeToFirstTokenMs))
		tp.field(fmtWh(r.EnergyWh))
		tp.field(dash(string(r.WorkerName)))
		note := "-"
		switch {
		case r.ErrorMessage != nil && *r.ErrorMessage != "":
			note = *r.ErrorMessage
		case r.Notice != nil && *r.Notice != "":
			note = *r.Notice
		case r.ColdStart:
			note = "cold start"
		}
		tp.field(note, cs.gray)
		tp.endRow()
	}
	return tp.render()
}

// UsageTotalsOptions are the flags of `svc usage summary`, `daily` and
// `breakdown`.
type UsageTotalsOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
	Days      int
	// Sort is tokens or requests (breakdown only).
	Sort string
}

// newCmdUsageTotals builds one of the totals commands.
func newCmdUsageTotals(f *Factory, use, short string, withSort bool, runF func(*UsageTotalsOptions) error, run func(context.Context, *UsageTotalsOptions) error) *cobra.Command {
	opts := &UsageTotalsOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRange("--days", opts.Days, 1, 365); err != nil {
				return err
			}
			if withSort && opts.Sort != "tokens" && opts.Sort != "requests" {
				return usageErrorf("--sort must be tokens or requests, got %q", opts.Sort)
			}
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, run(cmd.Context(), opts))
		},
	}
	cmd.Flags().IntVar(&opts.Days, "days", 30, "the last N UTC days, today included, 1-365")
	if withSort {
		cmd.Flags().StringVar(&opts.Sort, "sort", "tokens", "rank by tokens or requests")
		_ = cmd.RegisterFlagCompletionFunc("sort", cobra.FixedCompletions([]string{"tokens", "requests"}, cobra.ShellCompDirectiveNoFileComp))
	}
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

// NewCmdUsageSummary builds `svc usage summary`.
func NewCmdUsageSummary(f *Factory, runF func(*UsageTotalsOptions) error) *cobra.Command {
	return newCmdUsageTotals(f, "summary", "Total usage over the last days", false, runF, usageSummaryRun)
}

// NewCmdUsageDaily builds `svc usage daily`.
func NewCmdUsageDaily(f *Factory, runF func(*UsageTotalsOptions) error) *cobra.Command {
	return newCmdUsageTotals(f, "daily", "Usage per day over the last days, oldest first", false, runF, usageDailyRun)
}

// NewCmdUsageBreakdown builds `svc usage breakdown`.
func NewCmdUsageBreakdown(f *Factory, runF func(*UsageTotalsOptions) error) *cobra.Command {
	return newCmdUsageTotals(f, "breakdown", "The top 10 models and workers over the last days", true, runF, usageBreakdownRun)
}

func usageSummaryRun(ctx context.Context, opts *UsageTotalsOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	s, err := c.UsageSummary(ctx, opts.Days)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, s)
	}
	t := s.UsageTotals
	return fields(opts.IO.Out,
		[2]string{"Period", fmt.Sprintf("%s to %s (%d days, UTC)", s.From, s.To, s.Days)},
		[2]string{"Requests", strconv.FormatInt(t.Requests, 10)},
		[2]string{"Succeeded", strconv.FormatInt(t.Succeeded, 10)},
		[2]string{"Failed", strconv.FormatInt(t.Failed, 10)},
		[2]string{"Cancelled", strconv.FormatInt(t.Cancelled, 10)},
		[2]string{"Prompt tokens", strconv.FormatInt(t.PromptTokens, 10)},
		[2]string{"Completion tokens", strconv.FormatInt(t.CompletionTokens, 10)},
		[2]string{"Total tokens", strconv.FormatInt(t.TotalTokens, 10)},
		[2]string{"Reasoning tokens", strconv.FormatInt(t.ReasoningTokens, 10)},
		[2]string{"Cached tokens", strconv.FormatInt(t.CachedTokens, 10)},
		[2]string{"Images", strconv.FormatInt(t.Images, 10)},
		[2]string{"Audio seconds", strconv.FormatFloat(t.AudioSeconds, 'f', -1, 64)},
		[2]string{"Speech seconds", strconv.FormatFloat(t.SpeechSeconds, 'f', -1, 64)},
		[2]string{"Energy", fmtWh(&t.EnergyWh)},
		[2]string{"Request time", fmtMs(t.RequestDurationMs)},
	)
}

func usageDailyRun(ctx context.Context, opts *UsageTotalsOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	days, err := c.UsageDaily(ctx, opts.Days)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, days)
	}
	tp := newTablePrinter(opts.IO, "DATE", "REQUESTS", "OK", "FAILED", "CANCELLED", "PROMPT", "COMPLETION", "TOTAL TOKENS")
	for _, d := range days {
		tp.field(d.Date)
		totalsFields(tp, d.UsageTotals)
		tp.endRow()
	}
	return tp.render()
}

// totalsFields adds the counts columns of daily and breakdown.
func totalsFields(tp *tablePrinter, t api.UsageTotals) {
	tp.field(strconv.FormatInt(t.Requests, 10))
	tp.field(strconv.FormatInt(t.Succeeded, 10))
	failed := strconv.FormatInt(t.Failed, 10)
	if t.Failed > 0 {
		tp.field(failed, tp.cs.red)
	} else {
		tp.field(failed)
	}
	tp.field(strconv.FormatInt(t.Cancelled, 10))
	tp.field(strconv.FormatInt(t.PromptTokens, 10))
	tp.field(strconv.FormatInt(t.CompletionTokens, 10))
	tp.field(strconv.FormatInt(t.TotalTokens, 10))
}

func usageBreakdownRun(ctx context.Context, opts *UsageTotalsOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	b, err := c.UsageBreakdown(ctx, opts.Days, opts.Sort)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, b)
	}
	if _, err := printf(opts.IO.Out, "%s to %s (%d days, UTC), top 10 by %s\n\n", b.From, b.To, b.Days, b.Sort); err != nil {
		return err
	}
	tp := newTablePrinter(opts.IO, "MODEL", "REQUESTS", "OK", "FAILED", "CANCELLED", "PROMPT", "COMPLETION", "TOTAL TOKENS", "WH/1K TOKENS")
	for _, m := range b.Models {
		tp.field(m.Model)
		totalsFields(tp, m.UsageTotals)
		tp.field(fmtPer1K(m.WhPer1KTokens))
		tp.endRow()
	}
	if err := tp.render(); err != nil {
		return err
	}
	fmt.Fprintln(opts.IO.Out)
	tp = newTablePrinter(opts.IO, "WORKER", "REQUESTS", "OK", "FAILED", "CANCELLED", "PROMPT", "COMPLETION", "TOTAL TOKENS", "WH/1K TOKENS")
	tp.shrinkable("WORKER")
	for _, w := range b.Workers {
		tp.field(dash(w.WorkerName))
		totalsFields(tp, w.UsageTotals)
		tp.field(fmtPer1K(w.WhPer1KTokens))
		tp.endRow()
	}
	return tp.render()
}

// fmtWh is measured energy, "-" when none was measured.
func fmtWh(wh *float64) string {
	switch {
	case wh == nil || *wh == 0:
		return "-"
	case *wh < 10:
		return strconv.FormatFloat(*wh, 'f', 2, 64) + " Wh"
	case *wh < 10000:
		return strconv.FormatFloat(*wh, 'f', 0, 64) + " Wh"
	}
	return strconv.FormatFloat(*wh/1000, 'f', 1, 64) + " kWh"
}

// fmtPer1K is energy per thousand tokens.
func fmtPer1K(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 2, 64)
}

func intPtr(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}

// groupArgs is the Args of a command with subcommands: an argument that
// names none of them is a usage error, as cobra says it for the root.
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}
