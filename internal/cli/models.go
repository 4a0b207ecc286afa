package cli

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
)

// ModelsOptions are the flags of `svc models`.
type ModelsOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
}

// NewCmdModels builds `svc models`.
func NewCmdModels(f *Factory, runF func(*ModelsOptions) error) *cobra.Command {
	opts := &ModelsOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List the models the organisation's workers serve",
		Long: `List the models of the organisation's connected workers, once each, with their
capabilities, context window and engine. The simulator's models are marked.

` + clientHelp,
		Example: `  svc models
  svc models --jq '.data[] | select(.capabilities | index("embeddings")) | .id'`,
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
			return f.explainAPIError(cmd, modelsRun(cmd.Context(), opts))
		},
	}
	AddClientFlags(cmd)
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

func modelsRun(ctx context.Context, opts *ModelsOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	models, err := c.Models(ctx)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		// The API's own document: {"object": "list", "data": [...]}.
		return opts.Exporter.Write(opts.IO.Out, api.ModelList{Object: "list", Data: models})
	}
	tp := newTablePrinter(opts.IO, "ID", "CAPABILITIES", "CONTEXT", "ENGINE", "SIMULATED")
	tp.shrinkable("CAPABILITIES")
	tp.optional("SIMULATED", "ENGINE", "CONTEXT")
	for _, m := range models {
		tp.field(m.ID)
		tp.field(dash(strings.Join(m.Capabilities, ",")))
		if m.ContextWindow > 0 {
			tp.field(strconv.Itoa(m.ContextWindow))
		} else {
			tp.field("-")
		}
		tp.field(dash(m.Engine))
		if m.Simulated {
			tp.field("yes", tp.cs.gray)
		} else {
			tp.field("-")
		}
		tp.endRow()
	}
	return tp.render()
}

// completeModels completes a MODEL argument with the gateway's models that
// have capability capab; it stays quiet when the gateway cannot be asked.
func completeModels(f *Factory, capab string) cobra.CompletionFunc {
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
		models, err := c.Models(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, m := range models {
			if slices.Contains(m.Capabilities, capab) {
				out = append(out, m.ID)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
