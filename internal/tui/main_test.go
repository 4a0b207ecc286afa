package tui

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/money"
)

func TestMain(m *testing.M) {
	// Models built by NewModel style for standard output's profile: pin it
	// to plain text so golden frames do not depend on the terminal running
	// the tests.
	stdoutProfile = func() colorprofile.Profile { return colorprofile.ASCII }
	code := m.Run()
	if code == 0 {
		if leaks := leakedGoroutines(); leaks != "" {
			fmt.Fprintf(os.Stderr, "goroutines of package tui still running after the tests:\n%s\n", leaks)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines lists goroutines running this package's code (a poll, a
// tick, an events fetch) once every test has finished, waiting a little
// for ones that are on their way out.
func leakedGoroutines() string {
	var leaks []string
	for range 50 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leaks = leaks[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "svc/internal/tui.") && !strings.Contains(g, "tui.TestMain") && !strings.Contains(g, "testing.tRunner") {
				leaks = append(leaks, g)
			}
		}
		if len(leaks) == 0 {
			return ""
		}
		time.Sleep(20 * time.Millisecond)
	}
	return strings.Join(leaks, "\n\n")
}

// t0 is the fixed clock of every test.
var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func fixedClock() time.Time { return t0 }

func ptr[T any](v T) *T { return &v }

// plainStyles are the styles without colour, for stable goldens.
func plainStyles() *styles { return stylesFor(colorprofile.ASCII) }

func stylesFor(p colorprofile.Profile) *styles { return newStyles(p) }

// golden compares s with testdata/<test name>.golden; -update rewrites it.
func golden(t *testing.T, s string) {
	t.Helper()
	teatest.RequireEqualOutput(t, []byte(s))
}

// requireSize checks a render is exactly w×h cells: panes are joined line
// by line, so a pane one cell off breaks the whole frame.
func requireSize(t *testing.T, s string, w, h int) {
	t.Helper()
	lines := strings.Split(s, "\n")
	if len(lines) != h {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), h, s)
	}
	for i, l := range lines {
		if n := lipgloss.Width(l); n != w {
			t.Fatalf("line %d is %d cells wide, want %d:\n%q", i, n, w, l)
		}
	}
}

func model(id string, caps []string, ctx int, engine string, loaded *bool) api.Model {
	return api.Model{ID: id, Capabilities: caps, ContextWindow: ctx, Engine: engine, Loaded: loaded}
}

// alwaysOn is m as a worker lists a model it keeps loaded.
func alwaysOn(m api.Model) api.Model {
	m.AlwaysOn = true
	return m
}

