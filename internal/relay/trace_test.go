package relay_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/relay"
)

// A request refused before it ran still gets its span, ended with its
// row: under the client's span, with the error's code and never its
// message, which may quote the prompt. A client's error (4xx) leaves a
// server span's status unset, as the HTTP conventions have it.
func TestRefusedRequestSpan(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	rows := &rowLog{}
	rl := relay.New(relay.Config{Usage: rows, Tracer: tp.Tracer("test")})
	const secret = "my secret prompt"
	rl.Refuse(relay.Request{ID: "req-1", OrgID: org, Kind: api.KindChat, Model: "m",
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		&api.Error{Kind: api.KindInvalidRequest, Code: "context_length_exceeded", Message: "too long: " + secret})
	spans := sr.Ended()
	if len(spans) != 1 || len(rows.rows) != 1 {
		t.Fatalf("%d spans, %d rows", len(spans), len(rows.rows))
	}
	s := spans[0]
	if s.Name() != "chat m" || s.SpanKind() != trace.SpanKindServer || s.Parent().SpanID().String() != "00f067aa0ba902b7" ||
		s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Status().Code != codes.Unset {
		t.Fatalf("span %q kind %v parent %v status %v", s.Name(), s.SpanKind(), s.Parent(), s.Status())
	}
	got := map[string]string{}
	for _, kv := range s.Attributes() {
		got[string(kv.Key)] = kv.Value.String()
		if strings.Contains(kv.Value.String(), secret) || strings.Contains(s.Status().Description, secret) {
			t.Errorf("%s = %q carries the message", kv.Key, kv.Value.String())
		}
	}
	if got["error.type"] != "context_length_exceeded" || got["http.response.status_code"] != "400" ||
		got["svc.request_id"] != "req-1" || got["gen_ai.request.model"] != "m" {
		t.Fatalf("attributes %v", got)
	}
	if _, ok := got["gen_ai.response.model"]; ok {
		t.Fatalf("a refused request has no response model: %v", got)
	}
}

// A model id is the client's to send at any length; the span carries it
// cut as the row does, so a megabyte of it is not exported with each span.
func TestSpanCutsALongModelID(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	rl := relay.New(relay.Config{Usage: &rowLog{}, Tracer: tp.Tracer("test")})
	long := strings.Repeat("m", 1<<20)
	rl.Refuse(relay.Request{ID: "req-1", OrgID: org, Kind: api.KindChat, Model: long},
		&api.Error{Kind: api.KindNotFound, Code: "model_not_found", Message: "no such model"})
	spans := sr.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	want := api.ShortModelID(long)
	if spans[0].Name() != "chat "+want {
		t.Errorf("span name is %d bytes, want %d", len(spans[0].Name()), len("chat "+want))
	}
	for _, kv := range spans[0].Attributes() {
		if kv.Key == "gen_ai.request.model" && kv.Value.AsString() != want {
			t.Errorf("gen_ai.request.model is %d bytes, want %d", len(kv.Value.AsString()), len(want))
		}
	}
}

// A request whose client went has the span the worker's and the
// engine's have, error.type cancelled, and its status unset: the server
// did not fail. A failure of the gateway's own (5xx) is an Error,
// described by the status's text.
func TestFailedRequestSpanStatus(t *testing.T) {
	for _, tc := range []struct {
		err       *api.Error
		status    string
		errorType string
		code      codes.Code
		desc      string
	}{
		{&api.Error{Kind: api.KindClientGone, Message: "Client disconnected"}, "499", "cancelled", codes.Unset, ""},
		{&api.Error{Kind: api.KindUnavailable, Code: api.CodeNoWorkerOnline, Message: "none"}, "503", api.CodeNoWorkerOnline, codes.Error, "Service Unavailable"},
		{&api.Error{Kind: api.KindUpstream, Message: "bad"}, "502", "upstream_error", codes.Error, "Bad Gateway"},
	} {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		rl := relay.New(relay.Config{Usage: &rowLog{}, Tracer: tp.Tracer("test")})
		rl.Refuse(relay.Request{ID: "req-1", OrgID: org, Kind: api.KindChat, Model: "m"}, tc.err)
		spans := sr.Ended()
		if len(spans) != 1 {
			t.Fatalf("%d spans", len(spans))
		}
		got := map[string]string{}
		for _, kv := range spans[0].Attributes() {
			got[string(kv.Key)] = kv.Value.String()
		}
		if st := spans[0].Status(); st.Code != tc.code || st.Description != tc.desc ||
			got["error.type"] != tc.errorType || got["http.response.status_code"] != tc.status {
			t.Errorf("%s: status %+v, attributes %v", tc.status, st, got)
		}
	}
}

// The worker is sent the request's span as the parent of its own, and
// with tracing off no trace context at all, whatever the client sent.
func TestLinkHeaderCarriesTheSpan(t *testing.T) {
	for _, on := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t)
			sr := tracetest.NewSpanRecorder()
			if on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
				h.rl = relay.New(relay.Config{Fleet: h.f, Usage: h.rows, InFlight: h.inflight, Timing: timing, Tracer: tp.Tracer("test")})
			}
			var sent api.LinkRequest
			h.worker("gpu-1", 1, func(ctx context.Context, st *link.Stream, req api.LinkRequest, body []byte) {
				sent = req
				answer("hi", 0)(ctx, st, req, body)
			})
			req := chatRequest("req-1", false)
			req.Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			if _, err := h.rl.Start(req).Unary(); err != nil {
				t.Fatal(err)
			}
			spans := sr.Ended()
			if !on {
				if sent.Traceparent != "" || sent.Tracestate != "" || len(spans) != 0 {
					t.Fatalf("tracing off: header %+v, %d spans", sent, len(spans))
				}
				return
			}
			if len(spans) != 1 {
				t.Fatalf("%d spans", len(spans))
			}
			sc := spans[0].SpanContext()
			if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; sent.Traceparent != want ||
				sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Fatalf("worker sent traceparent %q, want %q", sent.Traceparent, want)
			}
			got := map[string]string{}
			for _, kv := range spans[0].Attributes() {
				got[string(kv.Key)] = kv.Value.String()
			}
			if got["svc.worker.name"] != "gpu-1" || got["gen_ai.usage.input_tokens"] != "7" || got["gen_ai.usage.output_tokens"] != "1" ||
				got["gen_ai.response.finish_reasons"] != `["stop"]` || got["http.response.status_code"] != "200" ||
				spans[0].Status().Code == codes.Error {
				t.Fatalf("attributes %v, status %v", got, spans[0].Status())
			}
		})
	}
}
