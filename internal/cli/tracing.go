package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/internal/tracing"
)

func addOTLPFlag(cmd *cobra.Command, endpoint *string) {
	cmd.Flags().StringVar(endpoint, "otlp-endpoint", "", "send OpenTelemetry traces over OTLP/HTTP to this collector, e.g. http://localhost:4318 (/v1/traces is added); off when neither this nor OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set")
}

// startTracing builds the tracer for --otlp-endpoint or the OTEL_
// variables, nil when both are unset. stop flushes the spans still
// batched; it is to run after the last request has ended.
func startTracing(ctx context.Context, f *Factory, endpoint, service string, log *slog.Logger) (trace.Tracer, func(), error) {
	opts := tracing.Options{Endpoint: endpoint, Service: service, Version: f.Build.Version, Getenv: f.Getenv}
	tr, shutdown, err := tracing.Setup(ctx, opts)
	if err != nil {
		return nil, nil, usageError(err)
	}
	if tr != nil {
		log.Info("tracing on", "otlp_endpoint", redactURL(opts.Destination()))
		// The SDK reports a failed export only to its global handler,
		// which otherwise prints plain lines among svc's structured log;
		// there is no per-provider one, so this one global is set, once,
		// at the process's start.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	}
	return tr, func() {
		// The process is exiting, ctx is over: the flush gets its own
		// short deadline, so an unreachable collector cannot hold the exit.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("tracing: flush the last spans", "err", err)
		}
	}, nil
}
