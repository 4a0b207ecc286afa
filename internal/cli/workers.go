package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
)

// WorkersOptions are the flags of `svc workers`.
type WorkersOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
}

// NewCmdWorkers builds `svc workers` (the list) and its `events` and
// `power` subcommands; runF replaces the list in tests.
func NewCmdWorkers(f *Factory, runF func(*WorkersOptions) error) *cobra.Command {
	opts := &WorkersOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List the organisation's workers",
		Long: `List the workers of the key's organisation: status, version (marked when older
than the gateway's release), models, running and maximum requests, queue and
when each was last heard from. Simulated workers are marked. MODELS lists as
many as the column has room for and counts the rest ("+12 more"); 'svc workers
show WORKER' lists them all, and --json has every field.

` + clientHelp,
		Example: `  svc workers
  svc workers --json --jq '.workers[] | select(.status != "healthy") | .worker_name'
  svc workers events --type disconnected --limit 20
  svc workers power gpu-box-1 --range 24h`,
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
			return f.explainAPIError(cmd, workersRun(cmd.Context(), opts))
		},
	}
	AddClientFlags(cmd)
	opts.Exporter.AddFlags(cmd, false)
	cmd.AddCommand(NewCmdWorkersShow(f, nil), NewCmdWorkersEvents(f, nil), NewCmdWorkersPower(f, nil))
	return cmd
}

// WorkersShowOptions are the arguments of `svc workers show`.
type WorkersShowOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
	Worker    string // a name, an id or a unique start of one
}

// NewCmdWorkersShow builds `svc workers show`, the whole of what the list
// sums up in a line.
func NewCmdWorkersShow(f *Factory, runF func(*WorkersShowOptions) error) *cobra.Command {
	opts := &WorkersShowOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "show WORKER",
		Short: "Show one worker and every model it serves",
		Long: `Show one worker: its id, status, version, engines, load, power and GPUs, then a
line per model it serves with its capabilities, context window, engine and
whether the engine holds it in memory. WORKER is a worker's name, its id, or a
unique start of its id. --json prints the worker's entry of the workers list.`,
		Example: `  svc workers show gpu-box-1
  svc workers show gpu-box-1 --jq '.models[].id'`,
		Args:              exactArgs(1),
		ValidArgsFunction: completeWorkers(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Worker = args[0]
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, workersShowRun(cmd.Context(), opts))
		},
	}
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

func workersShowRun(ctx context.Context, opts *WorkersShowOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	w, err := resolveWorker(ctx, c, opts.Worker)
	if err != nil {
		return err
	}
	if w.WorkerName == "" {
		// resolveWorker's stand-in for a worker the list lacks: the list is
		// all there is to show.
		// A usage error, as a --worker that names no worker is.
		return withHint(usageErrorf("no worker %q is listed", opts.Worker),
			"WORKER is a worker's name, id or a unique start of its id, as 'svc workers' lists them.")
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, w)
	}
	latest, _ := c.LatestVersion(ctx)
	return printWorker(opts.IO, w, latest, time.Now())
}

