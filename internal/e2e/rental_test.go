package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/harness"
	"github.com/svc-dev/svc/internal/rental/lambda/lambdatest"
)

// rentalView is the part of a rental the tests read.
type rentalView struct {
	ID            string     `json:"id"`
	Name          string     `json:"name"`
	Status        string     `json:"status"`
	WorkerID      string     `json:"worker_id"`
	Connected     bool       `json:"connected"`
	StartedAt     *time.Time `json:"started_at"`
	StoppedAt     *time.Time `json:"stopped_at"`
	Error         *string    `json:"error"`
	BootPhase     *string    `json:"boot_phase"`
	Price         float64    `json:"price_per_hour_gbp"`
	Accrued       float64    `json:"accrued_cost_gbp"`
	Hours         float64    `json:"hours_billed"`
	SecondsBilled int64      `json:"seconds_billed"`
	ModelDownload *struct {
		Total, Completed int64
		ProgressPct      float64 `json:"progress_pct"`
	} `json:"model_download"`
}

// rentalGateway is a server whose default organisation can pay for
// rentals, and the admin key (an owner's).
func rentalGateway(t *testing.T, dir string, args ...string) (*server, string) {
	t.Helper()
	return rentalGatewayEnv(t, dir, nil, args...)
}

// rentalGatewayEnv is rentalGateway with env added to the server's.
func rentalGatewayEnv(t *testing.T, dir string, env []string, args ...string) (*server, string) {
	t.Helper()
	args = append([]string{"--local-boot-step", "150ms", "--rental-tick", "100ms"}, args...)
	s := startServerEnv(t, dir, env, args...)
	for _, step := range []struct{ method, path, body string }{
		{"PATCH", "/api/v1/console/orgs/default", `{"payment_card_on_file": true}`},
		{"POST", "/api/v1/console/orgs/default/credit", `{"amount_gbp": 20}`},
	} {
		if r := s.console(step.method, step.path, step.body); r.Status >= 300 {
			t.Fatalf("%s %s: %d %s", step.method, step.path, r.Status, r.Body)
		}
	}
	killRentalWorkers(t, s.Data)
	return s, s.adminKey()
}

