package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestTopRefusals(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/workers": {body: "workers.json", key: "svc_k_good"},
	})
	tests := []struct {
		name string
		run  cliRun
		args []string
		code int
		want []string
	}{
		{"not a terminal", cliRun{env: gatewayEnv(g)}, nil, exitUsage,
			[]string{"needs a terminal", "svc workers --json"}},
		{"stdin not a terminal", cliRun{env: gatewayEnv(g), tty: true}, nil, exitUsage,
			[]string{"needs a terminal"}},
		{"interval too short", cliRun{env: gatewayEnv(g), tty: true, stdinTTY: true}, []string{"--interval", "10ms"}, exitUsage,
			[]string{"--interval must be at least 200ms"}},
		{"gateway down", cliRun{env: map[string]string{"SVC_BASE_URL": downURL}, tty: true, stdinTTY: true}, nil, exitError,
			[]string{"cannot reach " + downURL, "'svc serve'"}},
		{"key refused", cliRun{env: gatewayEnv(g), tty: true, stdinTTY: true}, nil, exitAuth,
			[]string{"Invalid API key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.run.run(t, append([]string{"top"}, tt.args...)...)
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, tt.code, r.stderr)
			}
			contains(t, "stderr", r.stderr, tt.want...)
			if r.stdout != "" {
				t.Errorf("stdout %q on a refusal", r.stdout)
			}
		})
	}
}

// TestTopQuits runs the dashboard through the command and quits it with q
// from the Traffic pane, two tabs on (in the first pane q would filter):
// the terminal is switched to the alternate screen and back, and the
// gateway and key reach the dashboard.
func TestTopQuits(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/workers":                {body: "workers.json"},
		"GET /api/v1/workers/latest-version": {body: `{"version": "v1.4.0"}`},
	})
	r := cliRun{env: gatewayEnv(g), tty: true, stdinTTY: true, stdin: "\t\tq"}.run(t, "top", "--interval", "1s")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	contains(t, "screen", r.stdout, "\x1b[?1049h", "\x1b[?1049l", "svc top", g.URL)
	if i, j := strings.Index(r.stdout, "\x1b[?1049h"), strings.LastIndex(r.stdout, "\x1b[?1049l"); i > j {
		t.Errorf("alternate screen left open")
	}
	if got := g.last("/api/v1/workers").Auth; got != "Bearer svc_k_test" {
		t.Errorf("Authorization %q", got)
	}
}

// A key that may not read the workers (usage:read alone) runs the
// dashboard, whose Workers pane then says it is not shown
// (internal/tui's tests), rather than failing before it starts.
func TestTopWithoutWorkersRead(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/workers": {status: http.StatusForbidden,
			body: `{"detail":"This API key lacks the workers:read permission","error":{"message":"This API key lacks the workers:read permission","type":"permission_error","code":"missing_permission"}}`},
		"GET /api/v1/workers/latest-version": {body: `{"version": "v1.4.0"}`},
	})
	r := cliRun{env: gatewayEnv(g), tty: true, stdinTTY: true, stdin: "\t\tq"}.run(t, "top", "--interval", "1s")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	contains(t, "screen", r.stdout, "\x1b[?1049h", "svc top", "Workers")
}
