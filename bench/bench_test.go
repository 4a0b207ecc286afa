package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/pgtest"
)

// withCluster adds the paths through two replicas on PostgreSQL, which
// double the short run's time: go test ./bench -args -cluster.
var withCluster = flag.Bool("cluster", false, "also run the paths through a cluster of two replicas on PostgreSQL (svc-leader, svc-forwarded)")

// TestShort runs every scenario at small scale, so the harness cannot rot
// unnoticed. The numbers are not judged here: this machine is shared and
// noisy, and figures come from full runs. What is judged is that every
// path answered and every scenario reported.
func TestShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds svc and runs every scenario")
	}
	if err := os.Chdir(".."); err != nil { // the module root, where go build ./cmd/svc works
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "results.json")
	sc := shortScale()
	var err error
	if sc.place, err = newPlacement(placeOneCore); err != nil {
		t.Fatal(err)
	}
	sc.cluster = *withCluster
	if err := bench(context.Background(), sc, out, func(string) bool { return true }, io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	byName := map[string]*scenario{}
	for _, s := range r.Scenarios {
		byName[s.Name] = s
	}
	paths := []string{"direct", "svc"}
	if nginxBinary() != "" {
		paths = append(paths, "nginx")
	} else {
		t.Log("nginx is not installed: its path was skipped")
	}
	cluster := false
	if *withCluster {
		if _, err := pgtest.BinDir(); err == nil {
			paths, cluster = append(paths, pathLeader, pathForwarded), true
		} else {
			t.Logf("PostgreSQL is not installed: the cluster's paths were skipped (%v)", err)
		}
	}
	for _, name := range []string{"unary-200rps", "unary-100rps-50ms", "max-throughput", "max-throughput-24kb", "stream-50-chunks", "transcribe-1mb", "speech-700kb"} {
		s := byName[name]
		if s == nil {
			t.Fatalf("scenario %s missing", name)
		}
		for _, p := range paths {
			st, ok := s.Paths[p]
			if !ok || st.Requests == 0 || st.Success != 1 {
				t.Errorf("%s on %s: %+v", name, p, st)
			}
		}
		if _, ok := s.Overhead["svc"]; !ok {
			t.Errorf("%s: no svc overhead", name)
		}
	}
	if s := byName["stream-50-chunks"]; s.Paths["svc"].TTFT == nil || s.Paths["svc"].Gap == nil {
		t.Error("streaming scenario lacks ttft or chunk gaps")
	}
	svcs := []string{"svc"}
	if cluster {
		svcs = append(svcs, pathLeader, pathForwarded)
		for _, name := range []string{"unary-200rps", "stream-50-chunks", "max-throughput"} {
			s := byName[name]
			f, ok := s.Forwarding[pathLeader]
			if !ok || f.CPU == nil || s.Paths[pathForwarded].CPUPerRequest <= 0 {
				t.Errorf("%s: no forwarding figures over %s: %+v", name, pathLeader, s.Forwarding)
			}
			if _, ok := s.Forwarding["svc"]; !ok {
				t.Errorf("%s: no forwarding figures over svc: %+v", name, s.Forwarding)
			}
		}
		if s := byName["stream-50-chunks"]; s.Forwarding[pathLeader].TTFT == nil {
			t.Errorf("stream-50-chunks: no added time to the first token: %+v", s.Forwarding[pathLeader])
		}
	}
	for _, p := range svcs {
		c := byName["cancel-to-engine"]
		if c == nil || c.Paths[p].Statuses["seen_by_engine"] == 0 {
			t.Errorf("no cancel reached the engine through %s: %+v", p, c)
		} else if c.Paths[p].Statuses["logged_499"] != c.Paths[p].Statuses["seen_by_engine"] {
			t.Errorf("cancelled requests through %s missing from the usage log: %+v", p, c.Paths[p].Statuses)
		}
	}
	if s := byName["saturation-429"]; s == nil || s.Paths["svc"].Statuses["429_too_many_requests"] == 0 {
		t.Errorf("saturation produced no 429: %+v", s)
	} else if share, _ := s.Extra["retry_after_share"].(float64); share != 1 {
		t.Errorf("429s without Retry-After: %+v", s.Extra)
	}
	if s := byName["refusal-cost"]; s == nil || s.Paths["svc"].Statuses["429_too_many_requests"] == 0 {
		t.Errorf("refusal cost: nothing refused: %+v", s)
	} else if r, _ := s.Extra["gateway_cpu_per_refusal_us"].(float64); r <= 0 || s.Extra["refusal_over_served"] == nil {
		t.Errorf("refusal cost: no CPU per refusal, or none against a served request: %+v", s.Extra)
	}
	if s := byName["open-streams-50"]; s == nil {
		t.Error("open streams: scenario missing")
	} else if opened, _ := s.Extra["opened"].(float64); opened != 50 || s.Extra["rss_held_bytes"] == nil {
		t.Errorf("open streams: %+v", s)
	}
	if s := byName["upload-25mb-x2"]; s == nil || s.Paths["svc"].Success != 1 || s.Extra["gateway_peak_rss_bytes"] == nil || s.Extra["worker_peak_rss_bytes"] == nil {
		t.Errorf("uploads: %+v", s)
	}
	if s := byName["max-throughput"]; s.Paths["svc"].CPUPerRequest <= 0 || s.Paths["svc"].AllocsPerRequest <= 0 {
		t.Errorf("max-throughput: no CPU time or allocations per request for svc: %+v", s.Paths["svc"])
	} else if of := s.Paths["svc"].CPUPerRequestOf; of["gateway"] <= 0 || of["worker"] <= 0 {
		t.Errorf("max-throughput: svc's CPU per request by process: %v", of)
	}
	if s := byName["overload"]; s == nil || s.Paths["svc overload"].Requests == 0 || s.Extra["capacity_rps"] == nil {
		t.Errorf("overload: %+v", s)
	} else {
		if len(s.Recovery) != int(shortScale().recoverFor/recoveryBucket) {
			t.Errorf("overload: %d recovery buckets", len(s.Recovery))
		}
		if n, _ := s.Extra["rejected_429"].(float64); n > 0 && s.Extra["rejected_retry_after_share"] != 1.0 {
			t.Errorf("overload: 429s without Retry-After: %+v", s.Extra)
		}
		for _, k := range []string{"closed_loop_gateway_cpu_per_request_us", "closed_loop_worker_cpu_per_request_us", "overload_gateway_cpu_per_request_us"} {
			if us, _ := s.Extra[k].(float64); us <= 0 {
				t.Errorf("overload: no %s: %+v", k, s.Extra)
			}
		}
		if _, held := s.Extra["implied_refusal_over_served"]; held {
			t.Errorf("overload: a refusal's cost implied by the share served, with no CPU cap: %+v", s.Extra)
		}
	}
	if r.Usage == nil || r.Usage.RowsPerSec == 0 || r.Usage.DBBytes == 0 || len(r.Usage.QueryMs) != 5 {
		t.Errorf("usage bench: %+v", r.Usage)
	}
}