// printWorker writes a worker's fields, then its models as a table.
func printWorker(ios *iostreams.IOStreams, w api.Worker, latest string, now time.Time) error {
	cs := colorScheme{ios.ColorEnabled()}
	// Coloured as the list colours them, after the worker's text is escaped.
	status, statusStyle := w.Status, statusColor(cs, w.Status)
	switch {
	case w.ApprovalPending:
		status, statusStyle = w.Status+", approval pending", cs.yellow
	case w.Draining:
		status += ", draining"
	}
	style := map[string]func(string) string{"Status": statusStyle}
	version := dash(w.Version)
	if buildinfo.Outdated(w.Version, latest) {
		version, style["Version"] = w.Version+" (latest "+latest+")", cs.yellow
	}
	engines := make([]string, len(w.Engines))
	for i, e := range w.Engines {
		engines[i] = e.Kind
		if e.URL != "" {
			engines[i] += " " + e.URL
		}
	}
	gpus := make([]string, len(w.GPUs))
	for i, g := range w.GPUs {
		gpus[i] = fmt.Sprintf("%d: %s", g.Index, g.Name)
		if g.MemoryTotalMiB > 0 {
			gpus[i] += fmt.Sprintf(" (%.1f of %.1f GiB used)", float64(g.MemoryUsedMiB)/1024, float64(g.MemoryTotalMiB)/1024)
		}
	}
	driver := "-"
	if w.DriverVersion != nil {
		driver = *w.DriverVersion
	}
	simulated := "no"
	if w.Simulated {
		simulated = "yes"
	}
	if err := styledFields(ios.Out, style,
		[2]string{"Name", w.WorkerName},
		[2]string{"ID", w.WorkerID},
		[2]string{"Status", status},
		[2]string{"Version", version},
		[2]string{"Engines", dash(strings.Join(engines, ", "))},
		[2]string{"Active", fmt.Sprintf("%d of %d", w.ActiveTasks, w.MaxConcurrent)},
		[2]string{"Queue", strconv.Itoa(w.QueueDepth)},
		[2]string{"Power", machineWatts(w.Power)},
		[2]string{"GPUs", dash(strings.Join(gpus, "; "))},
		[2]string{"Driver", driver},
		[2]string{"Connected", fmtTimePtr(w.ConnectedAt)},
		[2]string{"Last seen", fmtTime(now.Add(-time.Duration(w.LastSeenSecondsAgo) * time.Second))},
		[2]string{"Offline since", fmtTimePtr(w.OfflineSince)},
		[2]string{"Simulated", simulated},
	); err != nil {
		return err
	}
	if len(w.Models) == 0 {
		return nil
	}
	fmt.Fprintln(ios.Out)
	tp := newTablePrinter(ios, "MODEL", "CAPABILITIES", "CONTEXT", "ENGINE", "LOADED", "NOTE")
	tp.shrinkable("NOTE", "CAPABILITIES", "MODEL")
	for _, m := range w.Models {
		tp.field(m.ID)
		tp.field(dash(strings.Join(m.Capabilities, ",")))
		if m.ContextWindow > 0 {
			tp.field(strconv.Itoa(m.ContextWindow))
		} else {
			tp.field("-")
		}
		tp.field(dash(m.Engine))
		switch {
		case m.Loaded == nil:
			tp.field("-")
		case *m.Loaded:
			tp.field("yes", cs.green)
		default:
			tp.field("no")
		}
		var notes []string
		if m.AlwaysOn {
			notes = append(notes, "always on")
		}
		if m.Local != "" {
			notes = append(notes, "engine's "+m.Local)
		}
		if m.Incomplete != nil {
			notes = append(notes, "not fully installed")
		}
		tp.field(dash(strings.Join(notes, "; ")), cs.gray)
		tp.endRow()
	}
	return tp.render()
}

func workersRun(ctx context.Context, opts *WorkersOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	workers, err := c.Workers(ctx)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		// The API's own document: {"workers": [...]}.
		return opts.Exporter.Write(opts.IO.Out, struct {
			Workers []api.Worker `json:"workers"`
		}{workers})
	}
	// The version mark is advice: without the gateway's release the list
	// is still worth printing.
	latest, _ := c.LatestVersion(ctx)
	if len(workers) == 0 && opts.IO.IsStdoutTTY() {
		_, err := fmt.Fprintln(opts.IO.Out, "No workers. Connect one with: svc worker --gateway URL --engine KIND=URL")
		return err
	}
	tp := newTablePrinter(opts.IO, "NAME", "STATUS", "VERSION", "MODELS", "ACTIVE", "QUEUE", "POWER", "LAST SEEN", "SIMULATED")
	// A worker's name is how the other commands take it: cut, two could
	// read the same, so the least needed columns go first.
	tp.shrinkable("MODELS", "VERSION")
	tp.optional("SIMULATED", "POWER", "QUEUE", "VERSION", "LAST SEEN")
	cs := tp.cs
	for _, w := range workers {
		tp.field(w.WorkerName)
		status := w.Status
		if w.Draining {
			status += ", draining"
		}
		style := statusColor(cs, w.Status)
		if w.ApprovalPending {
			// Connected, yet serving nothing: not healthy in any sense that
			// matters to whoever reads the list.
			status, style = w.Status+", approval pending", cs.yellow
		}
		tp.field(status, style)
		if buildinfo.Outdated(w.Version, latest) {
			tp.field(w.Version+" (latest "+latest+")", cs.yellow)
		} else {
			tp.field(dash(w.Version))
		}
		ids := make([]string, len(w.Models))
		for i, m := range w.Models {
			ids[i] = m.ID
		}
		tp.listField("models", ids, listWidth)
		tp.field(fmt.Sprintf("%d/%d", w.ActiveTasks, w.MaxConcurrent))
		tp.field(strconv.Itoa(w.QueueDepth))
		tp.field(machineWatts(w.Power))
		tp.timeField(tp.now().Add(-time.Duration(w.LastSeenSecondsAgo) * time.Second))
		if w.Simulated {
			tp.field("yes", cs.gray)
		} else {
			tp.field("-")
		}
		tp.endRow()
	}
	return tp.render()
}

// machineWatts is the whole machine's live draw, "~" before an estimate.
func machineWatts(p *api.LivePower) string {
	if p == nil {
		return "-"
	}
	w, ok := p.Watts[api.ScopeSystem]
	if !ok {
		return "-"
	}
	s := strconv.FormatFloat(w, 'f', 0, 64) + " W"
	if p.Machine == api.MethodEstimated {
		s = "~" + s
	}
	return s
}

