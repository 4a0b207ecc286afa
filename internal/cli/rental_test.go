package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/iostreams"
	"github.com/svc-dev/svc/internal/money"
)

const (
	instances  = "/api/v1/compute/instances"
	coderID    = "1a2b9f00-0000-4000-8000-000000000002"
	stoppedID  = "0c0d0e0f-0000-4000-8000-000000000001"
	newRentID  = "3c3c3c3c-0000-4000-8000-000000000006"
	newRentURL = instances + "/" + newRentID
)

// rentalGateway serves the rental fixtures; routes adds to or replaces
// them.
func rentalGateway(t *testing.T, routes map[string]fakeReply) *fakeGateway {
	all := map[string]fakeReply{
		"GET /api/v1/compute/catalogue":               {body: "catalogue.json"},
		"GET /api/v1/compute/models":                  {body: "rentable_models.json"},
		"GET /api/v1/compute/spend":                   {body: "spend.json"},
		"GET " + instances:                            {body: "rentals.json"},
		"GET " + instances + "/" + coderID + "/audit": {body: "audit.json"},
	}
	for k, v := range routes {
		all[k] = v
	}
	return newFakeGateway(t, all)
}

// rental is a rental of the new A100 in tier uk at £2.10/h, changed by
// fn, as JSON.
func rental(t *testing.T, fn func(r *api.Rental)) string {
	t.Helper()
	r := api.Rental{ID: newRentID, Name: "Rented A100 80GB", GPUModelID: "a100-80gb", Label: "A100 80GB",
		RequestedTierID: "uk", TierLabel: "UK", Status: api.RentalProvisioning, Models: []string{},
		PricePerHourGBP: 210, CreatedAt: time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC), BootPhase: ptrTo(api.BootQueued)}
	if fn != nil {
		fn(&r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ptrTo[T any](v T) *T { return &v }

// booted moves a rental on to running with its worker connected.
func booted(r *api.Rental) {
	started := time.Date(2026, 1, 2, 4, 3, 0, 0, time.UTC)
	r.Status, r.Connected, r.StartedAt, r.WorkerID = api.RentalRunning, true, &started, "wk_0000000000000b06"
	r.BootPhase, r.AccruedCostGBP, r.SecondsBilled = ptrTo(api.BootWorkerConnected), 2, 30
}

func TestCatalogue(t *testing.T) {
	g := rentalGateway(t, nil)
	r := cliRun{env: gatewayEnv(g)}.run(t, "catalogue")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 5 {
		t.Fatalf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	for i, re := range []string{
		`^GPU\s+LABEL\s+VRAM\s+COUNT\s+TIER\s+PRICE/H\s+AVAILABLE\s+ALLOWED\s+MAX RAM$`,
		`^a100-80gb\s+A100 80GB\s+80 GB\s+1\s+uk-sovereign\s+£2\.50\s+yes\s+yes\s+256 GB$`,
		`^a100-80gb\s+A100 80GB\s+80 GB\s+1\s+uk\s+£2\.10\s+no\s+yes\s+64 GB$`, // a pipe gets every row whole
		`^a100-80gb\s+A100 80GB\s+80 GB\s+1\s+global\s+£1\.40\s+yes\s+no\s+-$`,
		`^rtx-4090\s+RTX 4090\s+24 GB\s+2\s+uk\s+£0\.55\s+yes\s+yes\s+128 GB$`,
	} {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %s", i, lines[i], re)
		}
	}
	// A terminal groups a GPU's tiers under it, in colour; the US
	// spelling is an alias.
	r = cliRun{env: gatewayEnv(g), tty: true}.run(t, "catalog")
	lines = strings.Split(strings.TrimSpace(ansi.ReplaceAllString(r.stdout, "")), "\n")
	if r.code != 0 || !regexp.MustCompile(`^\s+uk\s+£2\.10`).MatchString(lines[2]) {
		t.Fatalf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	contains(t, "catalogue on a terminal", r.stdout, "\x1b[32myes\x1b[0m", "\x1b[33mno\x1b[0m", "\x1b[31mno\x1b[0m")

	r = cliRun{env: gatewayEnv(g)}.run(t, "catalogue", "models")
	if r.code != 0 ||
		!regexp.MustCompile(`(?m)^VARIANT\s+MODEL\s+PUBLISHER\s+SIZE\s+QUANT\s+MIN VRAM\s+MIN RAM\s+DOWNLOAD\s+DEFAULT$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^qwen3-8b-q4\s+Qwen3 8B\s+Alibaba Qwen\s+8B\s+Q4_K_M\s+8 GB\s+-\s+5\.2 GB\s+yes$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^llama-3\.3-70b-q8\s+Llama 3\.3 70B Instruct\s+Meta\s+70B\s+Q8_0\s+80 GB\s+96 GB\s+75 GB\s+-$`).MatchString(r.stdout) {
		t.Errorf("models: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"catalogue", "--jq", `.[] | select(any(.tiers[]; .allowed and .available)) | .gpu_model_id`}, "a100-80gb\nrtx-4090\n"},
		{[]string{"catalogue", "--jq", `.[0].tiers[1].price_per_hour_gbp`}, "2.10\n"},
		{[]string{"catalogue", "models", "--jq", `[.[].variants[] | select(.min_ram_gb != null) | .variant_id]`}, "[\n  \"llama-3.3-70b-q8\"\n]\n"},
	} {
		r := cliRun{env: gatewayEnv(g)}.run(t, tc.args...)
		if r.code != 0 || r.stdout != tc.want {
			t.Errorf("%v: exit %d %q, want %q %s", tc.args, r.code, r.stdout, tc.want, r.stderr)
		}
	}
}

func TestRentalsList(t *testing.T) {
	g := rentalGateway(t, nil)
	r := cliRun{env: gatewayEnv(g)}.run(t, "rentals")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 6 {
		t.Fatalf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	for i, re := range []string{
		`^ID\s+NAME\s+GPU\s+TIER\s+STATUS\s+PHASE/DOWNLOAD\s+PRICE/H\s+COST\s+HOURS\s+STARTED$`,
		`^1a2b3c4d\s+Rented H100 80GB\s+H100 80GB\s+UK\s+provisioning\s+pulling_image\s+£3\.20\s+£0\.00\s+0\.00\s+-$`,
		`^7f8e9d0c\s+batch\s+A100 80GB\s+UK\s+running\s+downloading 45%\s+£2\.10\s+£0\.35\s+0\.17\s+2026-01-02T03:50:00Z$`,
		`^5e6f7a8b\s+flaky\s+RTX 4090\s+UK\s+running, not serving\s+ready\s+£0\.55\s+£1\.10\s+2\.00\s+2026-01-02T02:00:00Z$`,
		`^1a2b9f00\s+coder\s+A100 80GB\s+UK sovereign\s+running\s+ready\s+£2\.50\s+£5\.50\s+2\.20\s+`,
		`^0c0d0e0f\s+Rented RTX 4090\s+RTX 4090\s+UK\s+stopped\s+-\s+£0\.55\s+£0\.28\s+0\.50\s+`,
	} {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %s", i, lines[i], re)
		}
	}
	// A terminal of 100 columns has no room for all of it: STARTED and
	// TIER go, the rest stays whole.
	r = cliRun{env: gatewayEnv(g), tty: true}.run(t, "rentals")
	contains(t, "rentals on a terminal", r.stdout, "\x1b[31mrunning, not serving\x1b[0m", "\x1b[33mprovisioning\x1b[0m", "\x1b[90mstopped\x1b[0m",
		"Rented H100 80GB", "downloading 45%", "HOURS")
	lacks(t, "rentals on a terminal", r.stdout, "STARTED", "TIER", "UK sovereign")

	r = cliRun{env: gatewayEnv(g)}.run(t, "rentals", "--jq", `.[] | select(.status != "stopped" and .connected == false) | .name`)
	if r.code != 0 || r.stdout != "Rented H100 80GB\nflaky\n" {
		t.Errorf("--jq: exit %d %q %s", r.code, r.stdout, r.stderr)
	}

	empty := rentalGateway(t, map[string]fakeReply{"GET " + instances: {body: "[]"}})
	r = cliRun{env: gatewayEnv(empty), tty: true}.run(t, "rentals")
	contains(t, "no rentals", r.stdout, "No rentals. Rent a GPU with: svc rent GPU --tier TIER")
}

func TestRentalsShowAndAudit(t *testing.T) {
	g := rentalGateway(t, map[string]fakeReply{
		"GET " + instances + "/" + stoppedID:                               {body: rental(t, func(r *api.Rental) { r.ID, r.Status = stoppedID, api.RentalStopped })},
		"GET " + instances + "/1a2b3c4d-0000-4000-8000-000000000005/audit": {status: 404, body: `{"detail": "Not placed yet"}`},
	})
	// By a unique start and by name, from the list.
	for _, arg := range []string{"1a2b9", "coder"} {
		r := cliRun{env: gatewayEnv(g)}.run(t, "rentals", "show", arg)
		if r.code != 0 {
			t.Fatalf("show %s: exit %d %s", arg, r.code, r.stderr)
		}
		for _, re := range []string{`(?m)^ID\s+` + coderID + `$`, `(?m)^GPU\s+A100 80GB \(a100-80gb\)$`, `(?m)^Tier\s+UK sovereign \(uk-sovereign\)$`,
			`(?m)^Status\s+running$`, `(?m)^Models\s+qwen3-8b-q4$`, `(?m)^Price\s+£2\.50/h$`, `(?m)^Cost\s+£5\.50$`,
			`(?m)^Billed\s+2\.20 h \(7920 s\)$`, `(?m)^Started\s+2026-01-02T01:48:00Z$`, `(?m)^Stopped\s+-$`} {
			if !regexp.MustCompile(re).MatchString(r.stdout) {
				t.Errorf("show %s lacks %s:\n%s", arg, re, r.stdout)
			}
		}
	}
	// A worker that connected once and is not serving now: billed for
	// nothing, which its status says.
	unserved := rentalGateway(t, map[string]fakeReply{
		"GET " + instances + "/" + stoppedID: {body: rental(t, func(r *api.Rental) { booted(r); r.ID, r.Serving = stoppedID, ptrTo(false) })},
	})
	r := cliRun{env: gatewayEnv(unserved)}.run(t, "rentals", "show", stoppedID)
	for _, re := range []string{`(?m)^Status\s+running, not serving$`, `(?m)^Connected\s+yes$`, `(?m)^Serving\s+no$`} {
		if r.code != 0 || !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("show of a rental not serving lacks %s: exit %d\n%s%s", re, r.code, r.stdout, r.stderr)
		}
	}
	// A full id is asked for directly, without the list.
	before := len(g.sent)
	r = cliRun{env: gatewayEnv(g)}.run(t, "rentals", "show", stoppedID)
	if r.code != 0 || !regexp.MustCompile(`(?m)^Status\s+stopped$`).MatchString(r.stdout) || len(g.sent) != before+1 {
		t.Errorf("exit %d, %d requests:\n%s%s", r.code, len(g.sent)-before, r.stdout, r.stderr)
	}

	r = cliRun{env: gatewayEnv(g)}.run(t, "rentals", "show", "7f8e", "--jq", ".model_download.progress_pct")
	if r.code != 0 || r.stdout != "45\n" {
		t.Errorf("--jq: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = cliRun{env: gatewayEnv(g)}.run(t, "rentals", "show", "7f8e")
	contains(t, "downloading", r.stdout, "45% (19.4 of 43.0 GB)")

	r = cliRun{env: gatewayEnv(g)}.run(t, "rentals", "audit", "1a2b9f")
	if r.code != 0 {
		t.Fatalf("audit: exit %d %s", r.code, r.stderr)
	}
	for _, re := range []string{`(?m)^Provider\s+lambda$`, `(?m)^Instance\s+i-0abc123$`, `(?m)^Region\s+london-1$`, `(?m)^Country\s+GB$`,
		`(?m)^Operator\s+Example Compute Ltd, domiciled in GB$`, `(?m)^Placed\s+2026-01-02T01:45:20Z$`,
		`(?m)^TIME\s+EVENT\s+DETAIL$`, `(?m)^2026-01-02T01:48:00Z\s+worker_connected\s+the worker connected; billing starts$`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("audit lacks %s:\n%s", re, r.stdout)
		}
	}
	r = cliRun{env: gatewayEnv(g)}.run(t, "rentals", "audit", "coder", "--jq", ".events | length")
	if r.code != 0 || r.stdout != "4\n" {
		t.Errorf("audit --jq: exit %d %q", r.code, r.stdout)
	}

	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"show", "1a2b"}, exitUsage, `"1a2b" starts 2 rental ids (1a2b3c4d, 1a2b9f00): give more of it`},
		{[]string{"show", "nope"}, exitError, "ID is a rental's id, a unique start of one, or its name"},
		{[]string{"show"}, exitUsage, "takes 1 argument(s), got 0"},
		{[]string{"audit", "1a2b3c"}, exitError, "Not placed yet\nRequest id: rid-"},
		{[]string{"audit", "1a2b3c"}, exitError, "Rental 1a2b3c4d has no placement record: it has not been placed on a machine yet"},
		{[]string{"nope"}, exitUsage, `unknown command "nope" for "svc rentals"`},
		{[]string{"show", ""}, exitUsage, `svc rentals show: argument 1 is empty`},
	} {
		r := cliRun{env: gatewayEnv(g)}.run(t, append([]string{"rentals"}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", tc.args, r.code, tc.code, r.stderr)
		}
	}
}

// rentResult runs `svc rent` with --wait polling every millisecond; ctx
// stands for Ctrl-C.
func rentResult(t *testing.T, ctx context.Context, c cliRun, args ...string) cliResult {
	t.Helper()
	env := map[string]string{"HOME": t.TempDir()}
	for k, v := range c.env {
		env[k] = v
	}
	ios, _, out, errOut := iostreams.Test()
	ios.SetStdoutTTY(c.tty)
	f := &Factory{IO: ios, Build: buildinfo.Info{Version: "v1.2.3"}, Getenv: func(k string) string { return env[k] }}
	clock := time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC)
	cmd := NewCmdRent(f, func(o *RentOptions) error {
		o.Interval = time.Millisecond
		o.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
		return f.explainAPIError(nil, computeError(rentRun(ctx, o), true))
	})
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	cmd.SilenceErrors, cmd.SilenceUsage = true, true // as the root has them
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	_, err := cmd.ExecuteC()
	code := reportError(errOut, cmd, err)
	return cliResult{stdout: out.String(), stderr: errOut.String(), code: code}
}

func TestRent(t *testing.T) {
	g := rentalGateway(t, map[string]fakeReply{"POST " + instances: {status: 202, body: rental(t, nil)}})
	r := cliRun{env: gatewayEnv(g)}.run(t, "rent", "a100-80gb", "--tier", "uk-sovereign", "--model", "qwen3-8b-q4,qwen3-8b-q8", "--model", "llama-3.3-70b-q4", "--name", "coder")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var sent api.RentRequest
	if err := json.Unmarshal([]byte(g.last(instances).Body), &sent); err != nil {
		t.Fatal(err)
	}
	if sent.GPUModelID != "a100-80gb" || sent.TierID != "uk-sovereign" || sent.Name != "coder" ||
		strings.Join(sent.Models, " ") != "qwen3-8b-q4 qwen3-8b-q8 llama-3.3-70b-q4" {
		t.Errorf("sent %+v", sent)
	}
	want := "Rental " + newRentID + " is provisioning: A100 80GB in UK at £2.10/h.\nFollow it with 'svc rentals show 3c3c3c3c'; stop it with 'svc stop 3c3c3c3c'.\n"
	if r.stdout != want || r.stderr != "" {
		t.Errorf("stdout %q\nstderr %q", r.stdout, r.stderr)
	}

	r = cliRun{env: gatewayEnv(g)}.run(t, "rent", "a100-80gb", "--tier", "uk-sovereign", "--jq", ".id")
	if r.code != 0 || r.stdout != newRentID+"\n" {
		t.Errorf("--jq: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	// A tier that shows no capacity is asked for anyway, with a warning.
	r = cliRun{env: gatewayEnv(g)}.run(t, "rent", "a100-80gb", "--tier", "uk")
	if r.code != 0 || !strings.Contains(r.stderr, "Warning: the catalogue shows no capacity for A100 80GB in tier uk now; asking anyway.") {
		t.Errorf("exit %d %s", r.code, r.stderr)
	}
}

// TestRentChecks checks the mistakes the catalogue shows are refused
// before the request is sent, since a refused request uses the key's
// minute too.
func TestRentChecks(t *testing.T) {
	g := rentalGateway(t, map[string]fakeReply{"POST " + instances: {status: 202, body: rental(t, nil)}})
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no tier", []string{"a100-80gb"}, "--tier is required"},
		{"no gpu", []string{"--tier", "uk"}, "takes 1 argument(s), got 0"},
		{"unknown gpu", []string{"b200", "--tier", "uk"}, `unknown GPU "b200"; 'svc catalogue' lists them: a100-80gb, rtx-4090`},
		{"unknown tier", []string{"rtx-4090", "--tier", "uk-sovereign"}, `RTX 4090 cannot be placed in tier "uk-sovereign" now; its tiers: uk (£0.55/h)`},
		{"below the floor", []string{"a100-80gb", "--tier", "global"}, `tier "global" is below the organisation's jurisdiction floor; the tiers allowed for A100 80GB: uk-sovereign (£2.50/h), uk (£2.10/h)`},
		{"unknown model", []string{"a100-80gb", "--tier", "uk", "--model", "gpt-5"}, `unknown model variant "gpt-5"`},
		{"a model twice", []string{"a100-80gb", "--tier", "uk", "--model", "qwen3-8b-q4", "--model", "qwen3-8b-q4"}, "--model qwen3-8b-q4 is given twice"},
		{"not enough memory", []string{"a100-80gb", "--tier", "uk", "--model", "llama-3.3-70b-q8"}, "llama-3.3-70b-q8 needs 96 GB of system memory; the A100 80GB machines in tier uk have at most 64 GB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cliRun{env: gatewayEnv(g)}.run(t, append([]string{"rent"}, tc.args...)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			if strings.Contains(r.stderr, "Warning") {
				t.Errorf("a warning for a request not sent:\n%s", r.stderr)
			}
			for _, s := range g.sent {
				if s.Method == "POST" {
					t.Fatalf("sent %+v", s)
				}
			}
		})
	}
	// An empty catalogue is nothing the user got wrong.
	empty := rentalGateway(t, map[string]fakeReply{"GET /api/v1/compute/catalogue": {body: "[]"}})
	r := cliRun{env: gatewayEnv(empty)}.run(t, "rent", "a100-80gb", "--tier", "uk")
	if r.code != exitError || !strings.Contains(r.stderr, "Error: the gateway offers no GPUs to rent now ('svc catalogue' is empty)\n") {
		t.Errorf("empty catalogue: exit %d %s", r.code, r.stderr)
	}
	// A model too big for one GPU is not refused (the gateway does not),
	// but said.
	r = cliRun{env: gatewayEnv(g)}.run(t, "rent", "rtx-4090", "--tier", "uk", "--model", "llama-3.3-70b-q4")
	if r.code != 0 || !strings.Contains(r.stderr, "Warning: llama-3.3-70b-q4 needs 48 GB of GPU memory to run on one GPU; the RTX 4090 has 24 GB.") {
		t.Errorf("exit %d %s", r.code, r.stderr)
	}
}

func TestRentRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply fakeReply
		code  int
		want  []string
	}{
		{"no card", fakeReply{status: 402, body: `{"detail": "No payment card on file"}`}, exitError,
			[]string{"Error: No payment card on file\n", "Renting needs a payment card on file, credit for the first hour and room in the monthly budget", "'svc admin card set'"}},
		{"no capacity", fakeReply{status: 409, body: `{"detail": "No capacity for A100 80GB in the UK sovereign tier now; try again later or another tier"}`}, exitCapacity,
			[]string{"Error: No capacity for A100 80GB", "Try another tier or GPU ('svc catalogue' shows which have capacity), or a100-80gb in uk-sovereign later."}},
		{"rate limited", fakeReply{status: 429, body: `{"detail": "One rental request a minute per key"}`, header: map[string]string{"Retry-After": "42"}}, exitCapacity,
			[]string{"Error: One rental request a minute per key\n", "try again in 42s (at ", "Check 'svc rentals' first: an earlier request may have gone through."}},
		{"member", fakeReply{status: 403, body: `{"detail": "Renting needs the owner or operator role"}`}, exitAuth,
			[]string{"Renting and stopping need a key with the compute:write permission whose user is an owner or operator"}},
		{"bad request", fakeReply{status: 400, body: `{"detail": "Unknown GPU"}`}, exitError,
			[]string{"'svc catalogue' lists the GPUs and tiers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := rentalGateway(t, map[string]fakeReply{"POST " + instances: tc.reply})
			r := cliRun{env: gatewayEnv(g)}.run(t, "rent", "a100-80gb", "--tier", "uk-sovereign")
			if r.code != tc.code {
				t.Errorf("exit %d, want %d", r.code, tc.code)
			}
			contains(t, "stderr", r.stderr, tc.want...)
			if r.stdout != "" {
				t.Errorf("stdout %q", r.stdout)
			}
		})
	}
}

