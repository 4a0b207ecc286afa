package e2e

import (
	"encoding/json"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// powerHistory is the part of the power endpoint's answer the tests read.
type powerHistory struct {
	WorkerID          string  `json:"worker_id"`
	Range             string  `json:"range"`
	ResolutionSeconds int     `json:"resolution_seconds"`
	Machine           *string `json:"machine"`
	Channels          []struct {
		Key, Scope, Name, Source, Method string
		Index                            *int
		PowerLimitW                      *float64 `json:"power_limit_w"`
	} `json:"channels"`
	Points []struct {
		T      time.Time          `json:"t"`
		Values map[string]float64 `json:"values"`
	} `json:"points"`
	Totals struct {
		EnergyKWh float64 `json:"energy_kwh"`
		AvgW      float64 `json:"avg_w"`
		PeakW     float64 `json:"peak_w"`
		Coverage  float64 `json:"coverage"`
	} `json:"totals"`
}

func (s *server) power(key, id, rng string) powerHistory {
	s.t.Helper()
	r := s.do("GET", "/api/v1/workers/"+id+"/power?range="+rng, "", bearer(key))
	if r.Status != 200 {
		s.t.Fatalf("power %s = %d %s", rng, r.Status, r.Body)
	}
	var h powerHistory
	if err := json.Unmarshal(r.Body, &h); err != nil {
		s.t.Fatal(err)
	}
	return h
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// TestPowerRecordedMachine runs a worker on a recorded machine (sysfs and
// NVML recordings: two NVIDIA GPUs, an AMD GPU, RAPL, a PSU sensor), then
// reads what the gateway made of it: the live reading, the history at
// every range, energy per request, the metrics, and no gap across a link
// that was down for seconds.
func TestPowerRecordedMachine(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	p := newProxy(t, strings.TrimPrefix(s.URL, "http://"))
	root, _ := filepath.Abs("../power/testdata/sysfs")
	nvml, _ := filepath.Abs("../power/testdata/nvml.json")
	started := time.Now()
	startWorker(t, p.URL(), s.tokenFile(), "meter-box", "--engine", "sim=tps=0,ttft=0",
		"--power", "sensors", "--power-root", root, "--power-nvml", nvml,
		"--power-interval", "250ms", "--power-window", "1s")

	// The live reading, on the workers list.
	w := s.workerNamed(key, "meter-box", func(w map[string]any) bool {
		p, _ := w["power"].(map[string]any)
		watts, _ := p["watts"].(map[string]any)
		return len(watts) == 5
	})
	id := w["worker_id"].(string)
	live := w["power"].(map[string]any)
	watts := live["watts"].(map[string]any)
	for key, want := range map[string]float64{"gpu0": 300, "gpu2": 120, "cpu": 0, "system": 400} {
		// Counter readings are timed by the sampler, so a loaded machine
		// shifts them a little.
		if got, _ := watts[key].(float64); !near(got, want, want*0.02+0.5) {
			t.Errorf("live %s = %v W, want %v", key, watts[key], want)
		}
	}
	if live["machine"] != "measured" {
		t.Errorf("live machine = %v", live["machine"])
	}

	// A request that generates for about a second takes the GPUs' energy
	// over that second: it is the only one running.
	r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "warm\nsim: ttft=1200ms tokens=3", false), bearer(key))
	if r.Status != 200 {
		t.Fatalf("chat = %d %s", r.Status, r.Body)
	}
	row := waitRow(t, s, key, r.Header.Get("X-Request-Id"))
	wh, ok := row["energy_wh"].(float64)
	secs := row["request_duration_ms"].(float64) / 1000
	// gpu0 + gpu1 + gpu2: 300 + 40 + 120 W (gpu1 is 200 W after 30 s).
	if lo, hi := 460*secs/3600*0.7, 620*secs/3600*1.1; !ok || wh < lo || wh > hi {
		t.Errorf("energy_wh = %v for %.2f s, want between %.4f and %.4f", row["energy_wh"], secs, lo, hi)
	}

	// The link goes down for four seconds; the worker keeps its windows
	// and sends them when it is back.
	p.hold(true)
	p.cut()
	time.Sleep(4 * time.Second) // the outage itself: windows pile up at the worker
	p.hold(false)
	s.workerNamed(key, "meter-box", statusIs("healthy"))

	// No gap: once the windows held back have arrived, they cover the
	// worker's whole life but its first sample and the window still open,
	// and nothing twice.
	var h powerHistory
	var covered, elapsed float64
	if !harness.Eventually(15*time.Second, func() bool {
		h = s.power(key, id, "1h")
		covered, elapsed = h.Totals.Coverage*3600, time.Since(started).Seconds()
		return covered >= elapsed-2.5
	}) {
		t.Errorf("covered %.1f s of the %.1f s since the worker started (link down 4 s)", covered, elapsed)
	}
	if h.WorkerID != id || h.Range != "1h" || h.ResolutionSeconds != 60 || h.Machine == nil || *h.Machine != "measured" {
		t.Fatalf("history head: %+v", h)
	}
	want := map[string]struct{ scope, source, name string }{
		"gpu0":   {"gpu", "nvml", "NVIDIA H100 80GB HBM3"},
		"gpu1":   {"gpu", "nvml", "NVIDIA Tesla P100-PCIE-16GB"},
		"gpu2":   {"gpu", "amdgpu", "AMD Radeon PRO W7800"},
		"cpu":    {"cpu", "rapl", ""},
		"system": {"system", "hwmon", ""},
	}
	for _, c := range h.Channels {
		wc, ok := want[c.Key]
		if !ok || c.Scope != wc.scope || c.Source != wc.source || c.Method != "measured" || (wc.name != "" && c.Name != wc.name) {
			t.Errorf("channel %+v", c)
		}
		if c.Scope == "gpu" && (c.Index == nil || c.PowerLimitW == nil) {
			t.Errorf("gpu channel %s without index or limit", c.Key)
		}
		delete(want, c.Key)
	}
	if len(want) != 0 {
		t.Errorf("channels missing: %v", want)
	}
	if len(h.Points) == 0 || len(h.Points) > 2 {
		t.Fatalf("1h points: %+v", h.Points)
	}
	for _, pt := range h.Points {
		v := pt.Values
		// gpu0 is read from an energy counter, timed by the sampler: on a
		// loaded machine a read that comes late moves a fraction of a
		// second's energy across the minute's boundary, which may leave
		// only seconds in a point.
		if !near(v["gpu0"], 300, 15) || !near(v["gpu2"], 120, 2) || !near(v["system"], 400, 5) || !near(v["cpu"], 0, 0.1) ||
			v["gpu1"] < 39 || v["gpu1"] > 201 || pt.T.Unix()%60 != 0 {
			t.Errorf("point %v %v", pt.T, v)
		}
	}
	if covered > elapsed {
		t.Errorf("covered %.1f s of the %.1f s since the worker started: some twice", covered, elapsed)
	}
	if !near(h.Totals.AvgW, 400, 5) || !near(h.Totals.PeakW, 400, 5) || !near(h.Totals.EnergyKWh, h.Totals.AvgW*covered/3.6e6, 1e-6) {
		t.Errorf("totals %+v", h.Totals)
	}

	for _, tc := range []struct {
		rng string
		res int
	}{{"24h", 300}, {"7d", 3600}, {"30d", 3600}} {
		g := s.power(key, id, tc.rng)
		if g.Range != tc.rng || g.ResolutionSeconds != tc.res || len(g.Points) == 0 || len(g.Points) > 2 || len(g.Channels) != 5 {
			t.Errorf("%s: %+v", tc.rng, g)
		}
		// The same readings at every resolution, give or take the windows
		// that arrived between the reads.
		if !near(g.Totals.EnergyKWh, h.Totals.EnergyKWh, 400*3/3.6e6) || !near(g.Totals.AvgW, 400, 5) {
			t.Errorf("%s totals %+v, 1h %+v", tc.rng, g.Totals, h.Totals)
		}
		for _, pt := range g.Points {
			if pt.T.Unix()%int64(tc.res) != 0 || !near(pt.Values["gpu0"], 300, 4) {
				t.Errorf("%s point %v %v", tc.rng, pt.T, pt.Values)
			}
		}
	}

	// What the machine used today, beside the live reading.
	w = s.workerNamed(key, "meter-box", func(w map[string]any) bool { return true })
	today, _ := w["power"].(map[string]any)["energy_today_kwh"].(float64)
	if today <= 0 || today > 400*elapsed/3.6e6 {
		t.Errorf("energy_today_kwh = %v after %.1f s at 400 W", today, elapsed)
	}

	m := string(s.do("GET", "/metrics", "").Body)
	for _, line := range []string{
		`svc_worker_power_watts{channel="system",method="measured",worker_id="` + id + `",worker_name="meter-box"} 400`,
		`svc_worker_energy_joules_total{channel="gpu0",worker_id="` + id + `"}`,
	} {
		if !strings.Contains(m, line) {
			t.Errorf("metrics lack %s", line)
		}
	}
	if !regexp.MustCompile(`(?m)^svc_worker_concurrency_limit\{model="[^"]+",worker_id="` + id + `",worker_name="meter-box"\} [1-9][0-9]*$`).MatchString(m) {
		t.Errorf("metrics lack the worker's concurrency limit")
	}

	// Bad input and other organisations' workers.
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/api/v1/workers/" + id + "/power?range=2h", 422},
		{"/api/v1/workers/" + id + "/power?range=", 422},
		{"/api/v1/workers/" + id + "/power", 200}, // 1h
		{"/api/v1/workers/wk_nobody/power", 404},
	} {
		if r := s.do("GET", tc.path, "", bearer(key)); r.Status != tc.status {
			t.Errorf("GET %s = %d %s", tc.path, r.Status, r.Body)
		}
	}
	s.console("POST", "/api/v1/console/orgs", `{"name":"acme","plan":"pro"}`)
	s.console("POST", "/api/v1/console/users", `{"name":"ann"}`)
	s.console("PUT", "/api/v1/console/orgs/acme/members/ann", `{"role":"owner"}`)
	acme := s.console("POST", "/api/v1/console/orgs/acme/keys", `{"user":"ann","name":"k"}`).JSON(t)["secret"].(string)
	if r := s.do("GET", "/api/v1/workers/"+id+"/power", "", bearer(acme)); r.Status != 404 || strings.Contains(string(r.Body), "gpu0") {
		t.Errorf("another organisation's power = %d %s", r.Status, r.Body)
	}
}