// fixtureWorkers is a fleet with one worker in every state.
func fixtureWorkers() []api.Worker {
	return []api.Worker{
		{
			WorkerID: "wk_01hq3a", WorkerName: "gpu-a", Status: api.StatusHealthy, Version: "v1.3.0",
			Models: []api.Model{
				alwaysOn(model("llama3.1:8b", []string{"chat", "tools"}, 131072, "ollama", ptr(true))),
				model("qwen2.5-coder:32b", []string{"chat", "tools"}, 32768, "ollama", ptr(false)),
				model("nomic-embed-text", []string{"embeddings"}, 8192, "ollama", nil),
			},
			ActiveTasks: 2, MaxConcurrent: 4, LastSeenSecondsAgo: 1,
			Engines:     []api.EngineInfo{{Kind: "ollama", URL: "http://127.0.0.1:11434"}},
			ConnectedAt: ptr(t0.Add(-58 * time.Minute)),
			Power: &api.LivePower{At: t0.Add(-time.Second), Channels: gpuAChannels(), Machine: api.MethodMeasured,
				Watts:          map[string]float64{"gpu0": 281.4, "gpu1": 96.2, "cpu": 38.5, "system": 498},
				EnergyTodayKWh: ptr(3.42)},
		},
		{
			WorkerID: "wk_01hq3b", WorkerName: "gpu-b", Status: api.StatusStale, Version: "v1.2.4",
			Models:      []api.Model{model("llama3.1:70b", []string{"chat", "reasoning"}, 131072, "openai", nil)},
			ActiveTasks: 4, MaxConcurrent: 4, QueueDepth: 3, LastSeenSecondsAgo: 12,
			Engines:     []api.EngineInfo{{Kind: "openai", URL: "http://10.0.0.7:8000"}},
			ConnectedAt: ptr(t0.Add(-26 * time.Hour)),
			Power: &api.LivePower{At: t0.Add(-12 * time.Second), Channels: gpuBChannels(), Machine: api.MethodEstimated,
				Watts:          map[string]float64{"gpu0": 312, "cpu": 55.3, "system": 421},
				EnergyTodayKWh: ptr(5.1)},
		},
		{
			WorkerID: "wk_01hq3c", WorkerName: "gpu-c", Status: api.StatusHealthy, Version: "1.3.0", Draining: true,
			Models:      []api.Model{model("mistral-small:24b", []string{"chat", "vision"}, 32768, "ollama", nil)},
			ActiveTasks: 1, MaxConcurrent: 2, LastSeenSecondsAgo: 2,
			Engines: []api.EngineInfo{{Kind: "ollama"}},
			Power: &api.LivePower{At: t0.Add(-2 * time.Second), Machine: api.MethodEstimated,
				Channels: []api.PowerChannel{
					{Key: "soc", Scope: api.ScopeSoC, Name: "Apple M2 Ultra", Source: "hwmon", Method: api.MethodMeasured},
					{Key: "system", Scope: api.ScopeSystem, Source: "estimate", Method: api.MethodEstimated},
				},
				Watts:          map[string]float64{"soc": 22.5, "system": 31},
				EnergyTodayKWh: ptr(0.21)},
		},
		{
			WorkerID: "wk_01hq3d", WorkerName: "edge-1", Status: api.StatusUnhealthy, Version: "v1.3.0-rc.2",
			Models:        []api.Model{model("phi4-mini", []string{"chat"}, 16384, "ollama", nil)},
			MaxConcurrent: 1, LastSeenSecondsAgo: 47,
		},
		{
			WorkerID: "wk_01hq3e", WorkerName: "local-sim", Status: api.StatusHealthy, Version: "dev", Simulated: true,
			Models: []api.Model{
				{ID: "sim-chat", Capabilities: []string{"chat", "tools", "reasoning"}, ContextWindow: 32768, Engine: "sim", Simulated: true},
				{ID: "sim-embed", Capabilities: []string{"embeddings"}, ContextWindow: 8192, Engine: "sim", Simulated: true},
			},
			MaxConcurrent: 8, LastSeenSecondsAgo: 0,
			Engines: []api.EngineInfo{{Kind: "sim", Simulated: true}},
		},
		{
			WorkerID: "wk_01hq3f", WorkerName: "old-box", Status: api.StatusOffline, Version: "v1.1.0",
			Models:        []api.Model{model("mistral:7b", []string{"chat"}, 32768, "ollama", nil)},
			MaxConcurrent: 2, LastSeenSecondsAgo: 3900,
			OfflineSince: ptr(t0.Add(-65 * time.Minute)),
		},
	}
}

func gpuAChannels() []api.PowerChannel {
	return []api.PowerChannel{
		{Key: "gpu0", Scope: api.ScopeGPU, Index: ptr(0), Name: "NVIDIA GeForce RTX 4090", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: ptr(450.0)},
		{Key: "gpu1", Scope: api.ScopeGPU, Index: ptr(1), Name: "NVIDIA GeForce RTX 4090", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: ptr(450.0)},
		{Key: "cpu", Scope: api.ScopeCPU, Name: "AMD Ryzen 9 7950X", Source: "rapl", Method: api.MethodMeasured},
		{Key: "system", Scope: api.ScopeSystem, Source: "ipmi", Method: api.MethodMeasured},
	}
}

func gpuBChannels() []api.PowerChannel {
	return []api.PowerChannel{
		{Key: "gpu0", Scope: api.ScopeGPU, Index: ptr(0), Name: "NVIDIA A100 80GB PCIe", Source: "nvidia-smi", Method: api.MethodMeasured, PowerLimitW: ptr(300.0)},
		{Key: "cpu", Scope: api.ScopeCPU, Name: "Intel Xeon Gold 6338", Source: "rapl", Method: api.MethodMeasured},
		{Key: "system", Scope: api.ScopeSystem, Source: "estimate", Method: api.MethodEstimated},
	}
}

