package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"charm.land/lipgloss/v2"
)

var (
	ansi    = regexp.MustCompile("\x1b\\[[0-9;]*m")
	rfc3339 = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
)

func contains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func lacks(t *testing.T, what, got string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(got, w) {
			t.Errorf("%s has %q:\n%s", what, w, got)
		}
	}
}

func workersGateway(t *testing.T) *fakeGateway {
	return newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/workers":                {body: "workers.json"},
		"GET /api/v1/workers/latest-version": {body: `{"version": "v1.4.0"}`},
		"GET /api/v1/workers/events":         {body: "events.json"},
	})
}

func TestWorkersTable(t *testing.T) {
	g := workersGateway(t)
	t.Run("terminal", func(t *testing.T) {
		r := cliRun{env: gatewayEnv(g), tty: true}.run(t, "workers")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		contains(t, "table", r.stdout,
			"\x1b[32mhealthy\x1b[0m", "\x1b[33mstale, draining\x1b[0m", // status colours
			"\x1b[33mv1.3.0 (lat", // an old worker is marked
			"3s ago", "2m ago", "2/4", "…")
		lacks(t, "table", r.stdout, "v1.4.0 (latest")
		if rfc3339.MatchString(r.stdout) {
			t.Errorf("RFC 3339 time on a terminal:\n%s", r.stdout)
		}
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if w := lipgloss.Width(ansi.ReplaceAllString(line, "")); w > defaultWidth {
				t.Errorf("line of %d cells wider than the terminal:\n%s", w, line)
			}
		}
		req := g.last("/api/v1/workers")
		if req.Auth != "Bearer svc_k_test" || req.UserAgent != "svc/v1.2.3" {
			t.Errorf("request %+v", req)
		}
	})
	t.Run("pipe", func(t *testing.T) {
		r := cliRun{env: gatewayEnv(g)}.run(t, "workers")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) != 3 {
			t.Fatalf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
		}
		if !regexp.MustCompile(`^NAME\s+STATUS\s+VERSION\s+MODELS\s+ACTIVE\s+QUEUE\s+POWER\s+LAST SEEN\s+SIMULATED$`).MatchString(lines[0]) {
			t.Errorf("header %q", lines[0])
		}
		contains(t, "row 1", lines[1], "gpu-box-1", "healthy", "v1.3.0 (latest v1.4.0)",
			"  qwen3-32b +2 more  ", "2/4", "  612 W  ")
		contains(t, "row 2", lines[2], "demo-sim", "stale, draining", "sim-chat", "~180 W", "yes")
		lacks(t, "table", r.stdout, "\x1b", "…", "ago")
		if !rfc3339.MatchString(lines[1]) {
			t.Errorf("no RFC 3339 time: %q", lines[1])
		}
	})
	t.Run("events", func(t *testing.T) {
		r := cliRun{env: gatewayEnv(g)}.run(t, "workers", "events", "--worker", "wk_1", "--type", "disconnected", "--limit", "5", "--offset", "2")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		q := g.last("/api/v1/workers/events").Query
		if q.Get("worker_id") != "wk_1" || q.Get("event_type") != "disconnected" || q.Get("limit") != "5" || q.Get("offset") != "2" {
			t.Errorf("query %v", q)
		}
		contains(t, "events", r.stdout, "2026-01-02T03:05:00Z", "demo-sim", "disconnected (transient)", "link lost", "connected")
	})
}