func TestQueueWait(t *testing.T) {
	for _, c := range []struct {
		header string
		want   time.Duration
	}{
		{"", -1},
		{"ttft;dur=1.5, queue;dur=2.5", 2500 * time.Microsecond},
		{"queue;dur=0.0, worker_queue;dur=3.0", 0},
		{"worker_queue;dur=3.0", -1},
		{"queue;desc=x", -1},
		{"queue;dur=abc", -1},
	} {
		if got := queueWait(c.header); got != c.want {
			t.Errorf("queueWait(%q) = %v, want %v", c.header, got, c.want)
		}
	}
}

func TestParseDurations(t *testing.T) {
	scrape := func(n1, n2, inf int) string {
		// As the gateway's /metrics writes it: a histogram per route and
		// status, each with its +Inf bucket, sum and count.
		return fmt.Sprintf(`# HELP svc_http_request_duration_seconds x
# TYPE svc_http_request_duration_seconds histogram
svc_http_request_duration_seconds_bucket{route="/v1/chat/completions",status="200",le="0.001"} 99
svc_http_request_duration_seconds_bucket{route="/v1/chat/completions",status="200",le="+Inf"} 99
svc_http_request_duration_seconds_sum{route="/v1/chat/completions",status="200"} 0.05
svc_http_request_duration_seconds_count{route="/v1/chat/completions",status="200"} 99
svc_http_request_duration_seconds_bucket{route="/v1/chat/completions",status="429",le="0.0005"} %[1]d
svc_http_request_duration_seconds_bucket{route="/v1/chat/completions",status="429",le="0.001"} %[2]d
svc_http_request_duration_seconds_bucket{route="/v1/chat/completions",status="429",le="+Inf"} %[3]d
svc_http_request_duration_seconds_sum{route="/v1/chat/completions",status="429"} 0.01
svc_http_request_duration_seconds_count{route="/v1/chat/completions",status="429"} %[3]d
svc_http_request_duration_seconds_bucket{route="/healthz",status="429",le="+Inf"} 7
svc_http_request_duration_seconds_sum{route="/healthz",status="429"} 0.001
svc_http_request_duration_seconds_count{route="/healthz",status="429"} 7
`, n1, n2, inf)
	}
	before, err := parseDurations(strings.NewReader(scrape(10, 10, 10)), "/v1/chat/completions", "429")
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseDurations(strings.NewReader(scrape(60, 109, 110)), "/v1/chat/completions", "429")
	if err != nil {
		t.Fatal(err)
	}
	d := after.since(before)
	if share, n := d.within(0.001); n != 100 || share != 0.99 {
		t.Errorf("within 1 ms: %v of %v, want 0.99 of 100", share, n)
	}
	if got := d.quantileBound(0.99); got != 0.001 {
		t.Errorf("p99 bound %v, want 0.001", got)
	}
	if got := d.quantileBound(0.5); got != 0.0005 {
		t.Errorf("p50 bound %v, want 0.0005", got)
	}
	if got := d.quantileBound(0.999); !math.IsInf(got, 1) {
		t.Errorf("p99.9 bound %v, want +Inf", got)
	}
}

func TestScenarioMatches(t *testing.T) {
	for _, c := range []struct {
		name, item string
		want       bool
	}{
		{"unary-1000rps", "unary", true},
		{"max-throughput", "max-throughput", true},
		{"max-throughput-24kb", "max-throughput", true},
		{"max-throughput", "max-throughput$", true},
		{"max-throughput-24kb", "max-throughput$", false},
		{"max-throughput-24kb", "max-throughput-24kb$", true},
		{"overload", "stream", false},
		{"stream-50-chunks", "stream-50-chunks", true},
	} {
		if got := scenarioMatches(c.name, c.item); got != c.want {
			t.Errorf("scenarioMatches(%q, %q) = %v, want %v", c.name, c.item, got, c.want)
		}
	}
}
