package cli

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/internal/tracing"
)

func addOTLPFlag(cmd *cobra.Command, endpoint *string) {
	cmd.Flags().StringVar(endpoint, "otlp-endpoint", "", "send OpenTelemetry traces to this collector, e.g. http://localhost:4318 over OTLP/HTTP (/v1/traces is added), or http://localhost:4317 with OTEL_EXPORTER_OTLP_PROTOCOL=grpc; off when neither this nor OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set, or OTEL_SDK_DISABLED is true")
}

// flushWait bounds the flush of the spans still batched at exit.
const flushWait = 5 * time.Second

// tracesShared is what the tracer providers of one process share: the
// SDK's one global error handler, set by the first, and the deadline of
// their flushes at exit, set by the first to flush, so that two (svc serve
// --demo's gateway and worker) hold the exit no longer than one.
type tracesShared struct {
	mu         sync.Mutex
	handlerSet bool
	flushBy    time.Time
}

// handle reports failed exports to log, unless a provider of the process
// already reports them to its own.
func (t *tracesShared) handle(log *slog.Logger) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.handlerSet {
		return
	}
	t.handlerSet = true
	// The SDK reports a failed export only to its global handler, which
	// otherwise prints plain lines among svc's structured log; there is
	// no per-provider one.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
}

// deadline is when the flushes at exit give up: flushWait after the first
// began.
func (t *tracesShared) deadline(now time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.flushBy.IsZero() {
		t.flushBy = now.Add(flushWait)
	}
	return t.flushBy
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
		proto, _ := opts.Protocol()
		log.Info("tracing on", "otlp_endpoint", redactURL(opts.Destination()), "otlp_protocol", proto)
		f.traces.handle(log)
	}
	return tr, func() {
		// The process is exiting, ctx is over: the flush gets its own
		// short deadline, so an unreachable collector cannot hold the exit.
		sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), f.traces.deadline(time.Now()))
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("tracing: flush the last spans", "err", err)
		}
	}, nil
}
