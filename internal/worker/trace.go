package worker

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/tracing"
)

// startSpan opens the span of a request the worker serves, a child of
// the gateway's span named in the link header. Tracing off, it is nil and
// ctx is unchanged.
func (a *Agent) startSpan(ctx context.Context, req *api.LinkRequest) (context.Context, trace.Span) {
	tr := a.cfg.Tracer
	if tr == nil {
		return ctx, nil
	}
	ctx = trace.ContextWithRemoteSpanContext(ctx, tracing.Parent(req.Traceparent, req.Tracestate))
	return tr.Start(ctx, tracing.SpanName(req.Kind, req.Model), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			tracing.OperationName.String(tracing.Operation(req.Kind)),
			tracing.RequestModel.String(req.Model),
			tracing.RequestStream.Bool(req.Stream),
			tracing.RequestID.String(req.RequestID),
			tracing.WorkerName.String(a.cfg.Name),
		))
}

// endSpan ends a request's span with its result; a nil span is tracing
// off. model is the name the worker answered under.
func endSpan(span trace.Span, res *api.Result, model string) {
	if span == nil {
		return
	}
	if res != nil && res.Status == http.StatusOK {
		span.SetAttributes(tracing.ResponseModel.String(model))
	}
	resultAttributes(span, res, trace.SpanKindServer)
	span.End()
}

// resultAttributes puts on span, of spanKind, what a result says of a
// request: counts and how it ended. Never an error's message: an engine's
// may quote the prompt. As the HTTP conventions have it, a client's
// error (4xx) is an Error on a client span, the engine call, but not on a
// server span, the worker's, whose request was answered as it should be.
func resultAttributes(span trace.Span, res *api.Result, spanKind trace.SpanKind) {
	if res == nil {
		span.SetStatus(codes.Error, "no result")
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, tracing.HTTPStatus.Int(res.Status))
	if u := res.Usage; u != nil {
		attrs = append(attrs, tracing.InputTokens.Int(u.PromptTokens), tracing.OutputTokens.Int(u.CompletionTokens))
	}
	if res.FinishReason != "" {
		attrs = append(attrs, tracing.FinishReasons.StringSlice([]string{res.FinishReason}))
	}
	if res.Status != http.StatusOK {
		kind := tracing.StatusText(res.Status)
		if res.Error != nil && res.Error.Type != "" {
			kind = res.Error.Type
		}
		attrs = append(attrs, tracing.ErrorType.String(kind))
		if res.Status >= http.StatusInternalServerError || spanKind == trace.SpanKindClient {
			span.SetStatus(codes.Error, tracing.StatusText(res.Status))
		}
	}
	span.SetAttributes(attrs...)
}

// tracedEngine puts a client span around each call to an engine.
type tracedEngine struct {
	engine.Engine
	tracer trace.Tracer
}

func (t tracedEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	ctx, span := t.tracer.Start(ctx, tracing.SpanName(req.Kind, req.Model), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			tracing.OperationName.String(tracing.Operation(req.Kind)),
			tracing.RequestModel.String(req.Model),
			tracing.RequestStream.Bool(req.Stream),
			tracing.Engine.String(t.Kind()),
		))
	res := t.Engine.Serve(ctx, req, sink)
	if res != nil && res.Status == http.StatusOK {
		span.SetAttributes(tracing.ResponseModel.String(req.Model))
	}
	resultAttributes(span, res, trace.SpanKindClient)
	span.End()
	return res
}
