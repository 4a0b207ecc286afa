package relay

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/tracing"
	"github.com/svc-dev/svc/internal/usage"
)

// startSpan opens the request's span, under the client's span when it
// sent one. It is started here and ended in record because a request's
// usage row is its one end, whichever way it ends: refused, failed, a
// unary answer, a stream the client left.
func (c *Call) startSpan() {
	tr := c.rl.tracer
	if tr == nil {
		return
	}
	// A model id is the client's to send at any length; a span carries
	// it cut as the usage row does.
	model := api.ShortModelID(c.req.Model)
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), tracing.Parent(c.req.Traceparent, c.req.Tracestate))
	_, c.span = tr.Start(ctx, tracing.SpanName(c.req.Kind, model),
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(c.started),
		trace.WithAttributes(
			tracing.OperationName.String(tracing.Operation(c.req.Kind)),
			tracing.RequestModel.String(model),
			tracing.RequestStream.Bool(c.req.Stream),
			tracing.RequestID.String(c.req.ID),
		))
}

// endSpan ends the span with what the usage row says of the request:
// counts, the worker, how it ended. Never text: the row holds none.
func (c *Call) endSpan(o *usage.Outcome, failure error) {
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, tracing.HTTPStatus.Int(o.Status))
	if o.Attempts > 0 {
		attrs = append(attrs, tracing.Attempts.Int(o.Attempts))
	}
	if o.WorkerID != "" {
		attrs = append(attrs, tracing.WorkerID.String(o.WorkerID), tracing.WorkerName.String(o.WorkerName))
	}
	if u := o.Usage; u != nil {
		attrs = append(attrs, tracing.InputTokens.Int(u.PromptTokens), tracing.OutputTokens.Int(u.CompletionTokens))
		if o.Estimated {
			attrs = append(attrs, tracing.UsageEstimated.Bool(true))
		}
	}
	// One a choice, in index order, as the attribute is defined.
	var finishes []string
	c.eachChoice(func(ch *choiceOutcome) {
		if ch.finish != "" {
			finishes = append(finishes, ch.finish)
		}
	})
	if len(finishes) == 0 && c.res != nil && c.res.FinishReason != "" {
		finishes = []string{c.res.FinishReason}
	}
	if len(finishes) > 0 {
		attrs = append(attrs, tracing.FinishReasons.StringSlice(finishes))
	}
	if failure == nil {
		// The gateway answers under the name the client asked for,
		// whatever the worker's engine calls the model.
		attrs = append(attrs, tracing.ResponseModel.String(api.ShortModelID(c.req.Model)))
	} else {
		// The code, not the message: an engine's message may quote the
		// prompt.
		ae := api.ErrorOf(failure)
		kind := ae.Code
		switch {
		case kind != "":
		case ae.Kind == api.KindClientGone:
			kind = "cancelled" // as the worker's and the engine's spans say
		default:
			kind = ae.ErrorType()
		}
		attrs = append(attrs, tracing.ErrorType.String(kind))
		// A server span's status is an Error for a failure of the
		// server's own (5xx), as the HTTP conventions have it: a refused
		// or cancelled request was answered as it should be, and
		// error.type says why.
		if o.Status >= http.StatusInternalServerError {
			c.span.SetStatus(codes.Error, tracing.StatusText(o.Status))
		}
	}
	c.span.SetAttributes(attrs...)
	c.span.End(trace.WithTimestamp(o.Ended))
}
