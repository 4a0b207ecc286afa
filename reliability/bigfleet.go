package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/engine/sim"
	"github.com/svc-dev/svc/internal/harness"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/worker"
)

// bigFleet connects thousands of workers to one gateway: real worker
// agents, run as goroutines of this process over real websocket links on
// loopback, each serving one of a few simulated models. It routes the
// same requests at 10 workers and at the whole fleet, and judges that
// they all succeed and that routing among the fleet costs about what it
// costs among 10; it reports the time to list the workers and what an
// idle link costs the gateway.
func bigFleet(ctx context.Context, h *rig, r *result) error {
	fleet := scaled(h, 500, 10000)
	requests := scaled(h, 200, 500)
	const small = 10
	gwPprof, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	// Every worker link holds one of the gateway's connections.
	g, err := h.startGateway(ctx, "bigfleet-gw", "--pprof-addr", gwPprof, "--max-connections", strconv.Itoa(fleet+1000))
	if err != nil {
		return err
	}
	defer g.Kill()
	token, err := os.ReadFile(g.TokenFile())
	if err != nil {
		return err
	}
	b := &bigFleetRun{h: h, g: g, r: r, pprof: "http://" + gwPprof, token: strings.TrimSpace(string(token)),
		dials: make(chan struct{}, 32)}
	for i := range bigFleetModels {
		b.engines = append(b.engines, sim.New(sim.Config{Models: []sim.ModelSpec{{Model: api.Model{
			ID: bigFleetModel(i), Capabilities: []string{api.CapChat}, ContextWindow: 8192,
		}}}}))
	}
	agentCtx, stopAgents := context.WithCancel(ctx)
	defer func() {
		// The gateway goes first: the agents then stop without draining.
		_ = g.Kill()
		stopAgents()
		b.agents.Wait()
	}()

	b.start(agentCtx, 0, small)
	if err := b.waitHealthy(ctx, small, time.Minute); err != nil {
		return err
	}
	b.route(ctx, 20) // warm-up
	at10 := b.measure(ctx, "10 workers", requests)

	begin := time.Now()
	b.start(agentCtx, small, fleet)
	if err := b.waitHealthy(ctx, fleet, scaled(h, 2*time.Minute, 10*time.Minute)); err != nil {
		return err
	}
	r.figure("fleet connected", "%d workers in %s", fleet, time.Since(begin).Round(100*time.Millisecond))
	// Heartbeats of the whole fleet have come in at least once.
	time.Sleep(6 * time.Second)
	atN := b.measure(ctx, fmt.Sprintf("%d workers", fleet), requests)

	links := float64(fleet - small)
	r.figure("gateway memory per idle link", "%.1f KiB RSS, %.1f KiB Go heap, %.1f goroutines",
		float64(atN.rss-at10.rss)/links/1024, float64(atN.heap-at10.heap)/links/1024, float64(atN.goroutines-at10.goroutines)/links)
	if at10.p50 > 0 {
		r.figure("routing cost at the fleet against 10 workers", "p50 x%.2f, gateway CPU per request x%.2f",
			float64(atN.p50)/float64(at10.p50), float64(atN.cpu)/float64(max(at10.cpu, 1)))
	}
	// A shared machine's scheduling moves latencies by a millisecond or
	// so either way; routing that grew with the fleet costs far more at
	// thousands of workers.
	if bound := 3*at10.p50 + 2*time.Millisecond; atN.p50 > bound {
		r.fail("routing at %d workers: p50 %v, above %v (3x the %v at 10, plus 2ms)", fleet, atN.p50, bound, at10.p50)
	}
	return nil
}

// bigFleetModels is how many models the fleet serves, a share of the
// workers each.
const bigFleetModels = 4

func bigFleetModel(i int) string { return "fleet-model-" + strconv.Itoa(i%bigFleetModels) }

type bigFleetRun struct {
	h       *rig
	g       *gateway
	r       *result
	pprof   string
	token   string
	engines []engine.Engine
	// dials bounds the connections being opened at once, as a fleet
	// starting together would be spread by its machines' boot times.
	dials  chan struct{}
	agents sync.WaitGroup
}

// start runs the agents numbered from to to, each serving one model.
func (b *bigFleetRun) start(ctx context.Context, from, to int) {
	// The agents' ends of the links: small buffers, taken from a pool
	// for each write, so that thousands fit in this process.
	pool := &sync.Pool{}
	dial := func(ctx context.Context, u string) (link.Conn, error) {
		select {
		case b.dials <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer func() { <-b.dials }()
		d := websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 4 << 10, WriteBufferSize: 4 << 10, WriteBufferPool: pool}
		hdr := http.Header{}
		hdr.Set("Authorization", "Bearer "+b.token)
		ws, resp, err := d.DialContext(ctx, u, hdr)
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		if err != nil {
			return nil, err
		}
		return link.WebSocket(ws, link.DefaultKeepalive()), nil
	}
	for i := from; i < to; i++ {
		a, err := worker.New(worker.Config{
			Gateway: b.g.URL, Token: b.token, Name: fmt.Sprintf("fleet-%05d", i), MaxConcurrent: 4,
			Version: "reliability", Engines: []engine.Engine{b.engines[i%bigFleetModels]}, Dial: dial,
			RefreshModels: time.Hour, DrainTimeout: time.Second,
		})
		if err != nil {
			b.r.fail("worker %d: %v", i, err)
			continue
		}
		b.agents.Go(func() { _ = a.Run(ctx) })
	}
}

