package tracing

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

func TestTracesURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://localhost:4318":            "http://localhost:4318/v1/traces",
		"http://localhost:4318/":           "http://localhost:4318/v1/traces",
		"https://otel.example/otlp":        "https://otel.example/otlp/v1/traces",
		"http://collector:4318/v1/traces":  "http://collector:4318/v1/traces",
		"https://c.example/x/v1/traces?a=": "https://c.example/x/v1/traces?a=",
	} {
		if got, err := TracesURL(in); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"localhost:4318", "grpc://c:4317", "http://", "://x"} {
		if got, err := TracesURL(bad); err == nil {
			t.Errorf("%s: %q, want an error", bad, got)
		}
	}
}

// Off unless a flag or an endpoint variable says otherwise: no tracer,
// nothing to flush.
func TestSetupOff(t *testing.T) {
	env := map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}
	o := Options{Service: "svc-gateway", Getenv: func(k string) string { return env[k] }}
	tr, shutdown, err := Setup(context.Background(), o)
	if tr != nil || err != nil || shutdown(context.Background()) != nil {
		t.Fatalf("tracer %v, err %v", tr, err)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		env := map[string]string{k: "http://localhost:4318"}
		if !(Options{Getenv: func(n string) string { return env[n] }}).Enabled() {
			t.Errorf("%s does not turn tracing on", k)
		}
	}
	if _, _, err := Setup(context.Background(), Options{Endpoint: "localhost:4318"}); err == nil {
		t.Error("a flag without a scheme is taken")
	}
	// The specification's switch turns every signal off, flag or not.
	for _, v := range []string{"true", "TRUE", " true "} {
		env := map[string]string{"OTEL_SDK_DISABLED": v, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"}
		o := Options{Endpoint: "http://c:4318", Getenv: func(k string) string { return env[k] }}
		if tr, _, err := Setup(context.Background(), o); o.Enabled() || tr != nil || err != nil {
			t.Errorf("OTEL_SDK_DISABLED=%q: tracer %v, err %v", v, tr, err)
		}
	}
	env = map[string]string{"OTEL_SDK_DISABLED": "false"}
	if !(Options{Endpoint: "http://c:4318", Getenv: func(k string) string { return env[k] }}).Enabled() {
		t.Error("OTEL_SDK_DISABLED=false turns tracing off")
	}
}

func TestProtocol(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string // "" for an error
	}{
		{nil, ProtocolHTTP},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ProtocolGRPC},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, ProtocolHTTP},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, ProtocolHTTP},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, ProtocolGRPC},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "udp"}, ""},
	} {
		o := Options{Endpoint: "http://c:4317", Getenv: func(k string) string { return tc.env[k] }}
		got, err := o.Protocol()
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("%v: %q %v, want %q", tc.env, got, err, tc.want)
		}
		if _, _, err := Setup(context.Background(), o); (err != nil) != (tc.want == "") {
			t.Errorf("%v: Setup: %v", tc.env, err)
		}
	}
}

// collector is an OTLP/gRPC trace collector on loopback that keeps the
// names of the spans it is sent.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				c.names = append(c.names, sp.GetName())
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// With OTEL_EXPORTER_OTLP_PROTOCOL=grpc the spans go to a gRPC collector.
func TestExportOverGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	env := map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
	o := Options{Endpoint: "http://" + ln.Addr().String(), Service: "svc-gateway", Getenv: func(k string) string { return env[k] }}
	if got := o.Destination(); got != o.Endpoint {
		t.Errorf("destination %q, want %q", got, o.Endpoint)
	}
	tr, shutdown, err := Setup(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Start(context.Background(), "chat m")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.names) != 1 || c.names[0] != "chat m" {
		t.Fatalf("the collector got %q", c.names)
	}
}

// The log names where spans go, however tracing was turned on.
func TestDestination(t *testing.T) {
	for _, tc := range []struct {
		flag string
		env  map[string]string
		want string
	}{
		{"http://c:4318", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318"}, "http://c:4318/v1/traces"},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://g:4318"}, "http://t:4318/custom"},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://g:4318/base/"}, "http://g:4318/base/v1/traces"},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://g:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "http://g:4317"},
		{"http://c:4317", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "http://c:4317"},
		{"", nil, ""},
	} {
		o := Options{Endpoint: tc.flag, Getenv: func(k string) string { return tc.env[k] }}
		if got := o.Destination(); got != tc.want {
			t.Errorf("flag %q env %v: %q, want %q", tc.flag, tc.env, got, tc.want)
		}
	}
}

func TestTraceContextRoundTrip(t *testing.T) {
	const tp, ts = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
	sc := Parent(tp, ts)
	if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() {
		t.Fatalf("%+v", sc)
	}
	if gotTP, gotTS := Context(sc); gotTP != tp || gotTS != ts {
		t.Fatalf("%q %q", gotTP, gotTS)
	}
	for _, bad := range []string{"", "00-xyz", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if sc := Parent(bad, ""); sc.IsValid() {
			t.Errorf("%q read as %+v", bad, sc)
		}
		if tp, ts := Context(Parent(bad, "a=b")); tp != "" || ts != "" {
			t.Errorf("%q passed on as %q %q", bad, tp, ts)
		}
	}
}

func TestSpanName(t *testing.T) {
	if got := SpanName("completion", "m"); got != "text_completion m" {
		t.Error(got)
	}
	if got := SpanName("embeddings", "e5"); got != "embeddings e5" {
		t.Error(got)
	}
}

// An endpoint variable alone turns tracing on, the exporter reading it.
func TestSetupFromEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	tr, shutdown, err := Setup(context.Background(), Options{Service: "svc-worker", Getenv: os.Getenv})
	if tr == nil || err != nil {
		t.Fatalf("tracer %v, err %v", tr, err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
