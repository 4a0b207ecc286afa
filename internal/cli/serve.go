package cli

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/server"
)

// ServeOptions are the flags of `svc serve`.
type ServeOptions struct {
	Addr         string
	DataDir      string
	DrainTimeout time.Duration
	LogLevel     string
	LogFormat    string
}

// NewCmdServe builds `svc serve`; runF replaces the server in tests.
func NewCmdServe(f *Factory, runF func(context.Context, *ServeOptions) error) *cobra.Command {
	opts := &ServeOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Long: `Run the OpenAI-compatible gateway on --addr, with its database and admin
socket in the data directory.

On first start with an empty data directory it creates the organisation
'default' (plan pro) with owner 'admin', writes an unrestricted API key to
<data>/admin.key and a worker token to <data>/worker.token (both mode 0600),
and prints the key once. Later starts reuse them.

SIGINT or SIGTERM stops accepting connections, lets in-flight requests finish
for up to --drain-timeout, then closes the database.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := applyEnv(cmd, f.Getenv,
				envFlag{"addr", "SVC_ADDR"}, envFlag{"data", "SVC_DATA"},
				envFlag{"drain-timeout", "SVC_DRAIN_TIMEOUT"},
				envFlag{"log-level", "SVC_LOG_LEVEL"}, envFlag{"log-format", "SVC_LOG_FORMAT"})
			if err != nil {
				return err
			}
			if opts.DataDir, err = resolveDataDir(opts.DataDir, f.Getenv); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runServe(cmd.Context(), f, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Addr, "addr", "127.0.0.1:8080", "address to listen on (env SVC_ADDR)")
	fl.StringVar(&opts.DataDir, "data", "", dataFlagHelp)
	fl.DurationVar(&opts.DrainTimeout, "drain-timeout", 30*time.Second, "how long in-flight requests may take to finish on shutdown (env SVC_DRAIN_TIMEOUT)")
	fl.StringVar(&opts.LogLevel, "log-level", "info", "debug, info, warn or error (env SVC_LOG_LEVEL)")
	fl.StringVar(&opts.LogFormat, "log-format", "auto", "text, json, or auto: text on a terminal, JSON otherwise (env SVC_LOG_FORMAT)")
	return cmd
}

func runServe(ctx context.Context, f *Factory, opts *ServeOptions) error {
	log, err := newLogger(f.IO.ErrOut, f.IO.IsStderrTTY(), opts.LogLevel, opts.LogFormat)
	if err != nil {
		return err
	}
	return server.Run(ctx, server.Config{
		Addr:         opts.Addr,
		DataDir:      opts.DataDir,
		DrainTimeout: opts.DrainTimeout,
		Build:        f.Build,
		Logger:       log,
	})
}

// newLogger logs text to a terminal and JSON to anything else.
func newLogger(w io.Writer, tty bool, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErrorf("invalid --log-level %q: use debug, info, warn or error", level)
	}
	hopts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	case "auto", "":
		if tty {
			return slog.New(slog.NewTextHandler(w, hopts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, usageErrorf("invalid --log-format %q: use text, json or auto", format)
}

// noArgs refuses positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// exactArgs wants n positional arguments, named in the Use line.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %d argument(s), got %d: %s", cmd.CommandPath(), n, len(args), cmd.Use)
		}
		return nil
	}
}

// minArgs wants at least n positional arguments.
func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErrorf("%s takes at least %d argument(s): %s", cmd.CommandPath(), n, cmd.Use)
		}
		return nil
	}
}