func statusColor(cs colorScheme, status string) func(string) string {
	switch status {
	case api.StatusHealthy:
		return cs.green
	case api.StatusStale:
		return cs.yellow
	case api.StatusUnhealthy:
		return cs.red
	default:
		return cs.gray
	}
}

// EventsOptions are the flags of `svc workers events`.
type EventsOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
	Query     client.EventQuery
}

var eventTypes = []string{api.EventConnected, api.EventDisconnected, api.EventHealthChanged, api.EventModelsChanged,
	api.EventModelLoaded, api.EventModelInstall, api.EventDraining, api.EventReplaced, api.EventEngineStalled, api.EventEngineRecovered,
	api.EventApprovalPending, api.EventApproved, api.EventSettingsChanged}

// NewCmdWorkersEvents builds `svc workers events`.
func NewCmdWorkersEvents(f *Factory, runF func(*EventsOptions) error) *cobra.Command {
	opts := &EventsOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "events",
		Short: "List worker events, newest first",
		Long: `List the events of the organisation's workers, newest first: connected,
disconnected (transient when the worker came back within the grace period),
health_changed (a recovered drop is healthy -> stale, then stale -> healthy),
models_changed, model_loaded (a request waited for its model to load, with
model_load_ms), model_install, settings_changed (the worker came back with
other flags), draining, replaced, and engine_stalled and engine_recovered (an
engine that stopped answering, its models held back, and answering again),
approval_pending (a worker waiting for the organisation's approval, serving
nothing) and approved. Events are kept for 30 days.`,
		Example: `  svc workers events --worker wk_0123456789abcdef
  svc workers events --type health_changed --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkPage(opts.Query.Limit, opts.Query.Offset); err != nil {
				return err
			}
			if t := opts.Query.EventType; t != "" && !slices.Contains(eventTypes, t) {
				return usageErrorf("--type %q is not an event type: %s", t, strings.Join(eventTypes, ", "))
			}
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, eventsRun(cmd.Context(), opts))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Query.WorkerID, "worker", "", "only this worker's events (its name or id)")
	fl.StringVar(&opts.Query.EventType, "type", "", "only events of this type: "+strings.Join(eventTypes, ", "))
	fl.IntVar(&opts.Query.Limit, "limit", 50, "how many events, 1-1000")
	fl.IntVar(&opts.Query.Offset, "offset", 0, "how many of the newest events to skip")
	opts.Exporter.AddFlags(cmd, false)
	_ = cmd.RegisterFlagCompletionFunc("type", cobra.FixedCompletions(eventTypes, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func eventsRun(ctx context.Context, opts *EventsOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	q := opts.Query
	if q.WorkerID, err = workerID(ctx, c, q.WorkerID); err != nil {
		return err
	}
	events, err := c.WorkerEvents(ctx, q)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, events)
	}
	tp := newTablePrinter(opts.IO, "TIME", "WORKER", "EVENT", "DETAIL")
	tp.shrinkable("DETAIL", "WORKER")
	cs := tp.cs
	for _, e := range events {
		tp.timeField(e.CreatedAt)
		tp.field(e.WorkerName)
		typ, style := e.EventType, func(s string) string { return s }
		switch e.EventType {
		case api.EventConnected:
			style = cs.green
		case api.EventDisconnected:
			style = cs.red
			if e.Transient {
				typ, style = typ+" (transient)", cs.yellow
			}
		case api.EventHealthChanged, api.EventDraining, api.EventReplaced, api.EventApprovalPending:
			style = cs.yellow
		case api.EventApproved:
			style = cs.green
		}
		if e.Actor != nil && *e.Actor != "" {
			detail := "by " + *e.Actor
			if e.Detail != nil && *e.Detail != "" {
				detail = *e.Detail + " (" + detail + ")"
			}
			e.Detail = &detail
		}
		tp.field(typ, style)
		detail := "-"
		if e.Detail != nil && *e.Detail != "" {
			detail = *e.Detail
		}
		tp.field(detail)
		tp.endRow()
	}
	return tp.render()
}

// maxOffset is the largest offset the API takes.
const maxOffset = 1<<31 - 1

// checkPage checks --limit and --offset of a paged listing against the
// API's ranges, so a mistake is a usage error before any request.
func checkPage(limit, offset int) error {
	if err := checkRange("--limit", limit, 1, 1000); err != nil {
		return err
	}
	return checkRange("--offset", offset, 0, maxOffset)
}

// checkRange refuses a flag value outside [lo, hi] as a usage error, as
// the API would with a 422, before anything is sent.
func checkRange(flag string, v, lo, hi int) error {
	if v < lo || v > hi {
		if hi == maxOffset && v < lo {
			return usageErrorf("%s must be at least %d, got %d", flag, lo, v)
		}
		return usageErrorf("%s must be between %d and %d, got %d", flag, lo, hi, v)
	}
	return nil
}