// history builds the last hour of a worker at one-minute windows up to
// t0: values gives a minute's readings, nil for a window without any.
func history(workerID string, channels []api.PowerChannel, machine string, values func(minute int) map[string]float64) api.PowerHistory {
	h := api.PowerHistory{WorkerID: workerID, Range: api.Range1h, ResolutionSeconds: 60, Channels: channels,
		Points: []api.PowerPoint{}}
	if machine != "" {
		h.Machine = &machine
	}
	var joules, peak float64
	for i := range 60 {
		v := values(i)
		if v == nil {
			continue
		}
		h.Points = append(h.Points, api.PowerPoint{T: t0.Add(time.Duration(i-60) * time.Minute), Values: v})
		joules += v["system"] * 60
		peak = max(peak, v["system"])
	}
	if n := len(h.Points); n > 0 {
		h.Totals = api.PowerTotals{EnergyKWh: joules / 3.6e6, AvgW: joules / float64(60*n), PeakW: peak, Coverage: float64(n) / 60}
	}
	return h
}

// gpuAHistory is a busy hour of gpu-a, without a gap: both GPUs follow
// the load, gpu1 lagging.
func gpuAHistory() api.PowerHistory {
	return history("wk_01hq3a", gpuAChannels(), api.MethodMeasured, func(i int) map[string]float64 {
		load := 0.5 + 0.5*math.Sin(float64(i)/7)
		lag := 0.5 + 0.5*math.Sin(float64(i-6)/7)
		v := map[string]float64{"gpu0": math.Round(40 + 360*load), "gpu1": math.Round(30 + 280*lag*lag), "cpu": math.Round(25 + 40*load)}
		v["system"] = 90 + v["gpu0"] + v["gpu1"] + v["cpu"]
		return v
	})
}

// gpuBHistory is gpu-b's hour with gaps: the machine silent for minutes
// 15-24 (its link was down), and its GPU alone unread for minutes 40-43.
func gpuBHistory() api.PowerHistory {
	return history("wk_01hq3b", gpuBChannels(), api.MethodEstimated, func(i int) map[string]float64 {
		if i >= 15 && i < 25 {
			return nil
		}
		load := 0.5 + 0.5*math.Cos(float64(i)/9)
		v := map[string]float64{"gpu0": math.Round(60 + 230*load), "cpu": math.Round(35 + 30*load)}
		v["system"] = 80 + v["gpu0"] + v["cpu"]
		if i >= 40 && i < 44 {
			delete(v, "gpu0")
		}
		return v
	})
}

// fixturePower is every worker's history; the others have none.
func fixturePower() map[string]api.PowerHistory {
	return map[string]api.PowerHistory{"wk_01hq3a": gpuAHistory(), "wk_01hq3b": gpuBHistory()}
}

// fixtureInflight is a mix of running, streaming, queued and embedding
// requests, deliberately not in start order.
func fixtureInflight() []api.InflightRequest {
	req := func(id, model, workerID, worker, typ string, age time.Duration, tokens *int, state string, stream bool) api.InflightRequest {
		return api.InflightRequest{
			TaskID: id, Model: model, WorkerID: workerID, WorkerName: worker, RequestType: typ,
			StartedAt: t0.Add(-age), ElapsedMs: age.Milliseconds(), TokensGenerated: tokens, State: state, Stream: stream,
		}
	}
	return []api.InflightRequest{
		req("req_8d21c0e6", "llama3.1:8b", "wk_01hq3a", "gpu-a", api.RequestChat, 12400*time.Millisecond, ptr(310), api.StateRunning, true),
		req("req_7f3a9b12", "llama3.1:70b", "wk_01hq3b", "gpu-b", api.RequestChat, 48*time.Second, ptr(1234), api.StateRunning, true),
		req("req_a0c4e411", "nomic-embed-text", "wk_01hq3a", "gpu-a", api.RequestEmbeddings, 300*time.Millisecond, nil, api.StateRunning, false),
		req("req_b3f1d7aa", "llama3.1:70b", "", "", api.RequestChat, 2100*time.Millisecond, nil, api.StateQueued, true),
		req("req_c9e2f5b0", "sim-chat", "wk_01hq3e", "local-sim", api.RequestChat, 3*time.Minute+5*time.Second, ptr(4096), api.StateRunning, true),
	}
}

