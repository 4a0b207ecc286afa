package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
	"github.com/svc-dev/svc/internal/termsafe"
)

// RentOptions are the flags of `svc rent`.
type RentOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
	Request   api.RentRequest
	Wait      bool

	// Interval is how often --wait polls the rental and Now its clock;
	// tests shorten and fix them.
	Interval time.Duration
	Now      func() time.Time
}

// NewCmdRent builds `svc rent`.
func NewCmdRent(f *Factory, runF func(*RentOptions) error) *cobra.Command {
	opts := &RentOptions{IO: f.IO, Interval: time.Second, Now: time.Now}
	cmd := &cobra.Command{
		Use:   "rent GPU --tier TIER [--model VARIANT]... [--name NAME] [--wait]",
		Short: "Rent a GPU that joins the fleet as a worker",
		Long: `Rent a GPU (an id from 'svc catalogue') in a jurisdiction tier: the gateway finds
a machine, which boots the svc worker; once the worker connects it serves the
organisation like any other worker and is billed per second at the tier's
price until 'svc stop'. --model installs a model variant ('svc catalogue
models') while the machine boots; repeat it for more. --name names the
rental and its worker (default: Rented and the GPU's label).

The request is checked against the catalogue before it is sent, because the
gateway takes one rental request a minute per API key, failed ones included:
an unknown GPU, tier or model, a tier below the organisation's jurisdiction
floor, or a model needing more system memory than the tier's machines have
is refused here without using that minute.

It prints the rental's id and status. --wait then follows the rental until it
serves (running, its worker connected and every model installed): on a
terminal as one line redrawn every second (boot phase, download progress,
cost so far), otherwise as a line per change. It exits 0 once the rental
serves, 1 if the rental fails or stops first. Ctrl-C stops the waiting, not
the rental.

Refusals: 402 (no payment card on file, not enough credit, or the monthly
budget reached), 409 (no capacity now, exit status 5) and 429 (the minute is
not up, exit status 5: the message says when to try again) are explained.
Needs a key with the compute:write permission whose user is an owner or
operator of the organisation.

` + clientHelp,
		Example: `  svc rent a100-80gb --tier uk
  svc rent h100-80gb --tier uk-sovereign --model qwen3-32b-q4 --name coder --wait
  svc rent a100-80gb --tier uk --jq .id`,
		GroupID:           groupClient,
		Args:              exactArgs(1),
		ValidArgsFunction: completeGPUs(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Request.GPUModelID = args[0]
			if opts.Request.TierID == "" {
				return usageErrorf("--tier is required: 'svc catalogue' lists each GPU's tiers")
			}
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, computeError(rentRun(cmd.Context(), opts), true))
		},
	}
	AddClientFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&opts.Request.TierID, "tier", "", "jurisdiction tier to place the GPU in (required; see 'svc catalogue')")
	fl.StringSliceVar(&opts.Request.Models, "model", nil, "model variant to install while booting (repeatable; see 'svc catalogue models')")
	fl.StringVar(&opts.Request.Name, "name", "", "name of the rental and its worker (default: Rented and the GPU's label)")
	fl.BoolVar(&opts.Wait, "wait", false, "follow the rental until it serves")
	opts.Exporter.AddFlags(cmd, false)
	_ = cmd.RegisterFlagCompletionFunc("tier", completeTiers(f))
	_ = cmd.RegisterFlagCompletionFunc("model", completeVariants(f))
	return cmd
}

func rentRun(ctx context.Context, opts *RentOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	if err := checkRent(ctx, c, opts.Request, opts.IO.ErrOut); err != nil {
		return err
	}
	r, err := c.Rent(ctx, opts.Request)
	if err != nil {
		return rentError(err, opts.Request, opts.Now())
	}
	if !opts.Wait {
		if opts.Exporter.Enabled() {
			return opts.Exporter.Write(opts.IO.Out, r)
		}
		_, err := printf(opts.IO.Out, "Rental %s is %s: %s in %s at %s/h.\nFollow it with 'svc rentals show %s'; stop it with 'svc stop %s'.\n",
			r.ID, r.Status, rentalGPU(r), rentalTier(r), fmtGBP(r.PricePerHourGBP), shortID(r.ID), shortID(r.ID))
		return err
	}

	// With --json the document alone goes to stdout and the progress to
	// stderr, so a script still reads one JSON document.
	p := &progress{w: opts.IO.Out, tty: opts.IO.IsStdoutTTY(), start: opts.Now()}
	if opts.Exporter.Enabled() {
		p.w, p.tty = opts.IO.ErrOut, opts.IO.IsStderrTTY()
	}
	p.width = termWidth(p.w, p.tty, defaultWidth)
	printf(p.w, "Rental %s: %s in %s at %s/h.\n", r.ID, rentalGPU(r), rentalTier(r), fmtGBP(r.PricePerHourGBP))
	r, err = waitRental(ctx, c, r, opts, p)
	if err != nil && rentalFailed(r) == nil && (errors.Is(err, context.Canceled) || passing(err)) {
		// The wait ended (Ctrl-C, or the gateway out of reach for too
		// long), not the rental: it is billed all the same.
		printf(opts.IO.ErrOut, "Stopped waiting. Rental %s keeps running, billed from when its worker connects; stop it with: svc stop %s\n", shortID(r.ID), r.ID)
	}
	if err != nil {
		if rentalFailed(r) != nil && opts.Exporter.Enabled() {
			// The rental's end is its final document too: a script
			// reads its id and error as it would a serving one's.
			if werr := opts.Exporter.Write(opts.IO.Out, r); werr != nil {
				return werr
			}
		}
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, r)
	}
	ready := fmt.Sprintf("Rental %s is serving as worker %s", shortID(r.ID), dash(r.WorkerID))
	if len(r.Models) > 0 {
		ready += " with " + strings.Join(r.Models, ", ")
	}
	_, err = printf(opts.IO.Out, "%s: %s so far at %s/h. Stop it with 'svc stop %s'.\n", ready, fmtGBP(r.AccruedCostGBP), fmtGBP(r.PricePerHourGBP), shortID(r.ID))
	return err
}

