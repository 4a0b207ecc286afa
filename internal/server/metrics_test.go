package server

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/buildinfo"
)

// Requests are counted under their route, method and status, each series
// found again on the next request; a method a client invents counts as
// "other", so that inventing them cannot grow the series.
func TestObserve(t *testing.T) {
	m := newMetrics(buildinfo.Info{})
	for range 3 {
		m.observe("/v1/chat/completions", "POST", 200, time.Millisecond)
	}
	m.observe("/v1/chat/completions", "POST", 429, time.Millisecond)
	for _, method := range []string{"FOO", "BAR", "get", "PROPFIND"} {
		m.observe("unmatched", method, 405, time.Millisecond)
	}
	m.observe("unmatched", "DELETE", 404, time.Millisecond)

	for _, tc := range []struct {
		route, method, status string
		want                  float64
	}{
		{"/v1/chat/completions", "POST", "200", 3},
		{"/v1/chat/completions", "POST", "429", 1},
		{"unmatched", "other", "405", 4},
		{"unmatched", "DELETE", "404", 1},
	} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(tc.route, tc.method, tc.status)); got != tc.want {
			t.Errorf("%s %s %s: %v requests, want %v", tc.method, tc.route, tc.status, got, tc.want)
		}
	}
	if n := testutil.CollectAndCount(m.requests); n != 4 {
		t.Errorf("%d series of requests, want 4", n)
	}
	if n := testutil.CollectAndCount(m.latency); n != 4 {
		t.Errorf("%d series of latency, want 4", n)
	}
}

type countedRows struct{ n int }

func (d *countedRows) Record(string, api.UsageRow) { d.n++ }

// Served requests are timed by request type and model; a request no
// worker served is not (its model is any text a client sent), and the
// models timed are bounded.
func TestServedTimings(t *testing.T) {
	m := newMetrics(buildinfo.Info{})
	var rows countedRows
	u := newCountedUsage(&rows, m)
	ms := func(v int64) *int64 { return &v }
	u.Record("o", api.UsageRow{RequestType: "chat", Model: "m", WorkerID: "w", StatusCode: 200, RequestDurationMs: 1500,
		TimeToFirstTokenMs: ms(40), QueueWaitMs: ms(3)})
	u.Record("o", api.UsageRow{RequestType: "chat", Model: "m", WorkerID: "w", StatusCode: 502, RequestDurationMs: 20})
	u.Record("o", api.UsageRow{RequestType: "embeddings", Model: "e", WorkerID: "w", StatusCode: 200, RequestDurationMs: 8})
	u.Record("o", api.UsageRow{RequestType: "chat", Model: "whatever a client typed", StatusCode: 404})
	if rows.n != 4 {
		t.Fatalf("%d rows recorded, want every one", rows.n)
	}
	if n := testutil.CollectAndCount(m.served.duration); n != 2 {
		t.Fatalf("%d duration series, want chat/m and embeddings/e", n)
	}
	count := func(h *prometheus.HistogramVec, labels ...string) uint64 {
		var d dto.Metric
		if err := h.WithLabelValues(labels...).(prometheus.Histogram).Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetHistogram().GetSampleCount()
	}
	if n := count(m.served.duration, "chat", "m"); n != 2 {
		t.Errorf("chat/m timed %d times, want 2", n)
	}
	if n := count(m.served.firstToken, "chat", "m"); n != 1 {
		t.Errorf("chat/m first tokens %d, want 1", n)
	}
	if n := count(m.served.queueWait, "embeddings", "e"); n != 0 {
		t.Errorf("embeddings/e queue waits %d, want none reported", n)
	}

	for i := range maxTimedModels + 10 {
		u.Record("o", api.UsageRow{RequestType: "chat", Model: fmt.Sprintf("model-%d", i), WorkerID: "w", StatusCode: 200})
	}
	if n := testutil.CollectAndCount(m.served.duration); n != maxTimedModels+1 {
		t.Errorf("%d duration series, want at most %d and other", n, maxTimedModels)
	}
	if n := count(m.served.duration, "chat", "other"); n < 10 {
		t.Errorf("other timed %d times, want the models past the bound", n)
	}
}

// Records of one new model at once count it once against the bound: a
// race lost to another record gives its place back.
func TestServedTimingsCountAModelOnce(t *testing.T) {
	m := newMetrics(buildinfo.Info{})
	u := newCountedUsage(&countedRows{}, m)
	const models = 20
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range models {
				u.time("chat", &api.UsageRow{Model: fmt.Sprintf("model-%d", (i+g)%models)})
			}
		})
	}
	wg.Wait()
	if n := u.timed.Load(); n != models {
		t.Errorf("%d models counted against the bound, want %d", n, models)
	}
}