// svc workers show: every model the list only counts, by name, id or a
// unique start of the id.
func TestWorkersShow(t *testing.T) {
	g := workersGateway(t)
	for _, arg := range []string{"gpu-box-1", "wk_0000000000000001"} {
		r := cliRun{env: gatewayEnv(g)}.run(t, "workers", "show", arg)
		if r.code != 0 {
			t.Fatalf("show %s: exit %d %s", arg, r.code, r.stderr)
		}
		for _, re := range []string{`(?m)^Name\s+gpu-box-1$`, `(?m)^ID\s+wk_0000000000000001$`, `(?m)^Version\s+v1\.3\.0 \(latest v1\.4\.0\)$`,
			`(?m)^Engines\s+openai http://127\.0\.0\.1:8000$`, `(?m)^Active\s+2 of 4$`, `(?m)^Power\s+612 W$`,
			`(?m)^MODEL\s+CAPABILITIES\s+CONTEXT\s+ENGINE\s+LOADED\s+NOTE$`, `(?m)^qwen3-32b\s+chat,reasoning\s+32768\s+openai\s+-\s+-$`,
			`(?m)^llama-3\.3-70b-instruct-with-a-very-long-model-identifier\s+chat\s+-\s+openai`, `(?m)^bge-m3\s+embeddings\s+-\s+openai\s+yes\s+always on$`} {
			if !regexp.MustCompile(re).MatchString(r.stdout) {
				t.Errorf("show %s lacks %s:\n%s", arg, re, r.stdout)
			}
		}
	}
	r := cliRun{env: gatewayEnv(g)}.run(t, "workers", "show", "demo-sim", "--jq", ".models[].id")
	if r.code != 0 || r.stdout != "sim-chat\n" {
		t.Errorf("--jq: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = cliRun{env: gatewayEnv(g)}.run(t, "workers", "show", "wk_0000")
	if r.code != exitUsage || !strings.Contains(r.stderr, `"wk_0000" starts 2 worker ids (wk_0000000000000001, wk_0000000000000002): give more of it`) {
		t.Errorf("ambiguous start: exit %d %s", r.code, r.stderr)
	}
	r = cliRun{env: gatewayEnv(g)}.run(t, "workers", "show", "gpu-box-9")
	if r.code != exitUsage || !strings.Contains(r.stderr, `no worker "gpu-box-9" is listed`) || !strings.Contains(r.stderr, "'svc workers' lists them") {
		t.Errorf("unknown worker: exit %d %s", r.code, r.stderr)
	}
}

// Every list fits a terminal of the default width: ids are short, long
// lists are summed up, and the long text columns give way.
func TestListsFitTheTerminal(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/workers":                {body: "workers.json"},
		"GET /api/v1/workers/latest-version": {body: `{"version": "v1.4.0"}`},
		"GET /api/v1/workers/events":         {body: "events.json"},
		"GET /api/v1/usage/logs":             {body: "logs.json"},
		"GET /api/v1/usage/inflight":         {body: "inflight.json"},
		"GET /api/v1/usage/breakdown":        {body: "breakdown.json"},
		"GET /v1/models":                     {body: "models.json"},
		"GET /api/v1/compute/instances":      {body: "rentals.json"},
		"GET /api/v1/compute/spend":          {body: "spend.json"},
		"GET /api/v1/compute/catalogue":      {body: "catalogue.json"},
	})
	for _, args := range [][]string{
		{"workers"}, {"workers", "events"}, {"workers", "show", "gpu-box-1"}, {"usage", "logs"}, {"usage", "inflight"},
		{"usage", "breakdown"}, {"models"}, {"rentals"}, {"spend"}, {"catalogue"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := cliRun{env: gatewayEnv(g), tty: true}.run(t, args...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				if w := lipgloss.Width(ansi.ReplaceAllString(line, "")); w > defaultWidth {
					t.Errorf("line of %d cells wider than the terminal:\n%s", w, line)
				}
			}
		})
	}
}