// checkRent checks a request against the catalogue and the model list,
// which cost nothing to read, before it is sent: the gateway takes one
// rental request a minute per key, failed ones included, so a mistyped GPU
// caught here saves the user that minute. The gateway still decides; a
// tier that shows no capacity is only warned about, since that signal is
// best-effort.
func checkRent(ctx context.Context, c *client.Client, req api.RentRequest, errOut io.Writer) error {
	gpus, err := c.Catalogue(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(gpus, func(g api.CatalogueEntry) bool { return g.GPUModelID == req.GPUModelID })
	switch {
	case len(gpus) == 0:
		// Nothing the user typed is wrong: there is nothing to rent.
		return errors.New("the gateway offers no GPUs to rent now ('svc catalogue' is empty)")
	case i < 0:
		ids := make([]string, len(gpus))
		for i, g := range gpus {
			ids[i] = g.GPUModelID
		}
		return usageErrorf("unknown GPU %q; 'svc catalogue' lists them: %s", req.GPUModelID, strings.Join(ids, ", "))
	}
	gpu := gpus[i]
	tierList := func(allowedOnly bool) string {
		var ts []string
		for _, t := range gpu.Tiers {
			if !allowedOnly || t.Allowed {
				ts = append(ts, fmt.Sprintf("%s (%s/h)", t.TierID, fmtGBP(t.PricePerHourGBP)))
			}
		}
		if len(ts) == 0 {
			return "none"
		}
		return strings.Join(ts, ", ")
	}
	j := slices.IndexFunc(gpu.Tiers, func(t api.Tier) bool { return t.TierID == req.TierID })
	if j < 0 {
		return usageErrorf("%s cannot be placed in tier %q now; its tiers: %s", gpuName(gpu), req.TierID, tierList(false))
	}
	tier := gpu.Tiers[j]
	if !tier.Allowed {
		return usageErrorf("tier %q is below the organisation's jurisdiction floor; the tiers allowed for %s: %s", req.TierID, gpuName(gpu), tierList(true))
	}
	// Warnings are printed only for a request that is going to be sent.
	var warnings []string
	if !tier.Available {
		warnings = append(warnings, fmt.Sprintf("the catalogue shows no capacity for %s in tier %s now; asking anyway", gpuName(gpu), req.TierID))
	}
	if len(req.Models) > 0 {
		seen := map[string]bool{}
		for _, id := range req.Models {
			if seen[id] {
				return usageErrorf("--model %s is given twice; name each variant once", id)
			}
			seen[id] = true
		}
		models, err := c.RentableModels(ctx)
		if err != nil {
			return err
		}
		variants := map[string]api.Variant{}
		for _, m := range models {
			for _, v := range m.Variants {
				variants[v.VariantID] = v
			}
		}
		for _, id := range req.Models {
			v, ok := variants[id]
			switch {
			case !ok:
				return usageErrorf("unknown model variant %q; 'svc catalogue models' lists them", id)
			case v.MinRAMGB != nil && tier.MaxRAMGB != nil && *v.MinRAMGB > *tier.MaxRAMGB:
				return usageErrorf("%s needs %s of system memory; the %s machines in tier %s have at most %s",
					id, fmtGB(*v.MinRAMGB), gpuName(gpu), req.TierID, fmtGB(*tier.MaxRAMGB))
			case v.MinRAMGB == nil && v.MinVRAMGB > gpu.VRAMGB:
				warnings = append(warnings, fmt.Sprintf("%s needs %s of GPU memory to run on one GPU; the %s has %s",
					id, fmtGB(v.MinVRAMGB), gpuName(gpu), fmtGB(gpu.VRAMGB)))
			}
		}
	}
	for _, w := range warnings {
		printf(errOut, "Warning: %s.\n", w)
	}
	return nil
}

// gpuName is how messages name a GPU of the catalogue.
func gpuName(g api.CatalogueEntry) string {
	if g.Label != "" {
		return g.Label
	}
	return g.GPUModelID
}

// rentError explains the refusals of a rental request a user can act on.
func rentError(err error, req api.RentRequest, now time.Time) error {
	var ae *client.Error
	if !errors.As(err, &ae) {
		return err
	}
	switch ae.Status {
	case http.StatusPaymentRequired:
		return withHint(err, "Renting needs a payment card on file, credit for the first hour and room in the monthly budget; 'svc spend' shows this month's spend and the credit left. An owner changes them on the gateway's host: 'svc admin card set', 'svc admin credit add', 'svc admin budget set'.")
	case http.StatusConflict:
		// No capacity, as a 503 elsewhere: exit status 5 says "try later".
		return withExitCode(withHint(err, fmt.Sprintf("Try another tier or GPU ('svc catalogue' shows which have capacity), or %s in %s later.", req.GPUModelID, req.TierID)), exitCapacity)
	case http.StatusTooManyRequests:
		when := "in a minute"
		if ae.RetryAfter > 0 {
			when = fmt.Sprintf("in %s (at %s)", ae.RetryAfter, now.Add(ae.RetryAfter).Format("15:04:05"))
		}
		return withHint(err, fmt.Sprintf("The gateway takes one rental request a minute per API key, failed ones included: try again %s. Check 'svc rentals' first: an earlier request may have gone through.", when))
	case http.StatusBadRequest:
		return withHint(err, "'svc catalogue' lists the GPUs and tiers, 'svc catalogue models' the model variants.")
	}
	return err
}

// maxWaitFailures is how many polls in a row --wait lets fail (the gateway
// restarting, a network blip) before it gives up: half a minute at the
// default interval.
const maxWaitFailures = 30

// waitRental polls r until it serves, fails or stops, or ctx ends. A poll
// that fails for a reason that may pass is retried; the last rental read
// is returned with the error.
func waitRental(ctx context.Context, c *client.Client, r api.Rental, opts *RentOptions, p *progress) (api.Rental, error) {
	fails := 0
	var lastErr error
	for {
		p.show(r, opts.Now(), lastErr)
		if err := rentalFailed(r); err != nil {
			p.end()
			return r, err
		}
		if rentalReady(r) {
			p.end()
			return r, nil
		}
		t := time.NewTimer(opts.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			p.end()
			return r, ctx.Err()
		case <-t.C:
		}
		next, err := c.Rental(ctx, r.ID)
		switch {
		case ctx.Err() != nil:
			p.end()
			return r, ctx.Err()
		case err == nil:
			r, fails, lastErr = next, 0, nil
		case passing(err) && fails+1 < maxWaitFailures:
			fails++
			lastErr = err
		default:
			p.end()
			return r, err
		}
	}
}

// passing reports whether a failed poll may succeed if tried again.
func passing(err error) bool {
	var ce *client.ConnectError
	var se *client.StallError
	var ae *client.Error
	switch {
	case errors.As(err, &ce), errors.As(err, &se):
		return true
	case errors.As(err, &ae):
		return ae.Status == http.StatusTooManyRequests || (ae.Status >= 500 && ae.Status != http.StatusNotImplemented)
	}
	return false
}

// rentalReady is the end of --wait: running, its worker connected and no
// model install in flight. A rental that asked for models is also waited
// for to reach boot phase ready, because model_download is null too in the
// moment between the worker connecting and its first install starting.
func rentalReady(r api.Rental) bool {
	if r.Status != api.RentalRunning || !r.Connected || r.ModelDownload != nil {
		return false
	}
	return len(r.Models) == 0 || r.BootPhase == nil || *r.BootPhase == api.BootReady
}

// rentalFailed says why a rental will not come to serve: it has an error,
// or it stopped.
func rentalFailed(r api.Rental) error {
	id := shortID(r.ID)
	switch {
	case r.Error != nil && *r.Error != "" && r.Status == api.RentalStopped:
		return withHint(fmt.Errorf("rental %s failed: %s", id, *r.Error), fmt.Sprintf("It is stopped and no longer billed; 'svc rentals audit %s' shows its history.", id))
	case r.Error != nil && *r.Error != "":
		return withHint(fmt.Errorf("rental %s failed: %s", id, *r.Error), fmt.Sprintf("It may still be billed: stop it with 'svc stop %s'.", id))
	case r.Status == api.RentalStopped:
		return withHint(fmt.Errorf("rental %s stopped before it was serving", id), fmt.Sprintf("'svc rentals audit %s' shows its history.", id))
	}
	return nil
}

// progress shows a rental's progress while --wait polls it: on a terminal
// one line redrawn at each poll, elsewhere a line per change, so a log
// holds the steps and not a line a second.
type progress struct {
	w     io.Writer
	tty   bool
	width int
	start time.Time

	frame int    // of the spinner
	last  string // the pipe's last line, without its time
	drawn bool   // the terminal line holds something to clear
}

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// barWidth is the download bar's width on a terminal.
const barWidth = 20

func (p *progress) show(r api.Rental, now time.Time, pollErr error) {
	if !p.tty {
		line := strings.Join(rentalSteps(r, false), " · ")
		if pollErr != nil {
			line += " · retrying: " + firstLine(pollErr.Error())
		}
		if line != p.last {
			p.last = line
			printf(p.w, "%s %s\n", fmtTime(now), line)
		}
		return
	}
	parts := rentalSteps(r, true)
	if r.StartedAt != nil {
		parts = append(parts, fmtGBP(r.AccruedCostGBP))
	}
	parts = append(parts, fmtWait(now.Sub(p.start)))
	if pollErr != nil {
		parts = append(parts, "retrying: "+firstLine(pollErr.Error()))
	}
	// Escaped: the steps are the gateway's words, and this line is
	// written with escapes of its own.
	line := truncate(spinner[p.frame%len(spinner)]+" "+termsafe.Line(strings.Join(parts, " · ")), max(1, p.width-1))
	p.frame++
	// Redrawn in place: back to the line's start, then erase to its end.
	fmt.Fprint(p.w, "\r\x1b[K"+line)
	p.drawn = true
}

// end clears the terminal's progress line, so what follows starts clean.
func (p *progress) end() {
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

// rentalSteps are where a rental is: status, connection, then the model
// download while it runs or the boot phase. On a terminal the download is
// a bar; elsewhere it moves in tens of percent and the cost is left out,
// so that a line is written per step, not per poll or penny.
func rentalSteps(r api.Rental, tty bool) []string {
	steps := []string{r.Status}
	if r.Status == api.RentalRunning {
		if r.Connected {
			steps = append(steps, "worker connected")
		} else {
			steps = append(steps, "worker not connected (billed, not serving)")
		}
	}
	switch d := r.ModelDownload; {
	case d != nil && tty:
		steps = append(steps, "models "+bar(d.ProgressPct/100, barWidth, func(s string) string { return s })+" "+fmtDownload(d))
	case d != nil:
		steps = append(steps, fmt.Sprintf("downloading models %d%%", int(d.ProgressPct/10)*10))
	case r.BootPhase != nil && *r.BootPhase != "" && !(r.Connected && *r.BootPhase == api.BootWorkerConnected):
		steps = append(steps, strings.ReplaceAll(*r.BootPhase, "_", " "))
	}
	return steps
}

// fmtWait is a wait so far: 42s, 3m05s, 1h02m.
func fmtWait(d time.Duration) string {
	d = d.Truncate(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// completeGPUs offers the catalogue's GPUs, described by label and memory.
func completeGPUs(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		gpus := catalogueForCompletion(f, cmd)
		out := make([]cobra.Completion, 0, len(gpus))
		for _, g := range gpus {
			out = append(out, cobra.CompletionWithDesc(g.GPUModelID, fmt.Sprintf("%s, %s", gpuName(g), fmtGB(g.VRAMGB))))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeTiers offers the tiers the organisation may use for the GPU
// already given, with their prices.
func completeTiers(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var out []cobra.Completion
		seen := map[string]bool{} // without a GPU, each tier once
		for _, g := range catalogueForCompletion(f, cmd) {
			if len(args) > 0 && g.GPUModelID != args[0] {
				continue
			}
			for _, t := range g.Tiers {
				if t.Allowed && !seen[t.TierID] {
					seen[t.TierID] = true
					out = append(out, cobra.CompletionWithDesc(t.TierID, fmt.Sprintf("%s, %s/h", dash(t.Label), fmtGBP(t.PricePerHourGBP))))
				}
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeVariants offers the rentable models' variants.
func completeVariants(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		c, err := f.APIClient(cmd)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		models, err := c.RentableModels(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, m := range models {
			for _, v := range m.Variants {
				out = append(out, cobra.CompletionWithDesc(v.VariantID, dash(v.Label)))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// catalogueForCompletion is the catalogue, or nothing when the gateway
// cannot be asked quickly: completion stays quiet rather than fail.
func catalogueForCompletion(f *Factory, cmd *cobra.Command) []api.CatalogueEntry {
	c, err := f.APIClient(cmd)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
	defer cancel()
	gpus, _ := c.Catalogue(ctx)
	return gpus
}
