package worker

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/internal/api"
)

// A result's status is an Error on the engine call's client span for any
// failure, and on the worker's server span for its own (5xx) only, as the
// HTTP conventions have it; error.type says why either way.
func TestResultSpanStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		kind   trace.SpanKind
		want   codes.Code
	}{
		{http.StatusOK, trace.SpanKindServer, codes.Unset},
		{http.StatusBadRequest, trace.SpanKindServer, codes.Unset},
		{499, trace.SpanKindServer, codes.Unset},
		{http.StatusBadGateway, trace.SpanKindServer, codes.Error},
		{http.StatusBadRequest, trace.SpanKindClient, codes.Error},
		{http.StatusServiceUnavailable, trace.SpanKindClient, codes.Error},
	} {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		_, span := tp.Tracer("test").Start(context.Background(), "chat m", trace.WithSpanKind(tc.kind))
		res := &api.Result{Status: tc.status}
		if tc.status != http.StatusOK {
			res.Error = &api.ResultError{Type: "invalid_request_error"}
		}
		resultAttributes(span, res, tc.kind)
		span.End()
		s := sr.Ended()[0]
		hasType := false
		for _, kv := range s.Attributes() {
			hasType = hasType || kv.Key == "error.type"
		}
		if s.Status().Code != tc.want || hasType != (tc.status != http.StatusOK) {
			t.Errorf("%d on a %v span: status %+v, error.type %v", tc.status, tc.kind, s.Status(), hasType)
		}
	}
}
