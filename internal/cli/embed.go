package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
)

// EmbedOptions are the arguments and flags of `svc embed`.
type EmbedOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter

	Model  string
	Inputs []string
}

// NewCmdEmbed builds `svc embed`.
func NewCmdEmbed(f *Factory, runF func(*EmbedOptions) error) *cobra.Command {
	opts := &EmbedOptions{IO: f.IO}
	var e2e *e2eFlags
	cmd := &cobra.Command{
		Use:   "embed MODEL [TEXT...]",
		Short: "Embed texts and show the vectors",
		Long: `Send each TEXT to the embeddings model MODEL, or, without TEXT, each non-empty
line of stdin, and print each vector's dimensions and first values. --json
prints the gateway's whole reply, every value included.

` + clientHelp,
		Example: `  svc embed sim-embed "first text" "second text"
  cut -f2 titles.tsv | svc embed sim-embed --json > vectors.json`,
		GroupID:           groupClient,
		Args:              minArgs(1),
		ValidArgsFunction: completeModels(f, api.CapEmbeddings),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Model, opts.Inputs = args[0], args[1:]
			if len(opts.Inputs) == 0 && !opts.IO.IsStdinTTY() {
				sc := bufio.NewScanner(opts.IO.In)
				sc.Buffer(make([]byte, 64<<10), 8<<20)
				for sc.Scan() {
					if line := strings.TrimRight(sc.Text(), "\r"); strings.TrimSpace(line) != "" {
						opts.Inputs = append(opts.Inputs, line)
					}
				}
				if err := sc.Err(); err != nil {
					return fmt.Errorf("read texts from stdin: %w", err)
				}
			}
			if len(opts.Inputs) == 0 {
				return usageErrorf("no text: give TEXT arguments or pipe lines on stdin")
			}
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			var err error
			if opts.APIClient, err = e2e.clientFunc(f, cmd); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, embedRun(cmd.Context(), opts))
		},
	}
	AddClientFlags(cmd)
	e2e = addE2EFlags(cmd, "reads it")
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

// embedValues is how many leading values of a vector the table shows.
const embedValues = 4

func embedRun(ctx context.Context, opts *EmbedOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	raw, err := c.Embeddings(ctx, map[string]any{"model": opts.Model, "input": opts.Inputs})
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, raw)
	}
	var reply struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return fmt.Errorf("decode the reply: %w", err)
	}
	tp := newTablePrinter(opts.IO, "INDEX", "TEXT", "DIMENSIONS", "VALUES")
	tp.shrinkable("TEXT")
	for _, d := range reply.Data {
		tp.field(strconv.Itoa(d.Index))
		text := ""
		if d.Index >= 0 && d.Index < len(opts.Inputs) {
			text = opts.Inputs[d.Index]
		}
		tp.field(text)
		tp.field(strconv.Itoa(len(d.Embedding)))
		vals := make([]string, 0, embedValues+1)
		for i, v := range d.Embedding {
			if i == embedValues {
				vals = append(vals, "…")
				break
			}
			vals = append(vals, strconv.FormatFloat(v, 'f', 4, 64))
		}
		tp.field("[" + strings.Join(vals, ", ") + "]")
		tp.endRow()
	}
	return tp.render()
}
