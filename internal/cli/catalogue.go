package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
)

// CatalogueOptions are the flags of `svc catalogue` and `svc catalogue
// models`.
type CatalogueOptions struct {
	IO        *iostreams.IOStreams
	APIClient func() (*client.Client, error)
	Exporter  Exporter
}

// NewCmdCatalogue builds `svc catalogue` (the GPUs) and its `models`
// subcommand; runF replaces the list in tests. The models are a command of
// their own rather than a flag so that each command prints one document of
// one shape with --json.
func NewCmdCatalogue(f *Factory, runF func(*CatalogueOptions) error) *cobra.Command {
	opts := &CatalogueOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:     "catalogue",
		Aliases: []string{"catalog"},
		Short:   "List the GPUs that can be rented, with prices per tier",
		Long: `List the GPUs the gateway can rent, one row per GPU and jurisdiction tier: the
GPU's id (what 'svc rent' takes), label, memory per GPU and GPU count; then
the tier's id (what --tier takes), the price per hour in pounds, whether it has
capacity now (a best-effort signal), whether the organisation's jurisdiction
floor allows it, and the most system memory a machine in the tier has.

'svc catalogue models' lists the models a rental can install while it boots.
Needs a key with the compute:write permission.

` + clientHelp,
		Example: `  svc catalogue
  svc catalogue --jq '.[] | select(any(.tiers[]; .allowed and .available)) | .gpu_model_id'
  svc catalogue models`,
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
			return f.explainAPIError(cmd, computeError(catalogueRun(cmd.Context(), opts), false))
		},
	}
	AddClientFlags(cmd)
	opts.Exporter.AddFlags(cmd, false)
	cmd.AddCommand(NewCmdCatalogueModels(f, nil))
	return cmd
}

func catalogueRun(ctx context.Context, opts *CatalogueOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	gpus, err := c.Catalogue(ctx)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, gpus)
	}
	tty := opts.IO.IsStdoutTTY()
	if len(gpus) == 0 && tty {
		_, err := fmt.Fprintln(opts.IO.Out, "No GPUs can be rented now.")
		return err
	}
	tp := newTablePrinter(opts.IO, "GPU", "LABEL", "VRAM", "COUNT", "TIER", "PRICE/H", "AVAILABLE", "ALLOWED", "MAX RAM")
	tp.shrinkable("LABEL")
	cs := tp.cs
	for _, g := range gpus {
		gpuFields := func(first bool) {
			// A person reads a GPU's tiers as a group under it; a script
			// reading the lines wants every one whole.
			cols := []string{g.GPUModelID, dash(g.Label), fmtGB(g.VRAMGB), strconv.Itoa(g.GPUCount)}
			for _, c := range cols {
				if !first && tty {
					c = ""
				}
				tp.field(c)
			}
		}
		if len(g.Tiers) == 0 {
			gpuFields(true)
			tp.row("-", "-", "no", "-", "-")
			continue
		}
		for i, t := range g.Tiers {
			gpuFields(i == 0)
			tp.field(t.TierID)
			tp.field(fmtGBP(t.PricePerHourGBP))
			if t.Available {
				tp.field("yes", cs.green)
			} else {
				tp.field("no", cs.yellow)
			}
			if t.Allowed {
				tp.field("yes")
			} else {
				tp.field("no", cs.red)
			}
			if t.MaxRAMGB != nil {
				tp.field(fmtGB(*t.MaxRAMGB))
			} else {
				tp.field("-")
			}
			tp.endRow()
		}
	}
	return tp.render()
}

// NewCmdCatalogueModels builds `svc catalogue models`.
func NewCmdCatalogueModels(f *Factory, runF func(*CatalogueOptions) error) *cobra.Command {
	opts := &CatalogueOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List the models a rental can install, one row per variant",
		Long: `List the models a rental can install while it boots ('svc rent --model'), one
row per variant: the variant's id (what --model takes), the model's name, its
size and quantisation, the GPU memory it needs to run wholly on one GPU, the
system memory it needs when part of it stays in system memory (compare the
tier's MAX RAM in 'svc catalogue'), and how much an install downloads. DEFAULT
marks each model's default variant.`,
		Example: `  svc catalogue models
  svc catalogue models --jq '.[].variants[] | select(.min_vram_gb <= 24) | .variant_id'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			opts.APIClient = f.apiClientFunc(cmd)
			if runF != nil {
				return runF(opts)
			}
			return f.explainAPIError(cmd, computeError(catalogueModelsRun(cmd.Context(), opts), false))
		},
	}
	opts.Exporter.AddFlags(cmd, false)
	return cmd
}

func catalogueModelsRun(ctx context.Context, opts *CatalogueOptions) error {
	c, err := opts.APIClient()
	if err != nil {
		return err
	}
	models, err := c.RentableModels(ctx)
	if err != nil {
		return err
	}
	if opts.Exporter.Enabled() {
		return opts.Exporter.Write(opts.IO.Out, models)
	}
	tp := newTablePrinter(opts.IO, "VARIANT", "MODEL", "PUBLISHER", "SIZE", "QUANT", "MIN VRAM", "MIN RAM", "DOWNLOAD", "DEFAULT")
	tp.shrinkable("MODEL", "PUBLISHER")
	for _, m := range models {
		for _, v := range m.Variants {
			tp.field(v.VariantID)
			tp.field(dash(m.Name))
			tp.field(dash(m.Publisher))
			tp.field(dash(v.ParameterSize))
			tp.field(dash(v.Quantization))
			tp.field(fmtGB(v.MinVRAMGB))
			if v.MinRAMGB != nil {
				tp.field(fmtGB(*v.MinRAMGB))
			} else {
				tp.field("-")
			}
			if v.DownloadGB > 0 {
				tp.field(fmtGB(v.DownloadGB))
			} else {
				tp.field("-")
			}
			if v.VariantID == m.DefaultVariantID {
				tp.field("yes")
			} else {
				tp.field("-")
			}
			tp.endRow()
		}
	}
	return tp.render()
}
