package server

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/buildinfo"
)

// backlogAt is a store whose writes are in the state it holds.
type backlogAt bolt.Backlog

func (b backlogAt) Backlog() bolt.Backlog { return bolt.Backlog(b) }

var (
	errDiskFull = fmt.Errorf("commit 12 records: %w", &fs.PathError{Op: "write", Path: "svc.db", Err: syscall.ENOSPC})
	since       = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

	storeOK       = backlogAt{Limit: 1 << 20}
	storeRetrying = backlogAt{UsageRows: 40, Bytes: 40_000, Limit: 1 << 20, Failing: true, Since: since, Err: errDiskFull, FailedCommits: 6}
	storeRefusing = backlogAt{UsageRows: 1100, Events: 2, Bytes: 1 << 20, Limit: 1 << 20, Refusing: true, Failing: true,
		Since: since, Err: errDiskFull, FailedCommits: 60, DroppedEvents: 3, DroppedPower: 4}
	// Slower than the traffic, without failing.
	storeBehind = backlogAt{UsageRows: 1300, Bytes: 1 << 20, Limit: 1 << 20, Refusing: true}
)

// Inference is served while the store's writes fail and the rows fit the
// backlog; at its bound it is refused with the spec's 503, through the
// one error writer, before the handler runs.
func TestInferenceRefusedAtTheStoreBound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		store  backlogAt
		served bool
		cause  string
	}{
		{"store ok", storeOK, true, ""},
		{"commits failing, rows kept", storeRetrying, true, ""},
		{"backlog at its bound on a full disk", storeRefusing, false, "usage store unavailable: disk full;"},
		{"backlog at its bound, writes slow", storeBehind, false, "usage store unavailable: writes are behind;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{metrics: newMetrics(buildinfo.Info{}), writes: tc.store}
			served := false
			h := s.accounted(func(*call) error { served = true; return nil })
			ctx := &fasthttp.RequestCtx{}
			err := h(&call{ctx: ctx})
			if served != tc.served || (err == nil) != tc.served {
				t.Fatalf("served %v, err %v", served, err)
			}
			if tc.served {
				return
			}
			answerError(ctx, asAPIError(err, "req-1"), formCompatible)
			var body struct {
				Detail string `json:"detail"`
				Error  struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal(ctx.Response.Body(), &body); err != nil {
				t.Fatal(err)
			}
			if st := ctx.Response.StatusCode(); st != http.StatusServiceUnavailable ||
				string(ctx.Response.Header.Peek("Retry-After")) != "5" ||
				body.Error.Type != api.TypeServiceUnavailable || body.Detail != body.Error.Message ||
				!strings.HasPrefix(body.Detail, "Service temporarily unavailable, please retry: ") ||
				!strings.Contains(body.Detail, tc.cause) {
				t.Fatalf("%d %q: %s", st, ctx.Response.Header.Peek("Retry-After"), ctx.Response.Body())
			}
			if n := testutil.ToFloat64(s.metrics.storeRefused); n != 1 {
				t.Errorf("%v refusals counted", n)
			}
		})
	}
}

// Every route that serves inference, and so records usage, is refused at
// the bound; the model list and Anthropic's token count are not.
func TestEveryInferenceRouteIsAccounted(t *testing.T) {
	s := &Server{metrics: newMetrics(buildinfo.Info{}), writes: storeRefusing}
	n := 0
	for _, r := range s.routes() {
		if r.perm != auth.InferenceWrite || r.method != "POST" || strings.HasSuffix(r.path, "/messages/count_tokens") {
			continue
		}
		n++
		err := r.handle(&call{ctx: &fasthttp.RequestCtx{}})
		if ae := api.ErrorOf(err); ae.HTTPStatus() != http.StatusServiceUnavailable || !strings.Contains(ae.Message, "disk full") {
			t.Errorf("%s %s: %v", r.method, r.path, err)
		}
	}
	// Chat, text completions, messages, responses, embeddings, rerank,
	// images, transcriptions, translations, speech and moderations, under
	// /v1 and /api/v1.
	if n != 22 {
		t.Errorf("%d inference routes", n)
	}
}

// /healthz stays 200 and tells the store's state.
func TestHealthTellsTheStore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		store  backlogAt
		status string
		want   api.StoreHealth
	}{
		{"ok", storeOK, api.HealthOK, api.StoreHealth{State: api.StoreOK, BacklogLimitBytes: 1 << 20}},
		{"retrying", storeRetrying, api.HealthDegraded, api.StoreHealth{State: api.StoreRetrying, Error: "disk full",
			FailingSince: &since, PendingUsageRows: 40, BacklogBytes: 40_000, BacklogLimitBytes: 1 << 20, FailedCommits: 6}},
		{"refusing", storeRefusing, api.HealthDegraded, api.StoreHealth{State: api.StoreRefusing, Error: "disk full",
			FailingSince: &since, PendingUsageRows: 1100, PendingEvents: 2, BacklogBytes: 1 << 20, BacklogLimitBytes: 1 << 20,
			FailedCommits: 60, DroppedEvents: 3, DroppedPowerReports: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{build: buildinfo.Info{Version: "v9"}, writes: tc.store}
			ctx := &fasthttp.RequestCtx{}
			if err := s.health(&call{ctx: ctx}); err != nil {
				t.Fatal(err)
			}
			var h api.Health
			if err := json.Unmarshal(ctx.Response.Body(), &h); err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(h.Store)
			want, _ := json.Marshal(tc.want)
			if ctx.Response.StatusCode() != http.StatusOK || h.Status != tc.status || h.Version != "v9" || string(got) != string(want) {
				t.Fatalf("%d %s:\n got %s\nwant %s", ctx.Response.StatusCode(), h.Status, got, want)
			}
		})
	}
}

func TestStoreMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newStoreMetrics(storeRefusing))
	want := `
# HELP svc_store_dropped_records_total Records dropped because the write backlog was at its bound, by kind (event, power); usage rows never are.
# TYPE svc_store_dropped_records_total counter
svc_store_dropped_records_total{kind="event"} 3
svc_store_dropped_records_total{kind="power"} 4
# HELP svc_store_failed_commits_total Store commits that failed; their records were kept and retried.
# TYPE svc_store_failed_commits_total counter
svc_store_failed_commits_total 60
# HELP svc_store_pending_records Records waiting to be written to the store, by kind (usage, event, power); above zero for long only while its writes fail.
# TYPE svc_store_pending_records gauge
svc_store_pending_records{kind="event"} 2
svc_store_pending_records{kind="power"} 0
svc_store_pending_records{kind="usage"} 1100
# HELP svc_store_refusing 1 while the write backlog is at its bound and new inference is refused.
# TYPE svc_store_refusing gauge
svc_store_refusing 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "svc_store_dropped_records_total",
		"svc_store_failed_commits_total", "svc_store_pending_records", "svc_store_refusing"); err != nil {
		t.Fatal(err)
	}
}
