// Package tracing sets up OpenTelemetry traces for svc serve and svc
// worker, off unless an OTLP endpoint is given, and holds what the
// gateway, the relay and the worker share about their spans: the names,
// the GenAI attributes and the W3C trace context carried on the link.
//
// Nothing here sets OpenTelemetry's global provider or propagator: the
// tracer is passed to what makes spans, and a nil tracer means tracing is
// off, so a request pays for no span, not even a no-op one.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/internal/api"
)

// ScopeName is the instrumentation scope of svc's spans.
const ScopeName = "github.com/svc-dev/svc"

// Options configure Setup.
type Options struct {
	// Endpoint is --otlp-endpoint: the collector's OTLP/HTTP base URL
	// (http://host:4318), to which /v1/traces is added, or a URL already
	// ending in /v1/traces. "" leaves it to the OTEL_EXPORTER_OTLP_*
	// variables; with neither, tracing is off.
	Endpoint string
	// Service is service.name when OTEL_SERVICE_NAME does not set it.
	Service string
	Version string
	// Getenv reads the environment; nil is os.Getenv.
	Getenv func(string) string
}

func (o Options) getenv(k string) string {
	if o.Getenv == nil {
		return os.Getenv(k)
	}
	return o.Getenv(k)
}

// Enabled reports whether o turns tracing on: a flag, or one of the
// standard endpoint variables the exporter reads, unless
// OTEL_SDK_DISABLED is true, which the specification has turn every
// signal off.
func (o Options) Enabled() bool {
	if strings.EqualFold(strings.TrimSpace(o.getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return o.Endpoint != "" || o.getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || o.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// The OTLP transports, as OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL names them.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Protocol is the OTLP transport the variables ask for, http/protobuf by
// default as the specification has it. OpenTelemetry's Go SDK has no
// http/json exporter, so that and any other value are an error rather
// than spans sent in a form the collector did not ask for.
func (o Options) Protocol() (string, error) {
	p := strings.TrimSpace(o.getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if p == "" {
		p = strings.TrimSpace(o.getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch p {
	case "", ProtocolHTTP:
		return ProtocolHTTP, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	}
	return "", fmt.Errorf("OTLP protocol %q is not supported: use %s (the default) or %s", p, ProtocolHTTP, ProtocolGRPC)
}

// Destination is where spans go, for the log, as the exporter resolves
// it: the flag, else the traces variable as it is, else the general one,
// with /v1/traces added over HTTP; "" with tracing off.
func (o Options) Destination() string {
	grpc := false
	if p, err := o.Protocol(); err == nil && p == ProtocolGRPC {
		grpc = true
	}
	if o.Endpoint != "" {
		if grpc {
			return o.Endpoint
		}
		u, _ := TracesURL(o.Endpoint)
		return u
	}
	if v := o.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		return v
	}
	if v := o.getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		if grpc {
			return v
		}
		return strings.TrimSuffix(v, "/") + "/v1/traces"
	}
	return ""
}

// Setup starts the exporter and returns the tracer spans are made with
// and the shutdown that flushes what is batched; it is to be called on
// exit. Tracing off is a nil tracer and a shutdown that does nothing.
// The SDK reads the rest of its settings from the standard variables
// itself: OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*, OTEL_EXPORTER_OTLP_HEADERS
// and the like.
func Setup(ctx context.Context, o Options) (trace.Tracer, func(context.Context) error, error) {
	none := func(context.Context) error { return nil }
	if !o.Enabled() {
		return nil, none, nil
	}
	exp, err := o.exporter(ctx)
	if err != nil {
		return nil, none, err
	}
	// The variables win over the defaults, as the specification has it:
	// merging puts the second resource's values over the first's.
	res, err := resource.Merge(resource.NewSchemaless(
		attribute.String("service.name", o.Service),
		attribute.String("service.version", o.Version),
	), resource.Environment())
	if err != nil {
		// A malformed OTEL_RESOURCE_ATTRIBUTES is partly read; the rest
		// is no reason to run without traces.
		res = resource.NewSchemaless(attribute.String("service.name", o.Service))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp.Tracer(ScopeName), tp.Shutdown, nil
}

// exporter is the OTLP exporter of the protocol asked for, sending to
// the flag's endpoint or, without one, where the variables it reads say.
func (o Options) exporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	proto, err := o.Protocol()
	if err != nil {
		return nil, err
	}
	if proto == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if o.Endpoint != "" {
			if err := checkGRPCEndpoint(o.Endpoint); err != nil {
				return nil, err
			}
			// An http:// endpoint is a collector without TLS.
			opts = append(opts, otlptracegrpc.WithEndpointURL(o.Endpoint))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	if o.Endpoint != "" {
		u, err := TracesURL(o.Endpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	}
	return otlptracehttp.New(ctx, opts...)
}

// checkGRPCEndpoint checks an --otlp-endpoint for OTLP/gRPC: an http(s)
// URL of the collector's host and port.
func checkGRPCEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("--otlp-endpoint must be an http(s) URL, such as http://localhost:4317 for OTLP/gRPC")
	}
	return nil
}

// TracesURL is the URL spans are posted to for an --otlp-endpoint.
func TracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("--otlp-endpoint must be an http(s) URL, such as http://localhost:4318")
	}
	if !strings.HasSuffix(u.Path, "/v1/traces") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}

// Parent is the span context in a traceparent and tracestate, or an
// invalid one when they are absent or malformed.
func Parent(traceparent, tracestate string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	c := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		c["tracestate"] = tracestate
	}
	// The W3C propagator itself, not the global one, which svc never sets.
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c))
}

// Context is the traceparent and tracestate that make a span the parent.
func Context(sc trace.SpanContext) (traceparent, tracestate string) {
	if !sc.IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c["traceparent"], c["tracestate"]
}

// Operation is gen_ai.operation.name for a link kind: the GenAI
// conventions' names where they have one, svc's kind otherwise.
func Operation(kind string) string {
	if kind == api.KindCompletion {
		return "text_completion"
	}
	return kind
}

// SpanName is a GenAI span's name: the operation, then the model.
func SpanName(kind, model string) string {
	return Operation(kind) + " " + model
}

// statusClientClosed is nginx's status for a request whose client went
// before its answer, which the usage log records.
const statusClientClosed = 499

// StatusText describes a failed span's status: the HTTP status text, and
// for the 499 of a client that went, which has none, nginx's name for it.
func StatusText(status int) string {
	if status == statusClientClosed {
		return "Client Closed Request"
	}
	return http.StatusText(status)
}

// The attribute keys svc sets; the gen_ai ones are the GenAI semantic
// conventions', the rest svc's own. None carries prompt or reply text.
const (
	OperationName  = attribute.Key("gen_ai.operation.name")
	RequestModel   = attribute.Key("gen_ai.request.model")
	ResponseModel  = attribute.Key("gen_ai.response.model")
	InputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	OutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	FinishReasons  = attribute.Key("gen_ai.response.finish_reasons")
	RequestStream  = attribute.Key("gen_ai.request.stream")
	HTTPStatus     = attribute.Key("http.response.status_code")
	ErrorType      = attribute.Key("error.type")
	RequestID      = attribute.Key("svc.request_id")
	WorkerID       = attribute.Key("svc.worker.id")
	WorkerName     = attribute.Key("svc.worker.name")
	Attempts       = attribute.Key("svc.attempts")
	UsageEstimated = attribute.Key("svc.usage.estimated")
	Engine         = attribute.Key("svc.engine")
)