func TestModelsTable(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{"GET /v1/models": {body: "models.json"}})
	r := cliRun{env: gatewayEnv(g)}.run(t, "models")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 3 {
		t.Fatalf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !regexp.MustCompile(`^ID\s+CAPABILITIES\s+CONTEXT\s+ENGINE\s+SIMULATED$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^qwen3-32b\s+chat,reasoning\s+32768\s+openai\s+-$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^sim-embed\s+embeddings\s+512\s+sim\s+yes$`).MatchString(lines[2]) {
		t.Fatalf("table:\n%s", r.stdout)
	}

	// --json is the API's document.
	r = cliRun{env: gatewayEnv(g), tty: true}.run(t, "models", "--json")
	var doc struct {
		Object string `json:"object"`
		Data   []struct {
			ID        string `json:"id"`
			Simulated bool   `json:"simulated"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc.Object != "list" || len(doc.Data) != 2 || !doc.Data[1].Simulated {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	lacks(t, "--json on a terminal", r.stdout, "\x1b")
	if !strings.HasPrefix(r.stdout, "{\n  \"object\": \"list\",") {
		t.Errorf("not indented:\n%s", r.stdout)
	}
}

func TestJSONAndJQ(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/usage/logs":     {body: "logs.json"},
		"GET /api/v1/workers":        {body: "workers.json"},
		"GET /api/v1/usage/summary":  {body: "summary.json"},
		"GET /api/v1/usage/inflight": {body: "inflight.json"},
	})
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"usage", "logs", "--json", "--jq", ".[] | select(.status_code==499) | .id"}, "req-cancelled\n"},
		{[]string{"usage", "logs", "--jq", ".[].id"}, "req-cancelled\nreq-ok\n"},
		{[]string{"usage", "logs", "--jq", "length"}, "2\n"},
		{[]string{"usage", "logs", "--jq", ".[1] | {model, status_code}"}, "{\n  \"model\": \"sim-chat\",\n  \"status_code\": 200\n}\n"},
		{[]string{"usage", "logs", "--jq", "[.[].tokens_per_second]"}, "[\n  21.5,\n  200\n]\n"},
		{[]string{"workers", "--jq", ".workers[] | select(.simulated) | .worker_name"}, "demo-sim\n"},
		{[]string{"usage", "summary", "--jq", ".requests"}, "120\n"},
		{[]string{"usage", "inflight", "--jq", ".[] | select(.tokens_generated == null) | .state"}, "queued\n"},
	}
	for _, tt := range tests {
		for _, tty := range []bool{false, true} {
			r := cliRun{env: gatewayEnv(g), tty: tty}.run(t, tt.args...)
			if r.code != 0 || r.stdout != tt.want {
				t.Errorf("%v (tty %v): exit %d\n got %q\nwant %q\n%s", tt.args, tty, r.code, r.stdout, tt.want, r.stderr)
			}
		}
	}

	// --json is one indented document of the API's fields, the same on
	// a terminal and a pipe.
	pipe := cliRun{env: gatewayEnv(g)}.run(t, "usage", "logs", "--json")
	term := cliRun{env: gatewayEnv(g), tty: true}.run(t, "usage", "logs", "--json")
	if pipe.stdout != term.stdout || !strings.HasPrefix(pipe.stdout, "[\n  {\n    \"id\": \"req-cancelled\",") {
		t.Fatalf("--json:\n%s", pipe.stdout)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(pipe.stdout), &rows); err != nil || len(rows) != 2 || rows[0]["tokens_estimated"] != true {
		t.Fatalf("--json: %v", err)
	}

	// A bad expression is a usage error, found before anything is sent; a
	// failure while running one is an ordinary error.
	before := len(g.sent)
	r := cliRun{env: gatewayEnv(g)}.run(t, "usage", "logs", "--jq", ".[")
	if r.code != exitUsage || !strings.Contains(r.stderr, "invalid --jq expression") || len(g.sent) != before {
		t.Fatalf("bad jq: exit %d %q", r.code, r.stderr)
	}
	r = cliRun{env: gatewayEnv(g)}.run(t, "usage", "logs", "--jq", ".[] | .id.x")
	if r.code != exitError || !strings.Contains(r.stderr, "jq:") {
		t.Fatalf("jq runtime error: exit %d %q", r.code, r.stderr)
	}
	// The admin commands share the flags; a bad expression stops them
	// before they look for the socket.
	r = cliRun{}.run(t, "admin", "orgs", "list", "--jq", "{")
	if r.code != exitUsage || !strings.Contains(r.stderr, "invalid --jq expression") {
		t.Fatalf("admin bad jq: exit %d %q", r.code, r.stderr)
	}
	r = cliRun{}.run(t, "version", "--jq", ".version")
	if r.code != 0 || r.stdout != "v1.2.3\n" {
		t.Fatalf("version --jq: %q %q", r.stdout, r.stderr)
	}
}

func TestUsageTables(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/usage/logs":      {body: "logs.json"},
		"GET /api/v1/usage/inflight":  {body: "inflight.json"},
		"GET /api/v1/usage/summary":   {body: "summary.json"},
		"GET /api/v1/usage/daily":     {body: "daily.json"},
		"GET /api/v1/usage/breakdown": {body: "breakdown.json"},
		"GET /api/v1/workers":         {body: "workers.json"},
	})
	env := gatewayEnv(g)

	// An id not in the list is taken as it is; a name is its worker's id.
	r := cliRun{env: env}.run(t, "usage", "logs", "--worker", "wk_1", "--offset", "3")
	q := g.last("/api/v1/usage/logs").Query
	if r.code != 0 || q.Get("limit") != "50" || q.Get("offset") != "3" || q.Get("worker_id") != "wk_1" || q.Has("status") || q.Has("model") {
		t.Fatalf("exit %d, query %v: %s", r.code, q, r.stderr)
	}
	r = cliRun{env: env}.run(t, "usage", "--worker", "gpu-box-1", "--status", "499", "--model", "qwen3-32b", "--json")
	q = g.last("/api/v1/usage/logs").Query
	if r.code != 0 || q.Get("worker_id") != "wk_0000000000000001" || q.Get("status") != "499" || q.Get("model") != "qwen3-32b" ||
		!strings.HasPrefix(r.stdout, "[") {
		t.Fatalf("svc usage alone: exit %d, query %v: %s%s", r.code, q, r.stdout, r.stderr)
	}
	r = cliRun{env: env}.run(t, "usage", "inflight", "--worker", "demo-sim")
	if q = g.last("/api/v1/usage/inflight").Query; r.code != 0 || q.Get("worker_id") != "wk_0000000000000002" {
		t.Fatalf("inflight by name: exit %d, query %v: %s", r.code, q, r.stderr)
	}
	before := len(g.sent)
	for _, args := range [][]string{
		{"usage", "logs", "--status", "42"},
		{"workers", "events", "--type", "bogus"},
	} {
		if r = (cliRun{env: env}).run(t, args...); r.code != exitUsage || len(g.sent) != before {
			t.Fatalf("%v: exit %d %q", args, r.code, r.stderr)
		}
	}
	// A name no worker has is not sent as an id, to match nothing.
	for _, args := range [][]string{
		{"usage", "logs", "--worker", "nosuch"},
		{"usage", "inflight", "--worker", "nosuch"},
		{"workers", "events", "--worker", "nosuch"},
	} {
		r = cliRun{env: env}.run(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "no worker of that name or id is listed") {
			t.Fatalf("%v: exit %d %q", args, r.code, r.stderr)
		}
	}
	before = len(g.sent)
	for _, args := range [][]string{
		{"usage", "logs", "--status", "42"},
	} {
		if r = (cliRun{env: env}).run(t, args...); r.code != exitUsage || len(g.sent) != before {
			t.Fatalf("%v: exit %d %q", args, r.code, r.stderr)
		}
	}
	r = cliRun{env: env}.run(t, "usage", "logs", "--worker", "wk_1", "--offset", "3")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^TIME\s+ID\s+MODEL\s+STATUS\s+TOKENS\s+DURATION\s+TTFT\s+ENERGY\s+WORKER\s+NOTE$`).MatchString(lines[0]) {
		t.Fatalf("logs:\n%s", r.stdout)
	}
	if !regexp.MustCompile(`^2026-01-02T03:04:07Z\s+req-canc\s+qwen3-32b\s+499\s+~12/40\s+2\.3s\s+180ms\s+-\s+gpu-box-1\s+Client disconnected$`).MatchString(lines[1]) {
		t.Errorf("row %q", lines[1])
	}
	if !regexp.MustCompile(`^\S+\s+req-ok\s+sim-chat\s+200\s+3/9\s+45ms\s+5ms\s+0\.42 Wh\s+demo-sim\s+truncated_at_default_max_tokens$`).MatchString(lines[2]) {
		t.Errorf("row %q", lines[2])
	}
	r = cliRun{env: env, tty: true}.run(t, "usage", "logs")
	contains(t, "logs on a terminal", r.stdout, "\x1b[33m499\x1b[0m", "\x1b[32m200\x1b[0m", "d ago")

	r = cliRun{env: env}.run(t, "usage", "inflight", "--worker", "wk_1")
	if g.last("/api/v1/usage/inflight").Query.Get("worker_id") != "wk_1" {
		t.Error("inflight --worker not sent")
	}
	if !regexp.MustCompile(`(?m)^req-runn\s+qwen3-32b\s+chat \(stream\)\s+running\s+gpu-box-1\s+2026-01-02T03:04:05Z\s+1\.5s\s+42$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^req-queu\s+qwen3-32b\s+embeddings\s+queued\s+-\s+\S+\s+300ms\s+-$`).MatchString(r.stdout) {
		t.Errorf("inflight:\n%s", r.stdout)
	}

	r = cliRun{env: env}.run(t, "usage", "summary", "--days", "7")
	if g.last("/api/v1/usage/summary").Query.Get("days") != "7" {
		t.Error("summary --days not sent")
	}
	for _, re := range []string{`(?m)^Period\s+2025-12-27 to 2026-01-02 \(7 days, UTC\)$`, `(?m)^Requests\s+120$`,
		`(?m)^Failed\s+6$`, `(?m)^Total tokens\s+25500$`, `(?m)^Request time\s+1m38s$`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("summary lacks %s:\n%s", re, r.stdout)
		}
	}

	r = cliRun{env: env}.run(t, "usage", "daily", "--days", "2")
	if !regexp.MustCompile(`(?m)^2026-01-02\s+10\s+8\s+1\s+1\s+100\s+900\s+1000$`).MatchString(r.stdout) {
		t.Errorf("daily:\n%s", r.stdout)
	}

	r = cliRun{env: env}.run(t, "usage", "breakdown", "--sort", "requests")
	q = g.last("/api/v1/usage/breakdown").Query
	if q.Get("sort") != "requests" || q.Get("days") != "30" {
		t.Errorf("breakdown query %v", q)
	}
	contains(t, "breakdown", r.stdout, "2025-12-04 to 2026-01-02 (30 days, UTC), top 10 by requests")
	if !regexp.MustCompile(`(?m)^qwen3-32b\s+7\s+6\s+1\s+0\s+70\s+700\s+770\s+2\.00$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^gpu-box-1\s+7\s+6\s+1\s+0\s+70\s+700\s+770\s+-$`).MatchString(r.stdout) {
		t.Errorf("breakdown:\n%s", r.stdout)
	}
}