func fixtureEvents() []api.WorkerEvent {
	ev := func(id, typ string, age time.Duration, detail, actor *string) api.WorkerEvent {
		return api.WorkerEvent{ID: id, WorkerID: "wk_01hq3a", WorkerName: "gpu-a", EventType: typ, Detail: detail, Actor: actor, CreatedAt: t0.Add(-age)}
	}
	return []api.WorkerEvent{
		ev("ev_5", api.EventModelLoaded, 3*time.Minute, ptr("llama3.1:8b loaded in 2.4s"), nil),
		ev("ev_4", api.EventModelsChanged, 20*time.Minute, ptr("+qwen2.5-coder:32b"), ptr("alice")),
		ev("ev_3", api.EventConnected, 58*time.Minute, nil, nil),
		ev("ev_2", api.EventDisconnected, 59*time.Minute, ptr("heartbeat timeout"), nil),
		ev("ev_1", api.EventConnected, 30*time.Hour, nil, nil),
	}
}

// fixtureSpend is the month of fixtureRentals: under budget.
func fixtureSpend() api.SpendReport {
	return api.SpendReport{PeriodStart: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), MonthToDateGBP: 12345,
		MonthlyBudgetGBP: ptr(money.Pounds(500)), ActiveCount: 0, CreditRemainingGBP: 37655,
		Lines: []api.SpendLine{{RentalID: "rent_old", Label: "RTX 4090", TierLabel: "UK", Status: api.RentalStopped,
			PricePerHourGBP: 55, Hours: 2, CostGBP: 110}}}
}

// fixtureRentals is one rental, stopped: the Rental spend pane has its
// spend line and nothing else, and the other panes' frames keep the
// layout they had before rentals were drawn.
func fixtureRentals() []api.Rental {
	return []api.Rental{{ID: "rent_old", Name: "Rented RTX 4090", GPUModelID: "rtx-4090", Label: "RTX 4090",
		TierLabel: "UK", Status: api.RentalStopped, PricePerHourGBP: 55, AccruedCostGBP: 110, SecondsBilled: 7200,
		StartedAt: ptr(t0.Add(-30 * time.Hour)), StoppedAt: ptr(t0.Add(-28 * time.Hour)), CreatedAt: t0.Add(-30 * time.Hour)}}
}

// activeRentals are a rental in each state the pane draws, newest first,
// at t0: booting, installing its models, serving, and billed without
// serving; then the stopped one.
func activeRentals() []api.Rental {
	started := func(ago time.Duration) *time.Time { return ptr(t0.Add(-ago)) }
	return append([]api.Rental{
		{ID: "rent_boot", Name: "Rented H100 80GB", Label: "H100 80GB", TierLabel: "UK", Status: api.RentalProvisioning,
			PricePerHourGBP: 320, BootPhase: ptr(api.BootPullingImage), CreatedAt: t0.Add(-time.Minute)},
		{ID: "rent_dl", Name: "batch", Label: "A100 80GB", TierLabel: "UK", Status: api.RentalRunning, Connected: true,
			PricePerHourGBP: 210, AccruedCostGBP: 35, SecondsBilled: 600, StartedAt: started(10 * time.Minute),
			BootPhase: ptr(api.BootWorkerConnected), Models: []string{"llama-3.3-70b-q4"},
			ModelDownload: &api.ModelDownload{Total: 43e9, Completed: 19.35e9, ProgressPct: 45}},
		{ID: "rent_run", Name: "coder", Label: "A100 80GB", TierLabel: "UK sovereign", Status: api.RentalRunning, Connected: true,
			PricePerHourGBP: 250, AccruedCostGBP: 550, SecondsBilled: 7920, StartedAt: started(7920 * time.Second),
			BootPhase: ptr(api.BootReady)},
		{ID: "rent_lost", Name: "flaky", Label: "RTX 4090", TierLabel: "UK", Status: api.RentalRunning,
			PricePerHourGBP: 55, AccruedCostGBP: 110, SecondsBilled: 7200, StartedAt: started(2 * time.Hour),
			BootPhase: ptr(api.BootReady)},
	}, fixtureRentals()...)
}