// TestPowerSimulated: a sim worker reports the simulated profile, labelled
// so, and a worker with power off has no readings: empty channels and
// points, machine null.
func TestPowerSimulated(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "sim-box", "--engine", "sim=tps=0,ttft=0", "--power-interval", "100ms", "--power-window", "1s")
	startWorker(t, s.URL, s.tokenFile(), "dark-box", "--engine", "sim=tps=0,ttft=0", "--power", "off")

	w := s.workerNamed(key, "sim-box", func(w map[string]any) bool { return w["power"] != nil })
	id := w["worker_id"].(string)
	var h powerHistory
	harness.Eventually(10*time.Second, func() bool {
		h = s.power(key, id, "1h")
		return len(h.Points) > 0
	})
	if len(h.Points) == 0 || len(h.Channels) == 0 || h.Machine == nil {
		t.Fatalf("simulated history: %+v", h)
	}
	for _, c := range h.Channels {
		if c.Source != "simulated" {
			t.Errorf("simulated channel %+v", c)
		}
	}

	dark := s.workerNamed(key, "dark-box", statusIs("healthy"))
	if dark["power"] != nil {
		t.Errorf("power off, yet a reading: %v", dark["power"])
	}
	r := s.do("GET", "/api/v1/workers/"+dark["worker_id"].(string)+"/power?range=24h", "", bearer(key))
	if r.Status != 200 || !strings.Contains(string(r.Body), `"machine":null`) ||
		!strings.Contains(string(r.Body), `"channels":[]`) || !strings.Contains(string(r.Body), `"points":[]`) {
		t.Errorf("no readings = %d %s", r.Status, r.Body)
	}
}