func TestErrorShapes(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		// plain, on the workers and usage endpoints
		"GET /api/v1/workers": {status: 403, body: `{"detail": "This key lacks the workers:read permission"}`,
			header: map[string]string{"X-Request-Id": "rid-plain"}},
		// compatible, on inference endpoints
		"GET /v1/models": {status: 503, body: `{"detail": "No worker is online", "error": {"message": "No worker is online", "type": "service_unavailable", "code": "no_workers", "param": null}}`,
			header: map[string]string{"X-Request-Id": "rid-compat", "Retry-After": "5"}},
		// private inference, nested in detail
		"POST /v1/chat/completions": {status: 403, body: `{"detail": {"error": {"message": "This organisation requires end-to-end encryption", "type": "e2e_required", "code": "e2e_required"}}}`,
			header: map[string]string{"X-Request-Id": "rid-nested"}},
		// validation
		"GET /api/v1/usage/inflight": {status: 422, body: `{"detail": "Invalid request: worker_id: too long", "error": {"message": "Invalid request: worker_id: too long", "type": "invalid_request_error", "code": null, "param": "worker_id"}, "errors": [{"field": "worker_id", "message": "too long", "type": "too_long"}]}`,
			header: map[string]string{"X-Request-Id": "rid-422"}},
		"GET /api/v1/usage/logs": {status: 429, body: `{"detail": "Too many requests"}`,
			header: map[string]string{"X-Request-Id": "rid-429", "Retry-After": "3"}},
		"GET /api/v1/usage/summary": {status: 500, body: "upstream exploded"},
		"POST /v1/embeddings":       {status: 404, body: `{"detail": "Model nope is not installed", "error": {"message": "Model nope is not installed", "type": "not_found_error", "code": "model_not_found", "param": "model"}}`},
		"GET /api/v1/usage/daily":   {status: 401, body: `{"detail": "Invalid API key"}`, header: map[string]string{"X-Request-Id": "rid-401"}},
	})
	tests := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"workers"}, exitAuth, []string{"Error: This key lacks the workers:read permission\nRequest id: rid-plain\n"}},
		{[]string{"models"}, exitCapacity, []string{"Error: No worker is online\nRequest id: rid-compat\n"}},
		{[]string{"chat", "m", "hi"}, exitAuth, []string{"Error: This organisation requires end-to-end encryption\nRequest id: rid-nested\n"}},
		{[]string{"chat", "m", "hi", "--json"}, exitAuth, []string{"end-to-end encryption"}},
		{[]string{"usage", "inflight"}, exitError, []string{"Error: Invalid request: worker_id: too long\nRequest id: rid-422\n"}},
		{[]string{"usage", "logs"}, exitCapacity, []string{"Error: Too many requests\nRequest id: rid-429\n"}},
		{[]string{"usage", "summary"}, exitError, []string{"Error: upstream exploded\nRequest id: rid-"}},
		{[]string{"embed", "nope", "x"}, exitError, []string{"Error: Model nope is not installed\n"}},
		{[]string{"usage", "daily"}, exitAuth, []string{"Error: Invalid API key\nRequest id: rid-401\nThe key came from SVC_API_KEY; give another with --api-key or SVC_API_KEY, or run 'svc login'.\n"}},
	}
	for _, tt := range tests {
		r := cliRun{env: gatewayEnv(g)}.run(t, tt.args...)
		if r.code != tt.code {
			t.Errorf("%v: exit %d, want %d; stderr %q", tt.args, r.code, tt.code, r.stderr)
		}
		contains(t, strings.Join(tt.args, " "), r.stderr, tt.want...)
		if r.stdout != "" {
			t.Errorf("%v: stdout %q on an error", tt.args, r.stdout)
		}
	}
}

func TestGatewayDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	for _, args := range [][]string{{"workers"}, {"chat", "m", "hi"}, {"usage", "logs", "--json"}, {"login", "--api-key", "k"}} {
		r := cliRun{env: map[string]string{"SVC_BASE_URL": url}}.run(t, args...)
		if r.code != exitError {
			t.Errorf("%v: exit %d, want 1", args, r.code)
		}
		contains(t, strings.Join(args, " "), r.stderr, "cannot reach "+url, "'svc serve'", "--base-url")
	}
}

// A key that may read usage but not list workers still filters by worker:
// the argument goes as the worker's id, which is all the usage endpoints
// need.
func TestUsageByWorkerWithoutWorkersRead(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/usage/logs":     {body: "logs.json"},
		"GET /api/v1/usage/inflight": {body: "inflight.json"},
		"GET /api/v1/workers": {status: http.StatusForbidden,
			body: `{"detail":"This API key lacks the workers:read permission required for this endpoint."}`},
	})
	env := gatewayEnv(g)
	const id = "wk_632eba419f81787f"
	for _, args := range [][]string{
		{"usage", "logs", "--worker", id},
		{"usage", "inflight", "--worker", id},
	} {
		r := cliRun{env: env}.run(t, args...)
		if q := g.last("/api/v1/usage/" + args[1]).Query; r.code != 0 || q.Get("worker_id") != id {
			t.Fatalf("%v: exit %d, query %v: %s", args, r.code, q, r.stderr)
		}
	}
	// An id in capitals is the same id.
	if r := (cliRun{env: env}).run(t, "usage", "logs", "--worker", strings.ToUpper(id)); r.code != 0 ||
		g.last("/api/v1/usage/logs").Query.Get("worker_id") != id {
		t.Fatalf("an id in capitals: exit %d, %s", r.code, r.stderr)
	}
	// A name, a start of an id or what cannot be one cannot be looked up:
	// said, rather than matching nothing.
	for _, arg := range []string{"gpu-box-1", "wk_632e", id + "0", "wk_632eba419f81787g"} {
		for _, cmd := range []string{"logs", "inflight"} {
			if r := (cliRun{env: env}).run(t, "usage", cmd, "--worker", arg); r.code != exitUsage || !strings.Contains(r.stderr, "workers:read") {
				t.Errorf("usage %s --worker %s under a key without workers:read: exit %d %s", cmd, arg, r.code, r.stderr)
			}
		}
	}
}

func TestCheckRangeSaysTheBoundPassed(t *testing.T) {
	for _, tc := range []struct {
		v    int
		want string
	}{
		{-1, "--offset must be at least 0, got -1"},
		{maxOffset + 1, fmt.Sprintf("--offset must be between 0 and %d, got %d", maxOffset, maxOffset+1)},
	} {
		if err := checkRange("--offset", tc.v, 0, maxOffset); err == nil || err.Error() != tc.want {
			t.Errorf("checkRange(%d) = %v, want %q", tc.v, err, tc.want)
		}
	}
	if err := checkRange("--offset", maxOffset, 0, maxOffset); err != nil {
		t.Errorf("checkRange at the bound = %v", err)
	}
}
