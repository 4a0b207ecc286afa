package cli

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The flushes at exit share one deadline, from the first: svc serve
// --demo's two providers hold the exit no longer than one.
func TestTracingFlushesShareADeadline(t *testing.T) {
	var ts tracesShared
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	first := ts.deadline(start)
	if want := start.Add(flushWait); !first.Equal(want) {
		t.Fatalf("first deadline %v, want %v", first, want)
	}
	if later := ts.deadline(start.Add(4 * time.Second)); !later.Equal(first) {
		t.Fatalf("the second flush's deadline %v, want the first's %v", later, first)
	}
}

// The process's first provider reports failed exports; a second (the
// demo worker's) does not take the handler over.
func TestTracingErrorsGoToTheFirstLog(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	var gw, wk bytes.Buffer
	f := &Factory{Getenv: func(k string) string {
		if k == "OTEL_EXPORTER_OTLP_ENDPOINT" {
			// Nothing listens on port 1: every export fails.
			return "http://127.0.0.1:1"
		}
		return ""
	}}
	ctx := context.Background()
	for _, out := range []*bytes.Buffer{&gw, &wk} {
		tr, stop, err := startTracing(ctx, f, "http://127.0.0.1:1", "svc", slog.New(slog.NewTextHandler(out, nil)))
		if err != nil || tr == nil {
			t.Fatalf("tracer %v, err %v", tr, err)
		}
		_, span := tr.Start(ctx, "x")
		span.End()
		stop()
	}
	if !strings.Contains(gw.String(), "tracing") || strings.Contains(wk.String(), "level=WARN msg=tracing ") {
		t.Fatalf("the first log:\n%s\nthe second:\n%s", gw.String(), wk.String())
	}
}
