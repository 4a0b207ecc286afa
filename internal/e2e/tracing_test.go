package e2e

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/svc-dev/svc/internal/harness"
)

// otlpSpan is a received span with its process's service.name.
type otlpSpan struct {
	service string
	span    *tracepb.Span
}

// otlpReceiver is an OTLP/HTTP trace collector: what svc exports to it is
// decoded from the protobuf the exporter sends.
type otlpReceiver struct {
	t     *testing.T
	srv   *httptest.Server
	mu    sync.Mutex
	spans []otlpSpan
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{t: t}
	r.srv = httptest.NewServer(http.HandlerFunc(r.export))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) export(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &msg)
	}
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		r.t.Errorf("export to %s (%s): %v", req.URL.Path, req.Header.Get("Content-Type"), err)
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, otlpSpan{service, s})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// wait returns the spans once one of each (service, kind) in want has come.
func (r *otlpReceiver) wait(want ...string) []otlpSpan {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r.mu.Lock()
		got := append([]otlpSpan(nil), r.spans...)
		r.mu.Unlock()
		seen := map[string]bool{}
		for _, s := range got {
			seen[s.service+" "+s.span.Kind.String()] = true
		}
		all := true
		for _, w := range want {
			all = all && seen[w]
		}
		if all {
			return got
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("spans %v after 15s, want %v", seen, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func attrs(s *tracepb.Span) map[string]*commonpb.AnyValue {
	m := map[string]*commonpb.AnyValue{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// A chat through real svc serve --otlp-endpoint and svc worker
// --otlp-endpoint processes is one trace: the client's span, the
// gateway's server span under it, the worker's under that, and the engine
// call's client span under the worker's; GenAI attributes on them, the
// prompt and reply in none.
func TestTracing(t *testing.T) {
	rec := newOTLPReceiver(t)
	env := []string{"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=", "OTEL_TRACES_SAMPLER=",
		"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="}
	s := startServerEnv(t, "", env, "--otlp-endpoint", rec.srv.URL)
	p, err := harness.StartWorker(harness.WorkerSpec{
		Spec:   harness.Spec{Bin: "svc", Env: env, KeepLog: true, Args: []string{"--engine", "sim=tps=0,ttft=0", "--otlp-endpoint", rec.srv.URL}},
		Worker: "sim-box", Gateway: s.URL, TokenFile: s.tokenFile(),
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &workerProc{child: adopt(t, p), Worker: "sim-box"}
	w.waitLog("connected to the gateway", 15*time.Second)
	key := s.adminKey()

	const prompt = "the-quokka-sings-at-dawn-7731"
	traceID, clientSpan := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := s.do("POST", "/v1/chat/completions",
		`{"model":"sim-chat","max_tokens":12,"messages":[{"role":"user","content":"`+prompt+`"}]}`,
		bearer(key), header{"traceparent", "00-" + traceID + "-" + clientSpan + "-01"}, header{"tracestate", "client=1"})
	if r.Status != http.StatusOK {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	var reply struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(r.Body, &reply); err != nil || len(reply.Choices) != 1 {
		t.Fatalf("reply %s %v", r.Body, err)
	}
	requestID := r.Header.Get("X-Request-Id")

	spans := rec.wait("svc-gateway SPAN_KIND_SERVER", "svc-worker SPAN_KIND_SERVER", "svc-worker SPAN_KIND_CLIENT")
	one := func(service string, kind tracepb.Span_SpanKind) *tracepb.Span {
		t.Helper()
		var found *tracepb.Span
		for _, s := range spans {
			if s.service == service && s.span.Kind == kind {
				if found != nil {
					t.Fatalf("two %s %s spans", service, kind)
				}
				found = s.span
			}
		}
		return found
	}
	gw, wk, eng := one("svc-gateway", tracepb.Span_SPAN_KIND_SERVER), one("svc-worker", tracepb.Span_SPAN_KIND_SERVER),
		one("svc-worker", tracepb.Span_SPAN_KIND_CLIENT)
	id := hex.EncodeToString
	for _, c := range []struct {
		name         string
		span         *tracepb.Span
		parent       string
		traceState   string
		wantTraceID  string
		wantSpanName string
	}{
		{"gateway", gw, clientSpan, "client=1", traceID, "chat sim-chat"},
		{"worker", wk, id(gw.SpanId), "client=1", traceID, "chat sim-chat"},
		{"engine", eng, id(wk.SpanId), "client=1", traceID, "chat sim-chat"},
	} {
		if id(c.span.TraceId) != c.wantTraceID || id(c.span.ParentSpanId) != c.parent || c.span.Name != c.wantSpanName ||
			c.span.TraceState != c.traceState {
			t.Errorf("%s span %q: trace %s parent %s state %q, want trace %s parent %s", c.name, c.span.Name,
				id(c.span.TraceId), id(c.span.ParentSpanId), c.span.TraceState, c.wantTraceID, c.parent)
		}
		if c.span.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("%s span failed: %v", c.name, c.span.Status)
		}
		a := attrs(c.span)
		if a["gen_ai.operation.name"].GetStringValue() != "chat" || a["gen_ai.request.model"].GetStringValue() == "" ||
			a["gen_ai.response.model"].GetStringValue() == "" || a["http.response.status_code"].GetIntValue() != 200 ||
			a["gen_ai.usage.output_tokens"].GetIntValue() != reply.Usage.CompletionTokens ||
			a["gen_ai.usage.input_tokens"].GetIntValue() != reply.Usage.PromptTokens ||
			len(a["gen_ai.response.finish_reasons"].GetArrayValue().GetValues()) != 1 {
			t.Errorf("%s span attributes %v, usage %+v", c.name, c.span.Attributes, reply.Usage)
		}
	}
	if a := attrs(gw); a["svc.request_id"].GetStringValue() != requestID || a["svc.worker.name"].GetStringValue() != "sim-box" ||
		a["svc.worker.id"].GetStringValue() != r.Header.Get("X-Worker-Id") || a["gen_ai.response.model"].GetStringValue() != "sim-chat" {
		t.Errorf("gateway span attributes %v", gw.Attributes)
	}
	if a := attrs(wk); a["svc.request_id"].GetStringValue() != requestID || a["svc.worker.name"].GetStringValue() != "sim-box" {
		t.Errorf("worker span attributes %v", wk.Attributes)
	}
	if a := attrs(eng); a["svc.engine"].GetStringValue() != "sim" {
		t.Errorf("engine span attributes %v", eng.Attributes)
	}
	// Neither the prompt nor the reply in any attribute of any span.
	secrets := []string{prompt}
	if c := reply.Choices[0].Message.Content; len(c) >= 8 {
		secrets = append(secrets, c)
	}
	for _, sp := range spans {
		for _, kv := range sp.span.Attributes {
			v := fmt.Sprint(kv.Value)
			for _, secret := range secrets {
				if strings.Contains(v, secret) {
					t.Errorf("%s span %q: attribute %s holds request or reply text: %s", sp.service, sp.span.Name, kv.Key, v)
				}
			}
		}
	}
}

// The demo's built-in worker traces as a separate svc worker does: its
// spans are the worker's service, in the request's trace under the
// gateway's.
func TestTracingInTheDemo(t *testing.T) {
	rec := newOTLPReceiver(t)
	env := []string{"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=", "OTEL_TRACES_SAMPLER=",
		"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="}
	s := startServerEnv(t, "", env, "--demo", "--otlp-endpoint", rec.srv.URL)
	key := s.adminKey()
	s.workerNamed(key, "demo-sim", statusIs("healthy"))
	r := s.do("POST", "/v1/chat/completions", `{"model":"sim-chat","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`,
		bearer(key))
	if r.Status != http.StatusOK {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	spans := rec.wait("svc-gateway SPAN_KIND_SERVER", "svc-worker SPAN_KIND_SERVER")
	var gw, wk *tracepb.Span
	for _, s := range spans {
		switch {
		case s.service == "svc-gateway" && s.span.Kind == tracepb.Span_SPAN_KIND_SERVER && s.span.Name == "chat sim-chat":
			gw = s.span
		case s.service == "svc-worker" && s.span.Kind == tracepb.Span_SPAN_KIND_SERVER:
			wk = s.span
		}
	}
	if gw == nil || wk == nil || hex.EncodeToString(wk.TraceId) != hex.EncodeToString(gw.TraceId) ||
		hex.EncodeToString(wk.ParentSpanId) != hex.EncodeToString(gw.SpanId) {
		t.Fatalf("gateway span %v, worker span %v: want the worker's under the gateway's", gw, wk)
	}
}
