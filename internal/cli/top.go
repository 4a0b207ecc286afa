package cli

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
	"github.com/svc-dev/svc/internal/tui"
)

// TopOptions are the flags of `svc top`.
type TopOptions struct {
	IO       *iostreams.IOStreams
	Interval time.Duration
}

// minTopInterval keeps a dashboard left open from polling the gateway
// harder than a person can read.
const minTopInterval = 200 * time.Millisecond

// NewCmdTop builds `svc top`, the live dashboard.
func NewCmdTop(f *Factory) *cobra.Command {
	opts := &TopOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch requests, workers and traffic live",
		Long: `Open a live dashboard of the organisation: requests in flight, worker health
and versions, request and token rates with errors and 429s, power, and GPU
rental spend (the month against its budget and each active rental, marked
when it is billed without serving). tab moves between panes; in the two lists
typing filters (q included: a model name typed straight away filters), enter
shows details, space pauses and ? lists the keys; q quits from the other panes
and from details, ctrl+c from anywhere. When the gateway cannot be reached the
last data stays on screen, marked stale, while svc top retries.

It needs a key with workers:read and usage:read; the rental spend pane also
needs compute:write, and says so without it.

svc top needs a terminal; scripts should use the --json output of 'svc workers'
and 'svc usage'.

` + clientHelp,
		Example: `  svc top
  svc top --interval 5s --base-url https://gateway.example.com`,
		GroupID: groupClient,
		Args:    groupArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Interval < minTopInterval {
				return usageErrorf("--interval must be at least %s", minTopInterval)
			}
			if !opts.IO.IsStdoutTTY() || !opts.IO.IsStdinTTY() {
				return usageErrorf("svc top needs a terminal; for scripts use 'svc workers --json' or 'svc usage --json'")
			}
			cc, err := f.ClientConfig(cmd)
			if err != nil {
				return err
			}
			c := f.newClient(cc)
			// One call first, so that a wrong URL or key fails with advice
			// on the shell instead of inside a full-screen program.
			const firstWait = 5 * time.Second
			ctx, cancel := context.WithTimeout(cmd.Context(), firstWait)
			_, err = c.Workers(ctx)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				err = &client.StallError{Target: cc.BaseURL, Wait: firstWait}
			}
			var ae *client.Error
			if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusForbidden) {
				// A key refused only the workers (no workers:read) reached
				// the gateway: the dashboard shows what it may read.
				return f.explainAPIError(cmd, err)
			}
			return tui.Run(cmd.Context(), c, tui.Options{Interval: opts.Interval, Target: cc.BaseURL}, opts.IO.In, opts.IO.Out)
		},
	}
	AddClientFlags(cmd)
	cmd.Flags().DurationVar(&opts.Interval, "interval", time.Second, "how often to poll the gateway")
	return cmd
}
