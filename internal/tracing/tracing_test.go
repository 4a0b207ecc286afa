package tracing

import (
	"context"
	"os"
	"testing"
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