// activeSpend is the month of activeRentals.
func activeSpend() api.SpendReport {
	s := fixtureSpend()
	s.ActiveCount = 4
	s.MonthToDateGBP += 35 + 550 + 110
	s.Lines = append([]api.SpendLine{
		{RentalID: "rent_dl", Status: api.RentalRunning, Serving: true},
		{RentalID: "rent_run", Status: api.RentalRunning, Serving: true},
		{RentalID: "rent_lost", Status: api.RentalRunning, Serving: false},
	}, s.Lines...)
	return s
}

// fakeSource is a Source serving fixed data, safe for the parallel calls of
// a poll. Setting err makes every call fail with it.
type fakeSource struct {
	mu        sync.Mutex
	workers   []api.Worker
	inflight  []api.InflightRequest
	latest    string
	summary   api.UsageSummary
	rows      []api.UsageRow
	events    []api.WorkerEvent
	power     map[string]api.PowerHistory // by worker id; others have no readings
	powerErr  error                       // every WorkerPower call fails with it
	powerQs   []string                    // the workers and ranges asked for
	err       error
	delay     time.Duration // every Workers call takes this long
	polls     int           // Workers calls: one per poll
	active    int           // polls running now
	maxActive int
	eventQs   []client.EventQuery
	spend     api.SpendReport
	rentals   []api.Rental
	rentalErr error // the rental calls fail with it
	store     *api.StoreHealth
}

func newFake() *fakeSource {
	return &fakeSource{
		workers:  fixtureWorkers(),
		inflight: fixtureInflight(),
		latest:   "v1.3.0",
		summary: api.UsageSummary{Days: 1, From: "2026-11-21", To: "2026-11-21", UsageTotals: api.UsageTotals{
			Requests: 48213, Succeeded: 47650, Failed: 512, Cancelled: 51, TotalTokens: 9_876_543,
		}},
		events:  fixtureEvents(),
		power:   fixturePower(),
		spend:   fixtureSpend(),
		rentals: fixtureRentals(),
	}
}

func (f *fakeSource) set(fn func(f *fakeSource)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeSource) Workers(ctx context.Context) ([]api.Worker, error) {
	f.mu.Lock()
	f.polls++
	f.active++
	f.maxActive = max(f.maxActive, f.active)
	delay := f.delay
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.active--
		f.mu.Unlock()
	}()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.Worker(nil), f.workers...), f.err
}

func (f *fakeSource) Inflight(context.Context, string) ([]api.InflightRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.InflightRequest(nil), f.inflight...), f.err
}

func (f *fakeSource) WorkerEvents(_ context.Context, q client.EventQuery) ([]api.WorkerEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.eventQs = append(f.eventQs, q)
	return append([]api.WorkerEvent(nil), f.events...), f.err
}

func (f *fakeSource) LatestVersion(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latest, f.err
}

func (f *fakeSource) UsageSummary(context.Context, int) (api.UsageSummary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.summary, f.err
}

func (f *fakeSource) UsageLogs(context.Context, client.LogsQuery) ([]api.UsageRow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.UsageRow(nil), f.rows...), f.err
}

func (f *fakeSource) WorkerPower(_ context.Context, workerID, rng string) (api.PowerHistory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.powerQs = append(f.powerQs, workerID+" "+rng)
	if err := cmp.Or(f.powerErr, f.err); err != nil {
		return api.PowerHistory{}, err
	}
	h, ok := f.power[workerID]
	if !ok {
		return api.PowerHistory{WorkerID: workerID, Range: rng, ResolutionSeconds: 60, Channels: []api.PowerChannel{}, Points: []api.PowerPoint{}}, nil
	}
	return h, nil
}

func (f *fakeSource) Spend(context.Context) (api.SpendReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.spend, cmp.Or(f.rentalErr, f.err)
}

func (f *fakeSource) Rentals(context.Context) ([]api.Rental, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.Rental(nil), f.rentals...), cmp.Or(f.rentalErr, f.err)
}

func (f *fakeSource) Health(context.Context) (api.Health, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return api.Health{Status: api.HealthOK, Version: "v1.3.0", Store: f.store}, f.err
}

func (f *fakeSource) stats() (polls, maxActive int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polls, f.maxActive
}