// killRentalWorkers kills, when the test ends, the workers local rentals
// left running: they outlive their gateway by design.
func killRentalWorkers(t *testing.T, dataDir string) {
	t.Cleanup(func() {
		pids, _ := filepath.Glob(filepath.Join(dataDir, "rentals", "local", "*", "pid"))
		for _, f := range pids {
			b, _ := os.ReadFile(f)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	})
}

// newKey makes an owner key with the rental permission: one POST a minute
// each, so every rental of a test has its own.
func newKey(t *testing.T, s *server, name string) string {
	t.Helper()
	r := s.console("POST", "/api/v1/console/orgs/default/keys",
		fmt.Sprintf(`{"user":"admin","name":%q,"permissions":["compute:write","inference:write","workers:read"]}`, name))
	if r.Status != 201 && r.Status != 200 {
		t.Fatalf("key: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["secret"].(string)
}

func rent(t *testing.T, s *server, key, body string) (reply, rentalView) {
	t.Helper()
	r := s.do("POST", "/api/v1/compute/instances", body, bearer(key))
	var v rentalView
	if r.Status == 202 {
		if err := json.Unmarshal(r.Body, &v); err != nil {
			t.Fatal(err)
		}
	}
	return r, v
}

func (s *server) rental(key, id string) rentalView {
	s.t.Helper()
	r := s.do("GET", "/api/v1/compute/instances/"+id, "", bearer(key))
	if r.Status != 200 {
		s.t.Fatalf("rental %s = %d %s", id, r.Status, r.Body)
	}
	var v rentalView
	if err := json.Unmarshal(r.Body, &v); err != nil {
		s.t.Fatal(err)
	}
	return v
}

// waitRental polls a rental until ok, returning every boot phase and
// download figure seen on the way.
func (s *server) waitRental(key, id string, ok func(rentalView) bool) (rentalView, []string, []float64) {
	s.t.Helper()
	var phases []string
	var progress []float64
	var v rentalView
	if !harness.Eventually(30*time.Second, func() bool {
		v = s.rental(key, id)
		if v.BootPhase != nil && (len(phases) == 0 || phases[len(phases)-1] != *v.BootPhase) {
			phases = append(phases, *v.BootPhase)
		}
		if v.ModelDownload != nil {
			progress = append(progress, v.ModelDownload.ProgressPct)
		}
		return ok(v)
	}) {
		s.t.Fatalf("rental %s never got there: %+v (phases %v)\nlog:\n%s", id, v, phases, tail(s.Log().String()))
	}
	return v, phases, progress
}

func ready(v rentalView) bool {
	return v.Status == "running" && v.Connected && v.ModelDownload == nil && v.BootPhase != nil && *v.BootPhase == "ready"
}

// billedRight checks a stopped rental's bill against its own clock: whole
// seconds from started_at to stopped_at, at its price.
func billedRight(t *testing.T, v rentalView) {
	t.Helper()
	if v.StartedAt == nil || v.StoppedAt == nil {
		t.Fatalf("not started and stopped: %+v", v)
	}
	secs := int64(v.StoppedAt.Sub(*v.StartedAt) / time.Second)
	pence := math.Round(v.Price * 100)
	want := math.Floor((pence*float64(secs)+1800)/3600) / 100
	if v.SecondsBilled != secs || v.Accrued != want || v.Hours != math.Round(float64(secs)/3600*1e4)/1e4 {
		t.Fatalf("billed %d s, £%.2f, %v h; the clock says %d s, £%.2f", v.SecondsBilled, v.Accrued, v.Hours, secs, want)
	}
}

// The whole lifecycle on the local provider: rent, watch the boot and the
// download, chat with the rental's worker, stop, and the bill.
func TestRentalLocalLifecycle(t *testing.T) {
	s, admin := rentalGateway(t, "")
	key := newKey(t, s, "renter")

	r := s.do("GET", "/api/v1/compute/catalogue", "", bearer(key))
	if r.Status != 200 || !strings.Contains(string(r.Body), `"gpu_model_id":"sim-l4"`) || !strings.Contains(string(r.Body), `"tier_id":"uk-sovereign"`) {
		t.Fatalf("catalogue %d %s", r.Status, r.Body)
	}
	if r := s.do("GET", "/api/v1/compute/models", "", bearer(key)); r.Status != 200 || !strings.Contains(string(r.Body), `"variant_id":"qwen3-8b-q4"`) {
		t.Fatalf("models %d %s", r.Status, r.Body)
	}

	r, v := rent(t, s, key, `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign","models":["qwen3-8b-q4"],"name":"rented-l4"}`)
	if r.Status != 202 || v.Status != "provisioning" || v.Connected || v.Accrued != 0 || v.StartedAt != nil || v.Name != "rented-l4" {
		t.Fatalf("rent = %d %s", r.Status, r.Body)
	}
	v, phases, progress := s.waitRental(key, v.ID, ready)
	// worker_started lasts only until the worker dials, often less than a
	// poll; the phases either side of it must show.
	for _, want := range []string{"pulling_image", "runtime_ready", "worker_connected", "ready"} {
		if !strings.Contains(strings.Join(phases, " "), want) {
			t.Errorf("phase %s never seen: %v", want, phases)
		}
	}
	if len(progress) < 2 || progress[0] >= progress[len(progress)-1] {
		t.Errorf("download progress %v", progress)
	}

	// The rental is a worker of the organisation and serves its model,
	// which is always on: loaded once installed, so that no request waits
	// for its load.
	w := s.workerNamed(admin, "rented-l4", func(w map[string]any) bool {
		models, _ := w["models"].([]any)
		for _, m := range models {
			if m, _ := m.(map[string]any); m["id"] == "qwen3-8b-q4" {
				return w["status"] == "healthy" && m["always_on"] == true && m["loaded"] == true
			}
		}
		return false
	})
	if w["worker_id"] != v.WorkerID {
		t.Fatalf("worker %v, rental's %s", w["worker_id"], v.WorkerID)
	}
	var loads []map[string]any
	if !harness.Eventually(5*time.Second, func() bool {
		loads = s.events(admin, "?event_type=model_loaded&worker_id="+v.WorkerID)
		return len(loads) == 1 && loads[0]["metadata"].(map[string]any)["always_on"] == true
	}) {
		t.Fatalf("model_loaded events %v, want the always-on load", loads)
	}
	chat := s.do("POST", "/v1/chat/completions", chatBody("qwen3-8b-q4", "hello rental", false), bearer(key))
	if chat.Status != 200 || chat.Header.Get("X-Worker-Id") != v.WorkerID {
		t.Fatalf("chat = %d via %q: %s", chat.Status, chat.Header.Get("X-Worker-Id"), chat.Body)
	}
	if row := s.usageRow(admin, chat.Header.Get("X-Request-Id")); row["cold_start"] == true {
		t.Fatalf("the rented model's first request was a cold start: %v", row)
	}
	if r := s.do("GET", "/api/v1/compute/instances/"+v.ID+"/audit", "", bearer(key)); r.Status != 200 ||
		!strings.Contains(string(r.Body), `"tier_id":"uk-sovereign"`) || !strings.Contains(string(r.Body), `"operator_domicile":"GB"`) {
		t.Fatalf("audit %d %s", r.Status, r.Body)
	}
	spend := s.do("GET", "/api/v1/compute/spend", "", bearer(key)).JSON(t)
	if spend["active_count"].(float64) != 1 || len(spend["lines"].([]any)) != 1 {
		t.Fatalf("spend %v", spend)
	}

	// A bill of at least a second, so that the one below is not trivially
	// right.
	if !harness.Eventually(10*time.Second, func() bool { return s.rental(key, v.ID).SecondsBilled >= 1 }) {
		t.Fatalf("no second billed: %+v", s.rental(key, v.ID))
	}
	r = s.do("DELETE", "/api/v1/compute/instances/"+v.ID, "", bearer(key))
	if r.Status != 200 {
		t.Fatalf("stop = %d %s", r.Status, r.Body)
	}
	var stopped rentalView
	_ = json.Unmarshal(r.Body, &stopped)
	if stopped.Status != "stopped" || stopped.SecondsBilled < 1 || stopped.Connected {
		t.Fatalf("stopped %+v", stopped)
	}
	billedRight(t, stopped)
	if got := s.rental(key, v.ID); got.Connected {
		t.Fatalf("a stopped rental read again says connected: %+v", got)
	}
	s.workerNamed(admin, "rented-l4", statusIs("offline"))
	if chat := s.do("POST", "/v1/chat/completions", chatBody("qwen3-8b-q4", "anyone?", false), bearer(key)); chat.Status == 200 {
		t.Fatal("a stopped rental still serves")
	}
	// Billing counts whole seconds: only once more than one has passed can
	// a bill that went on after the stop show it.
	time.Sleep(1100 * time.Millisecond)
	if later := s.rental(key, v.ID); later.SecondsBilled != stopped.SecondsBilled || later.Accrued != stopped.Accrued {
		t.Fatalf("billing went on after the stop: %+v", later)
	}
	if r := s.do("DELETE", "/api/v1/compute/instances/"+v.ID, "", bearer(key)); r.Status != 200 {
		t.Fatalf("second stop = %d %s", r.Status, r.Body)
	}
}

// Each refusal of a rental request over HTTP, with its status.
func TestRentalRules(t *testing.T) {
	s, _ := rentalGateway(t, "", "--local-capacity", "sim-a100=1")
	k1 := newKey(t, s, "k1")
	if r, _ := rent(t, s, k1, `{"gpu_model_id":"sim-a100","tier_id":"uk"}`); r.Status != 202 {
		t.Fatalf("first a100 = %d %s", r.Status, r.Body)
	}
	// 429: one a minute per key, and a refused call counts too.
	r, _ := rent(t, s, k1, `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign"}`)
	if after, _ := strconv.Atoi(r.Header.Get("Retry-After")); r.Status != 429 || after < 50 || after > 60 {
		t.Fatalf("second call = %d (Retry-After %q) %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	tests := []struct {
		name, setup, body string
		status            int
		says              string
	}{
		{"no capacity", "", `{"gpu_model_id":"sim-a100","tier_id":"uk"}`, 409, "No capacity"},
		{"not enough system memory", "", `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign","models":["gpt-oss-120b-mxfp4"]}`, 400, "system memory"},
		{"malformed", "", `{"gpu_model_id":"sim-l4"}`, 422, "tier_id"},
		{"unknown GPU", "", `{"gpu_model_id":"tpu-v5","tier_id":"global"}`, 400, "Unknown GPU"},
		{"no card", `{"payment_card_on_file": false}`, `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign"}`, 402, "payment card"},
		{"budget reached", `{"payment_card_on_file": true, "monthly_budget_gbp": 0}`, `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign"}`, 402, "budget"},
		{"below the floor", `{"monthly_budget_gbp": null, "jurisdiction_floor": "uk"}`, `{"gpu_model_id":"sim-h100","tier_id":"global"}`, 400, "jurisdiction floor"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != "" {
				if r := s.console("PATCH", "/api/v1/console/orgs/default", tc.setup); r.Status != 200 {
					t.Fatalf("setup %d %s", r.Status, r.Body)
				}
			}
			r, _ := rent(t, s, newKey(t, s, fmt.Sprintf("rules-%d", i)), tc.body)
			if r.Status != tc.status || !strings.Contains(string(r.Body), tc.says) {
				t.Fatalf("= %d %s, want %d with %q", r.Status, r.Body, tc.status, tc.says)
			}
		})
	}
	// A floor that names no tier would admit nothing: a typo is refused.
	if r := s.console("PATCH", "/api/v1/console/orgs/default", `{"jurisdiction_floor": "mars"}`); r.Status != 422 ||
		!strings.Contains(string(r.Body), "uk-sovereign") {
		t.Fatalf("an unknown floor = %d %s, want 422 naming the tiers", r.Status, r.Body)
	}
	// Credit for the new GPU's first hour plus the running a100's next hour.
	s.console("PATCH", "/api/v1/console/orgs/default", `{"jurisdiction_floor": null}`)
	s.console("POST", "/api/v1/console/orgs/default/credit", `{"amount_gbp": -18}`)
	if r, _ := rent(t, s, newKey(t, s, "credit"), `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign"}`); r.Status != 402 || !strings.Contains(string(r.Body), "credit") {
		t.Fatalf("credit = %d %s", r.Status, r.Body)
	}
	// A plain member may read but not rent.
	s.console("POST", "/api/v1/console/users", `{"name":"mo"}`)
	s.console("PUT", "/api/v1/console/orgs/default/members/mo", `{"role":"member"}`)
	member := s.console("POST", "/api/v1/console/orgs/default/keys", `{"user":"mo","name":"m","permissions":["compute:write"]}`).JSON(t)["secret"].(string)
	if r := s.do("GET", "/api/v1/compute/spend", "", bearer(member)); r.Status != 200 {
		t.Fatalf("member spend = %d %s", r.Status, r.Body)
	}
	if r, _ := rent(t, s, member, `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign"}`); r.Status != 403 {
		t.Fatalf("member rent = %d %s", r.Status, r.Body)
	}
}

// The gateway is killed while one rental boots and another runs; after a
// restart on the same data directory the running one has kept billing from
// its first connection and its worker is back, and the bill of both is
// exact when they stop.
func TestRentalSurvivesAGatewayKill(t *testing.T) {
	dir := t.TempDir()
	s, admin := rentalGateway(t, dir)
	running, _ := rent(t, s, newKey(t, s, "a"), `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign","name":"keeps-running"}`)
	var run rentalView
	_ = json.Unmarshal(running.Body, &run)
	run, _, _ = s.waitRental(admin, run.ID, ready)
	// A refused call counts against its key's minute, across the kill too.
	refused := newKey(t, s, "refused")
	if r, _ := rent(t, s, refused, `{"gpu_model_id":"sim-l4"}`); r.Status != 422 {
		t.Fatalf("a malformed rental request = %d %s", r.Status, r.Body)
	}

	if err := s.stop(syscall.SIGKILL); err == nil {
		t.Fatal("the gateway was not killed")
	}
	// Down for a while, the machine running on: long enough for a whole
	// second to be billed for the outage, which the check after the
	// restart asks for.
	time.Sleep(1500 * time.Millisecond)
	// Back on the same address, which the rental's worker keeps dialling.
	addr := strings.TrimPrefix(s.URL, "http://")
	s2 := startServer(t, dir, "--addr", addr, "--local-boot-step", "150ms", "--rental-tick", "100ms")
	after := s2.rental(admin, run.ID)
	if after.Status != "running" || !after.StartedAt.Equal(*run.StartedAt) || after.SecondsBilled < run.SecondsBilled+1 {
		t.Fatalf("after the restart %+v, before %+v", after, run)
	}
	s2.workerNamed(admin, "keeps-running", statusIs("healthy"))
	if r, _ := rent(t, s2, refused, `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign"}`); r.Status != 429 {
		t.Fatalf("after the restart, the key whose call was refused before it = %d %s, want 429", r.Status, r.Body)
	}

	// Killed again while a new rental boots.
	booting, _ := rent(t, s2, newKey(t, s2, "b"), `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign","name":"cut-short"}`)
	var boot rentalView
	_ = json.Unmarshal(booting.Body, &boot)
	if err := s2.stop(syscall.SIGKILL); err == nil {
		t.Fatal("the gateway was not killed")
	}
	s3 := startServer(t, dir, "--addr", addr, "--local-boot-step", "150ms", "--rental-tick", "100ms")
	// The boot was cut short with its gateway, or finished and connected:
	// either way the rental is settled, never left provisioning for ever.
	b, _, _ := s3.waitRental(admin, boot.ID, func(v rentalView) bool {
		return v.Status == "stopped" || v.Status == "running" && v.Connected
	})
	if b.Status == "stopped" && (b.Error == nil || b.SecondsBilled != 0) {
		t.Fatalf("cut-short rental %+v", b)
	}
	for _, id := range []string{run.ID, boot.ID} {
		r := s3.do("DELETE", "/api/v1/compute/instances/"+id, "", bearer(admin))
		var v rentalView
		_ = json.Unmarshal(r.Body, &v)
		if r.Status != 200 || v.Status != "stopped" {
			t.Fatalf("stop %s = %d %s", id, r.Status, r.Body)
		}
		if v.StartedAt != nil {
			billedRight(t, v)
		}
	}
	pids, _ := filepath.Glob(filepath.Join(dir, "rentals", "local", "*", "pid"))
	if len(pids) != 0 {
		t.Fatalf("machines left after every rental stopped: %v", pids)
	}
}

// A rental on the Lambda Cloud adapter, against a fake of its API: slow
// provisioning, the boot script's worker connecting with the rental's
// token, and a terminate that fails once before the stop is confirmed.
func TestRentalLambda(t *testing.T) {
	fake := lambdatest.NewServer(t, lambdatest.WithBootPolls(3), lambdatest.WithCapacity("gpu_1x_h100_pcie", "us-east-1", 1))
	srv := startServerEnv(t, "", []string{"LAMBDA_API_KEY=" + fake.Key()},
		"--rental-providers", "lambda", "--lambda-url", fake.BaseURL(), "--rental-tick", "100ms")
	srv.console("PATCH", "/api/v1/console/orgs/default", `{"payment_card_on_file": true}`)
	srv.console("POST", "/api/v1/console/orgs/default/credit", `{"amount_gbp": 500}`)
	key := srv.adminKey()

	cat := srv.do("GET", "/api/v1/compute/catalogue", "", bearer(key))
	if cat.Status != 200 || !strings.Contains(string(cat.Body), `"gpu_model_id":"h100-80gb"`) {
		t.Fatalf("catalogue %d %s", cat.Status, cat.Body)
	}
	r, v := rent(t, srv, key, `{"gpu_model_id":"h100-80gb","tier_id":"global","models":["qwen3-8b-q4"]}`)
	if r.Status != 202 {
		t.Fatalf("rent = %d %s", r.Status, r.Body)
	}
	launches := fake.Launches()
	if len(launches) != 1 {
		t.Fatalf("launches %+v", launches)
	}
	audit := srv.do("GET", "/api/v1/compute/instances/"+v.ID+"/audit", "", bearer(key)).JSON(t)
	instance := audit["instance_id"].(string)
	if audit["operator_legal_entity"] != "Lambda, Inc." || audit["operator_domicile"] != "US" {
		t.Fatalf("audit %v", audit)
	}
	// The machine boots slowly; its boot script carries the token and the
	// worker's command. Here the test is the machine: it runs that worker
	// on the simulator instead of Ollama.
	script := fake.UserData(instance)
	token := between(script, "printf '%s' ", " > /etc/svc/worker.token")
	if !strings.HasPrefix(token, "svc_w_") || !strings.Contains(script, "--name 'Rented H100 80GB'") {
		t.Fatalf("boot script:\n%s", script)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.waitRental(key, v.ID, func(v rentalView) bool { return v.BootPhase != nil && *v.BootPhase == "runtime_ready" })
	// A worker with another name is refused the rental's token.
	bad := launchWorker(t, srv.URL, tokenFile, "impostor", "--engine", "sim")
	select {
	case <-bad.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("an impostor with the rental's token kept running")
	}
	startWorker(t, srv.URL, tokenFile, "Rented H100 80GB", "--engine", "sim=pull=300ms", "--pull", "qwen3-8b-q4")
	v, _, _ = srv.waitRental(key, v.ID, ready)

	fake.FailTerminateOnce(instance)
	r = srv.do("DELETE", "/api/v1/compute/instances/"+v.ID, "", bearer(key))
	var stopped rentalView
	_ = json.Unmarshal(r.Body, &stopped)
	if r.Status != 200 || stopped.Status != "stopped" {
		t.Fatalf("stop = %d %s", r.Status, r.Body)
	}
	billedRight(t, stopped)
	if st, ok := fake.Status(instance); ok && st != "terminated" {
		t.Fatalf("the machine is %q after the stop", st)
	}
	if n := fake.Calls("POST /instance-operations/terminate"); n < 2 {
		t.Fatalf("terminate called %d times; the first fails", n)
	}
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	out, _, _ := strings.Cut(rest, to)
	return out
}