// waitHealthy waits until the gateway lists n healthy workers.
func (b *bigFleetRun) waitHealthy(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	healthy := 0
	for {
		ws, err := b.workers(ctx)
		if err != nil {
			return err
		}
		healthy = 0
		for _, w := range ws {
			if w.Status == api.StatusHealthy {
				healthy++
			}
		}
		if healthy >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d workers healthy after %s", healthy, n, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (b *bigFleetRun) workers(ctx context.Context) ([]api.Worker, error) {
	st, body, err := b.g.do(ctx, "GET", "/api/v1/workers", nil)
	if err != nil {
		return nil, err
	}
	var list struct {
		Workers []api.Worker `json:"workers"`
	}
	if st != http.StatusOK || json.Unmarshal(body, &list) != nil {
		return nil, fmt.Errorf("workers: status %d %s", st, tail(string(body), 200))
	}
	return list.Workers, nil
}

// fleetSample is what the gateway costs at one fleet size.
type fleetSample struct {
	p50          time.Duration
	cpu          time.Duration // gateway CPU per request, above its idle rate
	rss, heap    int64
	goroutines   int
	listing      time.Duration
	listingBytes int
}

// measure takes a fleetSample: the gateway's memory and goroutines while
// idle, requests routed one after another, and the listing's time.
func (b *bigFleetRun) measure(ctx context.Context, label string, requests int) fleetSample {
	var s fleetSample
	pid := b.g.Pid()
	res := &soakResources{name: "gateway", pid: pid, pprof: b.pprof}
	if u, err := res.sample(ctx, true); err != nil {
		b.r.fail("%s: gateway profile: %v", label, err)
	} else {
		s.heap, s.goroutines = u.heap, u.goroutines
	}
	s.rss, _ = rss(pid)
	// The gateway's CPU while idle (heartbeats and pings), then while
	// routing: what the requests cost is the difference.
	idleFrom, idleCPU := time.Now(), cpuTicks(pid)
	time.Sleep(3 * time.Second)
	idleRate := float64(cpuTicks(pid)-idleCPU) / time.Since(idleFrom).Seconds()
	from, cpu0 := time.Now(), cpuTicks(pid)
	lat := b.route(ctx, requests)
	busy := float64(cpuTicks(pid)-cpu0) - idleRate*time.Since(from).Seconds()
	s.cpu = time.Duration(max(busy, 0) / clockTicks / float64(requests) * float64(time.Second))
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(10 * time.Microsecond) }
		s.p50 = q(0.5)
		b.r.figure("routing at "+label, "p50 %v, p99 %v over %d requests one at a time; gateway CPU %v per request",
			s.p50, q(0.99), len(lat), s.cpu.Round(time.Microsecond))
	}
	var times []time.Duration
	for range 5 {
		start := time.Now()
		st, body, err := b.g.do(ctx, "GET", "/api/v1/workers", nil)
		if err != nil || st != http.StatusOK {
			b.r.fail("%s: GET /workers: %d %v", label, st, err)
			continue
		}
		times = append(times, time.Since(start))
		s.listingBytes = len(body)
	}
	if len(times) > 0 {
		slices.Sort(times)
		s.listing = times[len(times)/2]
		b.r.figure("GET /workers at "+label, "median %v of %d, %d KiB", s.listing.Round(100*time.Microsecond), len(times), s.listingBytes>>10)
	}
	b.r.figure("gateway at "+label+", idle", "RSS %s, Go heap %s, %d goroutines", soakMiB(s.rss), soakMiB(s.heap), s.goroutines)
	return s
}

// route sends n chat completions one after another, across the models,
// and returns the latency of those that succeeded; the rest are failures.
func (b *bigFleetRun) route(ctx context.Context, n int) []time.Duration {
	var lat []time.Duration
	failed := 0
	for i := range n {
		body, _ := json.Marshal(map[string]any{"model": bigFleetModel(i), "max_tokens": 4,
			"messages": []map[string]string{{"role": "user", "content": "hello"}}})
		start := time.Now()
		st, resp, err := b.g.do(ctx, "POST", "/v1/chat/completions", body)
		if err != nil || st != http.StatusOK {
			if failed++; failed <= 3 {
				b.r.fail("request %d for %s: status %d %v %s", i, bigFleetModel(i), st, err, tail(string(resp), 200))
			}
			continue
		}
		lat = append(lat, time.Since(start))
	}
	if failed > 3 {
		b.r.fail("%d more requests failed", failed-3)
	}
	return lat
}

// clockTicks is the unit of /proc's CPU times (USER_HZ).
const clockTicks = 100

// cpuTicks is a process's user and system CPU time, in clock ticks.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Past the command name, which may hold spaces: state is field 3,
	// utime and stime are fields 14 and 15.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}