func TestRentWait(t *testing.T) {
	downloading := func(pct float64) func(r *api.Rental) {
		return func(r *api.Rental) {
			booted(r)
			r.Models = []string{"qwen3-8b-q4"}
			r.ModelDownload = &api.ModelDownload{Total: 5_200_000_000, Completed: int64(pct / 100 * 5_200_000_000), ProgressPct: pct}
		}
	}
	boot := []fakeReply{
		{body: rental(t, func(r *api.Rental) { r.BootPhase = ptrTo(api.BootAllocating) })},
		{body: rental(t, func(r *api.Rental) { r.BootPhase = ptrTo(api.BootPullingImage) })},
		{body: rental(t, func(r *api.Rental) { r.BootPhase = ptrTo(api.BootPullingImage) })},
		{body: rental(t, downloading(12))},
		{body: rental(t, downloading(17))},
		{body: rental(t, downloading(55))},
		// Connected, no download, but the installs are not done: not yet.
		{body: rental(t, func(r *api.Rental) { booted(r); r.Models = []string{"qwen3-8b-q4"} })},
		{body: rental(t, func(r *api.Rental) {
			booted(r)
			r.Models, r.BootPhase, r.AccruedCostGBP = []string{"qwen3-8b-q4"}, ptrTo(api.BootReady), 5
		})},
	}
	gateway := func(t *testing.T) *fakeGateway {
		return rentalGateway(t, map[string]fakeReply{
			"POST " + instances: {status: 202, body: rental(t, nil)},
			"GET " + newRentURL: {seq: boot},
		})
	}
	args := []string{"a100-80gb", "--tier", "uk-sovereign", "--model", "qwen3-8b-q4", "--wait"}

	t.Run("pipe", func(t *testing.T) {
		r := rentResult(t, context.Background(), cliRun{env: gatewayEnv(gateway(t))}, args...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		// A line per step, not per poll: the repeated phase and the
		// download's move within its tens are left out.
		want := []string{
			"Rental " + newRentID + ": A100 80GB in UK at £2.10/h.",
			"2026-01-02T04:00:02Z provisioning · queued",
			"2026-01-02T04:00:03Z provisioning · allocating",
			"2026-01-02T04:00:04Z provisioning · pulling image",
			"2026-01-02T04:00:06Z running · worker connected · downloading models 10%",
			"2026-01-02T04:00:08Z running · worker connected · downloading models 50%",
			"2026-01-02T04:00:09Z running · worker connected",
			"2026-01-02T04:00:10Z running · worker connected · ready",
			"Rental 3c3c3c3c is serving as worker wk_0000000000000b06 with qwen3-8b-q4: £0.05 so far at £2.10/h. Stop it with 'svc stop 3c3c3c3c'.",
		}
		if got := strings.Split(strings.TrimSpace(r.stdout), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("terminal", func(t *testing.T) {
		r := rentResult(t, context.Background(), cliRun{env: gatewayEnv(gateway(t)), tty: true}, args...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		// One line redrawn in place, with a bar, the cost and the time.
		contains(t, "terminal", r.stdout,
			"\r\x1b[K⠋ provisioning · queued · 1s",
			"\r\x1b[K⠼ running · worker connected · models ██░░░░░░░░░░░░░░░░░░ 12% (0.6 of 5.2 GB) · £0.02 · ",
			"55% (2.9 of 5.2 GB)",
			"\r\x1b[KRental 3c3c3c3c is serving")
		if strings.Count(r.stdout, "\n") != 2 {
			t.Errorf("more than the heading and the result on lines of their own:\n%q", r.stdout)
		}
	})
	t.Run("json", func(t *testing.T) {
		r := rentResult(t, context.Background(), cliRun{env: gatewayEnv(gateway(t))}, append(args, "--json")...)
		var got api.Rental
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
			t.Fatalf("exit %d %v:\n%s", r.code, err, r.stdout)
		}
		if got.Status != api.RentalRunning || *got.BootPhase != api.BootReady {
			t.Errorf("final rental %+v", got)
		}
		// The progress went to stderr, out of the document's way.
		contains(t, "stderr", r.stderr, "provisioning · allocating", "downloading models 50%")
	})
	t.Run("fails", func(t *testing.T) {
		g := rentalGateway(t, map[string]fakeReply{
			"POST " + instances: {status: 202, body: rental(t, nil)},
			"GET " + newRentURL: {seq: []fakeReply{boot[0], {body: rental(t, func(r *api.Rental) {
				r.Status, r.Error = api.RentalStopped, ptrTo("the provider could not start the machine")
			})}}},
		})
		r := rentResult(t, context.Background(), cliRun{env: gatewayEnv(g)}, args...)
		if r.code != exitError {
			t.Errorf("exit %d, want 1", r.code)
		}
		contains(t, "stderr", r.stderr, "Error: rental 3c3c3c3c failed: the provider could not start the machine\n",
			"It is stopped and no longer billed; 'svc rentals audit 3c3c3c3c' shows its history.")
		// With --json the failed rental is the document, as a serving
		// one would be.
		g = rentalGateway(t, map[string]fakeReply{
			"POST " + instances: {status: 202, body: rental(t, nil)},
			"GET " + newRentURL: {seq: []fakeReply{boot[0], {body: rental(t, func(r *api.Rental) {
				r.Status, r.Error = api.RentalStopped, ptrTo("the provider could not start the machine")
			})}}},
		})
		r = rentResult(t, context.Background(), cliRun{env: gatewayEnv(g)}, append(args, "--json")...)
		var got api.Rental
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != exitError || got.ID != newRentID || got.Error == nil {
			t.Errorf("exit %d %v: stdout %q", r.code, err, r.stdout)
		}
	})
	t.Run("gateway blip", func(t *testing.T) {
		g := rentalGateway(t, map[string]fakeReply{
			"POST " + instances: {status: 202, body: rental(t, nil)},
			"GET " + newRentURL: {seq: []fakeReply{boot[0], {status: 503, body: `{"detail": "upstream restarting"}`}, boot[7]}},
		})
		r := rentResult(t, context.Background(), cliRun{env: gatewayEnv(g)}, args...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		contains(t, "stdout", r.stdout, "provisioning · allocating · retrying: upstream restarting\n", " ready\n")
	})
	t.Run("gateway out of reach for good", func(t *testing.T) {
		g := rentalGateway(t, map[string]fakeReply{
			"POST " + instances: {status: 202, body: rental(t, nil)},
			"GET " + newRentURL: {status: 503, body: `{"detail": "upstream restarting"}`},
		})
		r := rentResult(t, context.Background(), cliRun{env: gatewayEnv(g)}, args...)
		if r.code != exitCapacity { // the last poll's 503
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		polls := 0
		for _, s := range g.sent {
			if s.Method == "GET" && s.Path == newRentURL {
				polls++
			}
		}
		if polls != maxWaitFailures {
			t.Errorf("%d polls, want %d", polls, maxWaitFailures)
		}
		contains(t, "stderr", r.stderr, "Stopped waiting. Rental 3c3c3c3c keeps running", "svc stop "+newRentID, "Error: upstream restarting")
	})
	t.Run("gone", func(t *testing.T) {
		g := rentalGateway(t, map[string]fakeReply{
			"POST " + instances: {status: 202, body: rental(t, nil)},
			"GET " + newRentURL: {status: 404, body: `{"detail": "No such rental"}`},
		})
		r := rentResult(t, context.Background(), cliRun{env: gatewayEnv(g)}, args...)
		if r.code != exitError || !strings.Contains(r.stderr, "Error: No such rental") {
			t.Errorf("exit %d %s", r.code, r.stderr)
		}
	})
	t.Run("ctrl-c", func(t *testing.T) {
		g := rentalGateway(t, map[string]fakeReply{
			"POST " + instances: {status: 202, body: rental(t, nil)},
			"GET " + newRentURL: boot[1],
		})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(30*time.Millisecond, cancel)
		r := rentResult(t, ctx, cliRun{env: gatewayEnv(g)}, args...)
		if r.code != exitError {
			t.Errorf("exit %d, want 1", r.code)
		}
		want := "Stopped waiting. Rental 3c3c3c3c keeps running, billed from when its worker connects; stop it with: svc stop " + newRentID + "\n"
		if r.stderr != want {
			t.Errorf("stderr %q, want %q", r.stderr, want)
		}
	})
}

func TestStop(t *testing.T) {
	stopped := rental(t, func(r *api.Rental) {
		booted(r)
		r.ID, r.Name, r.Label, r.Status, r.AccruedCostGBP, r.SecondsBilled = coderID, "coder", "A100 80GB", api.RentalStopped, 551, 7932
	})
	gateway := func(t *testing.T) *fakeGateway {
		return rentalGateway(t, map[string]fakeReply{"DELETE " + instances + "/" + coderID: {body: stopped}})
	}
	deleted := func(g *fakeGateway) bool {
		for _, s := range g.sent {
			if s.Method == "DELETE" {
				return true
			}
		}
		return false
	}

	t.Run("yes", func(t *testing.T) {
		g := gateway(t)
		r := cliRun{env: gatewayEnv(g)}.run(t, "stop", "coder", "--yes")
		if r.code != 0 || r.stdout != "Stopped rental 1a2b9f00 (A100 80GB): £5.51 for 2.20 hours.\n" {
			t.Fatalf("exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		if !deleted(g) {
			t.Error("nothing was stopped")
		}
		r = cliRun{env: gatewayEnv(g)}.run(t, "stop", "1a2b9", "-y", "--jq", ".accrued_cost_gbp")
		if r.code != 0 || r.stdout != "5.51\n" {
			t.Errorf("--jq: exit %d %q", r.code, r.stdout)
		}
	})
	t.Run("no terminal", func(t *testing.T) {
		g := gateway(t)
		r := cliRun{env: gatewayEnv(g), stdin: "y\n"}.run(t, "stop", "coder")
		if r.code != exitUsage || !strings.Contains(r.stderr, "not stopping coder without confirmation: stdin is not a terminal; pass --yes to stop it") {
			t.Errorf("exit %d %s", r.code, r.stderr)
		}
		if len(g.sent) != 0 {
			t.Errorf("sent %+v", g.sent)
		}
	})
	t.Run("confirmed", func(t *testing.T) {
		g := gateway(t)
		r := cliRun{env: gatewayEnv(g), stdin: "y\n", stdinTTY: true}.run(t, "stop", "coder")
		if r.code != 0 || r.stderr != "Stop rental 1a2b9f00 (A100 80GB, £5.50 so far)? [y/N] " || !deleted(g) {
			t.Errorf("exit %d, stderr %q, stopped %v", r.code, r.stderr, deleted(g))
		}
	})
	for _, answer := range []string{"n\n", "\n", ""} {
		t.Run("declined "+strings.TrimSpace(answer), func(t *testing.T) {
			g := gateway(t)
			r := cliRun{env: gatewayEnv(g), stdin: answer, stdinTTY: true}.run(t, "stop", "coder")
			if r.code != exitError || !strings.HasSuffix(r.stderr, "[y/N] Not stopped.\n") || deleted(g) {
				t.Errorf("exit %d, stderr %q, stopped %v", r.code, r.stderr, deleted(g))
			}
		})
	}
	t.Run("already stopped", func(t *testing.T) {
		g := gateway(t)
		r := cliRun{env: gatewayEnv(g)}.run(t, "stop", "0c0d", "--yes")
		if r.code != 0 || r.stdout != "Rental 0c0d0e0f (RTX 4090) is already stopped: £0.28 for 0.50 hours.\n" || deleted(g) {
			t.Errorf("exit %d %q", r.code, r.stdout)
		}
	})
	t.Run("provider slow", func(t *testing.T) {
		g := rentalGateway(t, map[string]fakeReply{"DELETE " + instances + "/" + coderID: {status: 502, body: `{"detail": "The provider did not confirm the machine is gone"}`}})
		r := cliRun{env: gatewayEnv(g)}.run(t, "stop", "coder", "--yes")
		if r.code != exitError || !strings.Contains(r.stderr, "Billing stopped with this call; the gateway keeps trying to destroy the machine. 'svc rentals show 1a2b9f00' says when it has.") {
			t.Errorf("exit %d %s", r.code, r.stderr)
		}
	})
	t.Run("member", func(t *testing.T) {
		g := rentalGateway(t, map[string]fakeReply{"DELETE " + instances + "/" + coderID: {status: 403, body: `{"detail": "Stopping needs the owner or operator role"}`}})
		r := cliRun{env: gatewayEnv(g)}.run(t, "stop", "coder", "--yes")
		if r.code != exitAuth || !strings.Contains(r.stderr, "owner or operator of the organisation") {
			t.Errorf("exit %d %s", r.code, r.stderr)
		}
	})
}

func TestSpend(t *testing.T) {
	g := rentalGateway(t, nil)
	r := cliRun{env: gatewayEnv(g)}.run(t, "spend")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, re := range []string{`(?m)^Period\s+January 2026 to date \(UTC\)$`, `(?m)^Spent\s+£412\.34 of £500\.00 \(82%\)$`,
		`(?m)^Active\s+3 rentals$`, `(?m)^Credit left\s+£87\.66$`,
		`(?m)^RENTAL\s+GPU\s+TIER\s+STATUS\s+PRICE/H\s+HOURS\s+COST$`,
		`(?m)^7f8e9d0c\s+A100 80GB\s+UK\s+running\s+£2\.10\s+0\.17\s+£0\.35$`,
		`(?m)^5e6f7a8b\s+RTX 4090\s+UK\s+running, not serving\s+£0\.55\s+2\.00\s+£1\.10$`,
		`(?m)^0c0d0e0f\s+RTX 4090\s+UK\s+stopped\s+£0\.55\s+0\.50\s+£0\.28$`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("spend lacks %s:\n%s", re, r.stdout)
		}
	}
	r = cliRun{env: gatewayEnv(g), tty: true}.run(t, "spend")
	contains(t, "spend on a terminal", r.stdout, "£412.34 of £500.00  \x1b[33m████████████████████\x1b[0m░░░░ \x1b[33m82%\x1b[0m",
		"\x1b[31mrunning, not serving\x1b[0m")

	r = cliRun{env: gatewayEnv(g)}.run(t, "spend", "--jq", ".month_to_date_gbp")
	if r.code != 0 || r.stdout != "412.34\n" {
		t.Errorf("--jq: exit %d %q", r.code, r.stdout)
	}

	for _, tc := range []struct {
		name string
		s    api.SpendReport
		tty  bool
		want []string
	}{
		{"no budget", api.SpendReport{MonthToDateGBP: 1234, CreditRemainingGBP: -50, ActiveCount: 1}, false,
			[]string{"£12.34 (no monthly budget)", "Active       1 rental", "Credit left  -£0.50", "this month (UTC)"}},
		{"over budget", api.SpendReport{MonthToDateGBP: 52000, MonthlyBudgetGBP: ptrTo(money.Pounds(500))}, true,
			[]string{"£520.00 of £500.00  \x1b[31m████████████████████████\x1b[0m \x1b[31m104%, budget reached: no new rentals\x1b[0m", "Active       0 rentals"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(tc.s)
			g := rentalGateway(t, map[string]fakeReply{"GET /api/v1/compute/spend": {body: string(b)}})
			r := cliRun{env: gatewayEnv(g), tty: tc.tty}.run(t, "spend")
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			contains(t, "spend", r.stdout, tc.want...)
			lacks(t, "spend", r.stdout, "RENTAL")
		})
	}
}

// TestComputePermission checks a key without compute:write gets the
// gateway's word for it and exit status 4 on every command, and the role
// renting also needs is named.
func TestComputePermission(t *testing.T) {
	forbidden := fakeReply{status: 403, body: `{"detail": "This key lacks the compute:write permission"}`}
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/compute/catalogue": forbidden,
		"GET /api/v1/compute/models":    forbidden,
		"GET /api/v1/compute/spend":     forbidden,
		"GET " + instances:              forbidden,
	})
	for _, args := range [][]string{{"catalogue"}, {"catalogue", "models"}, {"rentals"}, {"rentals", "show", "1a2b"}, {"spend"}} {
		r := cliRun{env: gatewayEnv(g)}.run(t, args...)
		if r.code != exitAuth {
			t.Errorf("%v: exit %d", args, r.code)
		}
		contains(t, strings.Join(args, " "), r.stderr, "Error: This key lacks the compute:write permission\nRequest id: ")
	}
	r := cliRun{env: gatewayEnv(g)}.run(t, "rent", "a100-80gb", "--tier", "uk")
	if r.code != exitAuth || !strings.Contains(r.stderr, "owner or operator") {
		t.Errorf("rent: exit %d %s", r.code, r.stderr)
	}
}

// TestRentalCompletion checks what the shell is offered: GPUs, the tiers
// the organisation may use for the GPU given, variants, and rental ids
// (only the active ones for svc stop).
func TestRentalCompletion(t *testing.T) {
	g := rentalGateway(t, nil)
	complete := func(args ...string) []string {
		t.Helper()
		r := cliRun{env: gatewayEnv(g)}.run(t, append([]string{"__complete"}, args...)...)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], ":") {
			t.Fatalf("%v: exit %d %q %s", args, r.code, r.stdout, r.stderr)
		}
		return lines[:len(lines)-1] // the last line is the directive
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"rent", ""}, []string{"a100-80gb\tA100 80GB, 80 GB", "rtx-4090\tRTX 4090, 24 GB"}},
		{[]string{"rent", "a100-80gb", "--tier", ""}, []string{"uk-sovereign\tUK sovereign, £2.50/h", "uk\tUK, £2.10/h"}},
		{[]string{"rent", "--tier", ""}, []string{"uk-sovereign\tUK sovereign, £2.50/h", "uk\tUK, £2.10/h"}},
		{[]string{"rent", "a100-80gb", "--model", ""}, []string{"qwen3-8b-q4\tQwen3 8B Q4_K_M", "qwen3-8b-q8\tQwen3 8B Q8_0",
			"llama-3.3-70b-q4\tLlama 3.3 70B Q4_K_M", "llama-3.3-70b-q8\tLlama 3.3 70B Q8_0"}},
		{[]string{"stop", ""}, []string{
			"1a2b3c4d-0000-4000-8000-000000000005\tRented H100 80GB, H100 80GB, provisioning",
			"7f8e9d0c-0000-4000-8000-000000000004\tbatch, A100 80GB, running",
			"5e6f7a8b-0000-4000-8000-000000000003\tflaky, RTX 4090, running",
			"1a2b9f00-0000-4000-8000-000000000002\tcoder, A100 80GB, running"}},
	} {
		if got := complete(tc.args...); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%v:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}
	if got := complete("rentals", "audit", ""); len(got) != 5 {
		t.Errorf("audit is offered %d rentals, want all 5", len(got))
	}
}
