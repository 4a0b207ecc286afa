package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"charm.land/lipgloss/v2"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/iostreams"
)

const (
	boxPower = "/api/v1/workers/wk_0000000000000001/power"
	simPower = "/api/v1/workers/wk_0000000000000002/power"
)

// powerFixture is testdata/power.json, an hour of a GPU box ending at
// 04:00 on 2026-01-02.
func powerFixture(t *testing.T) api.PowerHistory {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "power.json"))
	if err != nil {
		t.Fatal(err)
	}
	var h api.PowerHistory
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

var powerFixtureEnd = time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC)

// powerNow is the fixture moved to end now, as the gateway would answer:
// the command charts the hour up to the clock.
func powerNow(t *testing.T) string {
	h := powerFixture(t)
	shift := time.Now().Truncate(time.Minute).Sub(powerFixtureEnd)
	for i := range h.Points {
		h.Points[i].T = h.Points[i].T.Add(shift)
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func powerGateway(t *testing.T) *fakeGateway {
	return newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/workers": {body: "workers.json"},
		"GET " + boxPower:     {body: powerNow(t)},
		"GET " + simPower:     {body: "power_empty.json"},
		"GET /api/v1/workers/wk_free/power": {status: 403,
			body: `{"detail": {"error": {"message": "Power history is part of the Pro and Enterprise plans; this organisation is on free", "type": "plan_required", "code": null, "param": null}}}`},
	})
}

func TestWorkersPower(t *testing.T) {
	g := powerGateway(t)
	t.Run("by name, on a pipe", func(t *testing.T) {
		r := cliRun{env: gatewayEnv(g)}.run(t, "workers", "power", "gpu-box-1")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if q := g.last(boxPower).Query; q.Get("range") != "1h" {
			t.Errorf("query %v, want the default range 1h", q)
		}
		contains(t, "output", r.stdout,
			"gpu-box-1  last hour, 1-minute windows, ", " UTC\n",
			"o gpu0  + cpu  x system", // no colour: a mark per channel
			" W ┤", "└",               // the time axis (a tick may sit on its first column)
			"Energy    0.365 kWh", "Average   406 W", "Peak      570 W", "Coverage  90%", "Method    estimated",
			"gpu0    gpu     NVIDIA GeForce RTX 4090", "450 W", "system  system  -")
		lacks(t, "output", r.stdout, "\x1b", "⣀")
		if strings.Count(r.stdout, "x") < 40 {
			t.Errorf("the system line is not drawn:\n%s", r.stdout)
		}
		if !regexp.MustCompile(`(?m)^KEY\s+SCOPE\s+NAME\s+SOURCE\s+METHOD\s+LIMIT$`).MatchString(r.stdout) {
			t.Errorf("no channel table:\n%s", r.stdout)
		}
		// The chart keeps to 80 columns on a pipe; the channel table is a
		// table, which a pipe gets whole.
		chartPart, _, _ := strings.Cut(r.stdout, "\nEnergy")
		for _, line := range strings.Split(chartPart, "\n") {
			if w := lipgloss.Width(line); w > pipeWidth {
				t.Errorf("line of %d cells:\n%s", w, line)
			}
		}
	})
	t.Run("by id, on a terminal", func(t *testing.T) {
		r := cliRun{env: gatewayEnv(g), tty: true}.run(t, "workers", "power", "wk_0000000000000001", "--range", "24h")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if q := g.last(boxPower).Query; q.Get("range") != "24h" {
			t.Errorf("query %v", q)
		}
		// Colour tells the lines apart, so they are braille.
		contains(t, "output", r.stdout, "\x1b[36m━\x1b[0m gpu0", "\x1b[35m━\x1b[0m cpu", "\x1b[33mestimated\x1b[0m")
	})
	t.Run("no readings", func(t *testing.T) {
		r := cliRun{env: gatewayEnv(g)}.run(t, "workers", "power", "demo-sim")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		contains(t, "output", r.stdout, "demo-sim  last hour", "No power readings in the last hour")
		lacks(t, "output", r.stdout, "┤", "Energy", "KEY")
	})
	t.Run("json", func(t *testing.T) {
		r := cliRun{env: gatewayEnv(g), tty: true}.run(t, "workers", "power", "gpu-box-1", "--json")
		var h api.PowerHistory
		if err := json.Unmarshal([]byte(r.stdout), &h); err != nil || r.code != 0 {
			t.Fatalf("exit %d, %v:\n%s%s", r.code, err, r.stdout, r.stderr)
		}
		if h.WorkerID != "wk_0000000000000001" || len(h.Channels) != 3 || len(h.Points) != 54 || h.Totals.Coverage != 0.9 {
			t.Errorf("--json: %+v", h)
		}
		r = cliRun{env: gatewayEnv(g)}.run(t, "workers", "power", "gpu-box-1", "--jq", ".totals.energy_kwh")
		if r.code != 0 || r.stdout != "0.3653\n" {
			t.Errorf("--jq: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
	})
}

func TestWorkersPowerErrors(t *testing.T) {
	g := powerGateway(t)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"bad range", []string{"gpu-box-1", "--range", "2h"}, exitUsage, `--range must be one of 1h, 24h, 7d, 30d, got "2h"`},
		{"no worker", nil, exitUsage, "takes 1 argument(s), got 0"},
		// Not in the list: taken as an id, which the gateway does not know.
		{"unknown", []string{"wk_gone"}, exitError, "WORKER is a worker's id or name as 'svc workers' lists them."},
		{"free plan", []string{"wk_free"}, exitAuth, "Power history is part of the Pro and Enterprise plans"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(g.sent)
			r := cliRun{env: gatewayEnv(g)}.run(t, append([]string{"workers", "power"}, tc.args...)...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, tc.code, r.stderr)
			}
			if tc.code == exitUsage && len(g.sent) != before {
				t.Error("a usage error sent a request")
			}
		})
	}
}

func TestWorkersPowerAmbiguousName(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{"GET /api/v1/workers": {body: `{"workers": [
		{"worker_id": "wk_a", "worker_name": "gpu", "status": "healthy"},
		{"worker_id": "wk_b", "worker_name": "gpu", "status": "offline"}]}`}})
	r := cliRun{env: gatewayEnv(g)}.run(t, "workers", "power", "gpu")
	if r.code != exitUsage || !strings.Contains(r.stderr, `2 workers are named "gpu" (wk_a, wk_b): give an id instead`) {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
}

// TestPrintPower pins the whole report at a fixed clock: the chart with
// its gap (minutes 22-27) and cpu's own (minutes 45-47), the totals and
// the channels, without colour (a pipe) and with.
func TestPrintPower(t *testing.T) {
	h := powerFixture(t)
	w := api.Worker{WorkerID: h.WorkerID, WorkerName: "gpu-box-1"}
	end := powerFixtureEnd
	for _, tc := range []struct {
		name string
		tty  bool
		r    powerReport
	}{
		{"pipe-80", false, powerReport{worker: w, hist: h, now: end, width: 80}},
		{"colour-100", true, powerReport{worker: w, hist: h, now: end, width: 100}},
		{"unlisted-empty", false, powerReport{worker: api.Worker{WorkerID: "wk_gone"},
			hist: api.PowerHistory{WorkerID: "wk_gone", Range: api.Range7d, ResolutionSeconds: 3600}, now: end, width: 80}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ios, _, out, _ := iostreams.Test()
			ios.SetStdoutTTY(tc.tty)
			if err := printPower(ios, tc.r); err != nil {
				t.Fatal(err)
			}
			compare(t, filepath.Join("testdata", "power", tc.name+".golden"), out.Bytes())
		})
	}
}
