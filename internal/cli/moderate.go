package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
	"github.com/svc-dev/svc/internal/moderation"
)

// ModerateOptions are the arguments and flags of `svc moderate`.
type ModerateOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter

	Model         string // "" leaves it to the organisation's moderation_model
	Inputs        []string
	Images        []string // data: or https URLs, checked with the texts as one input
	FailOnFlagged bool
}

// NewCmdModerate builds `svc moderate`.
func NewCmdModerate(f *Factory, runF func(*ModerateOptions) error) *cobra.Command {
	opts := &ModerateOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "moderate [TEXT...]",
		Short: "Check texts (and images) with a moderation model",
		Long: `Check each TEXT, or without TEXT each non-empty line of stdin, with a
moderation model, and print a verdict a line: flagged or not, and the
categories flagged with their scores (0.5 is a borderline verdict). With
--image, the texts and images are checked together as one input.

Without --model the organisation's moderation_model checks, as for any
request that names none (svc admin settings). The exit status is
0 whatever the verdicts, unless --fail-on-flagged makes a flagged input end
with status 3. --json prints the gateway's reply; --jq filters it.

` + clientHelp,
		Example: `  svc moderate "How do I bake bread?" "How do I make a bomb?"
  svc moderate --model guard-c:4b --image data:image/png;base64,iVBOR... "caption"
  git log --format=%s | svc moderate --fail-on-flagged --jq '.results[].flagged'`,
		GroupID: groupClient,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Inputs = args
			if len(args) == 0 && !opts.IO.IsStdinTTY() {
				sc := bufio.NewScanner(opts.IO.In)
				sc.Buffer(make([]byte, 64<<10), 4<<20)
				for sc.Scan() {
					if line := strings.TrimRight(sc.Text(), "\r"); strings.TrimSpace(line) != "" {
						opts.Inputs = append(opts.Inputs, line)
					}
				}
				if err := sc.Err(); err != nil {
					return fmt.Errorf("read inputs from stdin: %w", err)
				}
			}
			n := len(opts.Inputs) + len(opts.Images)
			switch {
			case n == 0:
				return usageErrorf("nothing to check: give TEXT arguments, --image, or lines on stdin")
			case n > api.ModerationMaxInputs:
				return usageErrorf("at most %d inputs go in one check, got %d", api.ModerationMaxInputs, n)
			}
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, moderateRun(cmd.Context(), opts))
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Model, "model", "m", "", "moderation model (default: the organisation's moderation_model)")
	fl.StringArrayVar(&opts.Images, "image", nil, "an image to check with the texts: a data: URL, or an https URL if the organisation allows them")
	fl.BoolVar(&opts.FailOnFlagged, "fail-on-flagged", false, "exit with status 3 when any input is flagged")
	_ = cmd.RegisterFlagCompletionFunc("model", completeModels(f, api.CapModeration))
	AddClientFlags(cmd)
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

func moderateRun(ctx context.Context, opts *ModerateOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	var input any = opts.Inputs
	labels := opts.Inputs
	if len(opts.Images) > 0 {
		var parts []map[string]any
		for _, t := range opts.Inputs {
			parts = append(parts, map[string]any{"type": "text", "text": t})
		}
		for _, u := range opts.Images {
			parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": u}})
		}
		input = parts
		labels = []string{fmt.Sprintf("%d texts and %d images", len(opts.Inputs), len(opts.Images))}
	}
	body := map[string]any{"input": input}
	if opts.Model != "" {
		body["model"] = opts.Model
	}
	raw, err := c.Moderate(ctx, body)
	if err != nil {
		return err
	}
	var reply struct {
		Results []api.ModerationResult `json:"results"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return fmt.Errorf("decode the reply: %w", err)
	}
	flagged := slices.ContainsFunc(reply.Results, func(r api.ModerationResult) bool { return r.Flagged })
	if opts.Exporter.Enabled() {
		if err := opts.Exporter.Write(opts.IO.Out, raw); err != nil {
			return err
		}
	} else if err := printVerdicts(opts.IO, labels, reply.Results); err != nil {
		return err
	}
	if flagged && opts.FailOnFlagged {
		return exitStatus(exitFlagged)
	}
	return nil
}

// printVerdicts is a table of verdicts: input, flagged, and the flagged
// categories with their scores.
func printVerdicts(ios *iostreams.IOStreams, labels []string, results []api.ModerationResult) error {
	tp := newTablePrinter(ios, "INPUT", "FLAGGED", "CATEGORIES")
	tp.shrinkable("INPUT")
	for i, r := range results {
		label := ""
		if i < len(labels) {
			label = labels[i]
		}
		var cats []string
		for _, c := range moderation.FlaggedCategories(r) {
			cats = append(cats, fmt.Sprintf("%s (%.1f)", c, r.CategoryScores[c]))
		}
		verdict, list := "no", "—"
		if r.Flagged {
			verdict = "yes"
		}
		if len(cats) > 0 {
			list = strings.Join(cats, ", ")
		}
		tp.field(label)
		tp.field(verdict)
		tp.field(list)
		tp.endRow()
	}
	return tp.render()
}
