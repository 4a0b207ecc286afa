package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/svc-dev/svc/internal/buildinfo"
)

func versionLine(b buildinfo.Info) string {
	return fmt.Sprintf("svc %s (commit %s, %s)", b.Version, b.ShortCommit(), b.Go)
}

// NewCmdVersion builds `svc version`.
func NewCmdVersion(f *Factory) *cobra.Command {
	var exp Exporter
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := exp.Prepare(); err != nil {
				return err
			}
			if exp.Enabled() {
				return exp.Write(f.IO.Out, f.Build)
			}
			_, err := fmt.Fprintln(f.IO.Out, versionLine(f.Build))
			return err
		},
	}
	exp.AddFlags(cmd, false)
	return cmd
}

// NewCmdMan builds `svc man`, which writes a man page per command.
func NewCmdMan(f *Factory) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "man",
		Short: "Generate man pages",
		Long: `Write a man page for every command into --dir (svc.1, svc-serve.1, ...).
The page date comes from SOURCE_DATE_EPOCH when it is set.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			return GenManPages(cmd.Root(), dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "man", "directory to write the pages into")
	return cmd
}

// GenManPages writes one page per visible command into dir.
func GenManPages(root *cobra.Command, dir string) error {
	escapeForMan(root)
	header := &doc.GenManHeader{Title: strings.ToUpper(root.Name()), Section: "1", Source: "svc", Manual: "svc manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return fmt.Errorf("generate man pages: %w", err)
	}
	return nil
}

// escapeForMan keeps a placeholder such as <data> in the pages: their
// text is rendered as Markdown, which takes it for an HTML tag and drops
// it. Examples go in code blocks, where it shows as written. It changes
// the commands' texts, so the tree is then good for the pages alone.
func escapeForMan(c *cobra.Command) {
	esc := func(s string) string { return strings.ReplaceAll(s, "<", `\<`) }
	c.Short, c.Long = esc(c.Short), esc(c.Long)
	c.Flags().VisitAll(func(f *pflag.Flag) { f.Usage = esc(f.Usage) })
	c.PersistentFlags().VisitAll(func(f *pflag.Flag) { f.Usage = esc(f.Usage) })
	for _, sub := range c.Commands() {
		escapeForMan(sub)
	}
}
