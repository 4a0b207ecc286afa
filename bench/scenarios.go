package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// scale sizes every scenario: full runs for people, short for the tests.
type scale struct {
	short    bool
	repeat   int
	warmup   time.Duration
	duration time.Duration
	rates    []float64
	slowRate float64 // the rate of the scenario at fixed engine latency
	streams  []int
	cancels  int
	conc     int
	usage    int
	profile  string // directory for CPU and allocation profiles, when set
	place    placement
	// svcSource is the module svc is built from; "" is this one.
	svcSource string
	// cluster adds the paths through two replicas on PostgreSQL.
	cluster bool
	// The overload scenario's open loop: above capacity for overloadFor,
	// below it for recoverFor, each request given overloadTimeout.
	overloadFor, recoverFor, overloadTimeout time.Duration
	// overloadLatency, when set, is the engine's time per request in the
	// overload scenario, and overloadHold the gateway's --queue-hold.
	overloadLatency, overloadHold time.Duration
}

func fullScale() scale {
	return scale{repeat: 3, warmup: 2 * time.Second, duration: 10 * time.Second, rates: []float64{500, 1000, 2000, 5000},
		slowRate: 1000, streams: []int{1000, 10000}, cancels: 50, conc: 64, usage: 1_000_000,
		overloadFor: time.Minute, recoverFor: 20 * time.Second, overloadTimeout: time.Second, overloadHold: overloadHold}
}

func shortScale() scale {
	return scale{short: true, repeat: 1, warmup: 100 * time.Millisecond, duration: 500 * time.Millisecond, rates: []float64{200},
		slowRate: 100, streams: []int{50}, cancels: 3, conc: 8, usage: 20_000,
		overloadFor: 1500 * time.Millisecond, recoverFor: time.Second, overloadTimeout: time.Second, overloadHold: overloadHold}
}

// scenario is one measured comparison across paths.
type scenario struct {
	Name     string              `json:"name"`
	Note     string              `json:"note,omitempty"`
	Paths    map[string]stats    `json:"paths"`
	Overhead map[string]overhead `json:"overhead,omitempty"` // path -> minus direct
	// Forwarding is what svc-forwarded adds over svc and over svc-leader:
	// its figures minus theirs, CPU per request included.
	Forwarding map[string]overhead `json:"forwarded_minus,omitempty"`
	Ratio      *float64            `json:"svc_over_nginx_overhead_ratio,omitempty"`
	Extra      map[string]any      `json:"extra,omitempty"`
	// Recovery is the overload scenario's p50 latency, in ms, of the 200s
	// sent in each 250 ms after the load drops; -1 where there are none.
	Recovery []float64 `json:"recovery_p50_ms,omitempty"`
}

// minRatioBase is the least nginx overhead, in ms, that svc's is divided
// by: below it the ratio measures noise.
const minRatioBase = 0.01

// overhead is a path's percentiles minus direct's, in ms.
type overhead struct {
	P50  float64  `json:"p50_ms"`
	P90  float64  `json:"p90_ms"`
	P99  float64  `json:"p99_ms"`
	P999 float64  `json:"p99.9_ms"`
	TTFT *float64 `json:"ttft_p50_ms,omitempty"`
	Gap  *float64 `json:"chunk_gap_p99_ms,omitempty"`
	// CPU is the system under test's CPU time per request minus the
	// other path's, in µs; only between paths that both have one.
	CPU *float64 `json:"cpu_us_per_request,omitempty"`
}

// minus is s's figures minus base's.
func minus(s, base stats) overhead {
	o := overhead{P50: s.Latency.P50 - base.Latency.P50, P90: s.Latency.P90 - base.Latency.P90,
		P99: s.Latency.P99 - base.Latency.P99, P999: s.Latency.P999 - base.Latency.P999}
	if s.TTFT != nil && base.TTFT != nil {
		v := s.TTFT.P50 - base.TTFT.P50
		o.TTFT = &v
	}
	if s.Gap != nil && base.Gap != nil {
		v := s.Gap.P99 - base.Gap.P99
		o.Gap = &v
	}
	if s.CPUPerRequest > 0 && base.CPUPerRequest > 0 {
		v := s.CPUPerRequest - base.CPUPerRequest
		o.CPU = &v
	}
	return o
}

const unaryBody = `{"model":"sim-chat","messages":[{"role":"user","content":"hello\nsim: tokens=16"}]}`

// conversationBody is a chat with its history, 24 KB of it, as agents
// send: 80 turns of text in English with a few words in another script,
// escaped quotes and newlines, then the same question as unaryBody. What
// a gateway does for each byte of a body shows here, where unaryBody
// shows what it does for each request.
var conversationBody = func() string {
	var b strings.Builder
	b.WriteString(`{"model":"sim-chat","messages":[{"role":"system","content":"You are a helpful assistant."}`)
	for range 80 {
		b.WriteString(`,{"role":"user","content":"The quick brown fox jumps over the lazy dog, 日本語. ` +
			`The quick brown fox jumps over the lazy dog, \"quoted\".\n"}` +
			`,{"role":"assistant","content":"The quick brown fox jumps over the lazy dog, once more. ` +
			`The quick brown fox jumps over the lazy dog, and again."}`)
	}
	b.WriteString(`,{"role":"user","content":"hello\nsim: tokens=16"}]}`)
	return b.String()
}()

// slowBody is answered after a fixed 50 ms, so at 1000 requests a second
// about 50 are in flight on every hop at once.
const slowBody = `{"model":"sim-chat","messages":[{"role":"user","content":"hello\nsim: tokens=16 ttft=50ms"}]}`

// streamBody streams 50 chunks at a fixed interval of 5 ms.
const streamBody = `{"model":"sim-chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"stream\nsim: tokens=50 tps=200"}]}`

// holdBody streams one token a second for a long time: an open stream.
const holdBody = `{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"hold\nsim: tokens=100000 tps=1"}]}`

// measure runs fn on every path, interleaved (A, B, C, A, B, C) and
// repeated, and keeps the median of each figure.
func (h *rig) measure(name string, paths []*path, fn func(p *path) stats) *scenario {
	sc := &scenario{Name: name, Paths: map[string]stats{}}
	runs := map[string][]stats{} // every repeat, before taking medians
	for range h.scale.repeat {
		for _, p := range paths {
			runtime.GC()
			before, dbBefore := p.usage(), p.dbUsage()
			start := time.Now()
			st := fn(p)
			after, dbAfter := p.usage(), p.dbUsage()
			took := time.Since(start).Seconds()
			if before.valid && after.valid {
				st.CPU = (after.cpu - before.cpu).Seconds() / took
				st.PeakRSS = after.hwm
				// An open loop's warm-up runs at the measured rate, so
				// the share of a core over the rate is the CPU time of
				// a request; a closed loop counts its own.
				if st.CPUPerRequest == 0 && st.Achieved > 0 {
					st.CPUPerRequest = st.CPU / st.Achieved * 1e6
				}
			}
			if dbBefore.valid && dbAfter.valid {
				st.DBCPU = (dbAfter.cpu - dbBefore.cpu).Seconds() / took
			}
			if p.settle != nil {
				p.settle()
			}
			// Each path has its own connections, idle until they time out:
			// with five paths, enough of them to run out of open files.
			h.client.CloseIdleConnections()
			runs[p.name] = append(runs[p.name], st)
		}
	}
	for n, r := range runs {
		sc.Paths[n] = median(r)
	}
	sc.overheads()
	h.log("%s done", name)
	return sc
}

// median takes the median run by p50 latency and keeps its figures.
func median(runs []stats) stats {
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b stats) int { return cmp.Compare(a.Latency.P50, b.Latency.P50) })
	return sorted[len(sorted)/2]
}

func (sc *scenario) overheads() {
	d, ok := sc.Paths["direct"]
	if !ok {
		return
	}
	sc.Overhead = map[string]overhead{}
	for n, s := range sc.Paths {
		if n != "direct" {
			sc.Overhead[n] = minus(s, d)
		}
	}
	if f, ok := sc.Paths[pathForwarded]; ok {
		sc.Forwarding = map[string]overhead{}
		for _, n := range []string{"svc", pathLeader} {
			if s, ok := sc.Paths[n]; ok {
				sc.Forwarding[n] = minus(f, s)
			}
		}
	}
	if s, ok := sc.Overhead["svc"]; ok {
		if n, ok := sc.Overhead["nginx"]; ok && n.P50 >= minRatioBase {
			r := s.P50 / n.P50
			sc.Ratio = &r
		}
	}
}

// unary is non-streaming chat at a constant rate.
func (h *rig) unary(ctx context.Context, rate float64) *scenario {
	return h.openLoopScenario(ctx, fmt.Sprintf("unary-%grps", rate), rate, unaryBody)
}

// unarySlow is non-streaming chat at a constant rate against an engine
// that takes a fixed time to answer: the overhead with many requests in
// flight rather than one at a time.
func (h *rig) unarySlow(ctx context.Context, rate float64) *scenario {
	sc := h.openLoopScenario(ctx, fmt.Sprintf("unary-%grps-50ms", rate), rate, slowBody)
	sc.Note = "the engine answers after 50 ms"
	return sc
}

// openLoopScenario sends body at rate on every path, after a warm-up.
func (h *rig) openLoopScenario(ctx context.Context, name string, rate float64, body string) *scenario {
	return h.measure(name, h.paths, func(p *path) stats {
		do := unaryCall(h.client, p, body)
		openLoop(ctx, rate, h.scale.warmup, do)
		outs, el := openLoop(ctx, rate, h.scale.duration, do)
		st := summarise(outs, el)
		st.Target = rate
		return st
	})
}

// maxThroughput keeps conc requests in flight, each client sending its
// next request when the previous one is answered (as wrk does): the most
// each path answers. The system under test's CPU time and, for svc, its
// heap allocations are divided by the requests answered in the measured
// part, so that the cost of a request is read without a profiler.
func (h *rig) maxThroughput(ctx context.Context) *scenario {
	return h.closedLoopScenario(ctx, "max-throughput", unaryBody)
}

// conversation is maxThroughput with a 24 KB conversation for a body.
func (h *rig) conversation(ctx context.Context) *scenario {
	return h.closedLoopScenario(ctx, "max-throughput-24kb", conversationBody)
}

// closedLoopScenario measures the closed loop of maxThroughput with body.
func (h *rig) closedLoopScenario(ctx context.Context, name, body string) *scenario {
	sc := h.measure(name, h.paths, func(p *path) stats {
		do := unaryCall(h.client, p, body)
		closedLoop(ctx, h.scale.conc, h.scale.warmup, do)
		each, mallocs := p.usageEach(), p.mallocs()
		st := summarise(closedLoop(ctx, h.scale.conc, h.scale.duration, do))
		eachAfter, mallocsAfter := p.usageEach(), p.mallocs()
		if before, after := total(each), total(eachAfter); st.Requests > 0 && before.valid && after.valid {
			st.CPUPerRequest = float64((after.cpu - before.cpu).Microseconds()) / float64(st.Requests)
		}
		if len(each) > 1 && st.Requests > 0 {
			// Which process a change moved: the total's noise from other
			// work is shared, the split between them much less so.
			st.CPUPerRequestOf = cpuPer(each, eachAfter, st.Requests)
		}
		if st.Requests > 0 && mallocs > 0 && mallocsAfter > mallocs {
			st.AllocsPerRequest = float64(mallocsAfter-mallocs) / float64(st.Requests)
		}
		return st
	})
	sc.Note = fmt.Sprintf("closed loop, %d connections each sending its next request when the previous is answered", h.scale.conc)
	sc.Extra = map[string]any{}
	for n, s := range sc.Paths {
		if s.CPUPerRequest > 0 {
			sc.Extra[n+"_cpu_per_request_us"] = s.CPUPerRequest
		}
		for role, us := range s.CPUPerRequestOf {
			sc.Extra[n+"_"+role+"_cpu_per_request_us"] = us
		}
		if s.AllocsPerRequest > 0 {
			sc.Extra[n+"_allocs_per_request"] = s.AllocsPerRequest
		}
	}
	if s, ok := sc.Paths["svc"]; ok {
		if n, ok := sc.Paths["nginx"]; ok && n.Achieved > 0 {
			sc.Extra["svc_over_nginx_throughput"] = s.Achieved / n.Achieved
		}
	}
	return sc
}

// streaming is 50-chunk streams at a fixed chunk interval.
func (h *rig) streaming(ctx context.Context) *scenario {
	rate := streamRate(h.scale.short)
	sc := h.measure("stream-50-chunks", h.paths, func(p *path) stats {
		do := streamCall(h.client, p, streamBody)
		outs, el := openLoop(ctx, rate, h.scale.duration+h.scale.warmup, do)
		st := summarise(outs, el)
		st.Target = rate
		return st
	})
	sc.Note = "engine sends a chunk every 5 ms; ttft and gaps measured at the client"
	return sc
}

// streamRate is the streaming scenario's streams a second.
func streamRate(short bool) float64 {
	if short {
		return 10
	}
	return 40
}

// openStreams holds n streams open at once through svc and reports the
// memory the gateway and worker use for them. It has a gateway, worker
// and engine of its own: fresh processes, and an engine process whose
// sockets do not count against the harness's open-file limit.
func (h *rig) openStreams(ctx context.Context, n int) *scenario {
	sc := &scenario{Name: fmt.Sprintf("open-streams-%d", n), Paths: map[string]stats{}, Extra: map[string]any{}}
	if limit := fileLimit(); limit < uint64(n+1000) {
		sc.Note = fmt.Sprintf("skipped: %d streams need about %d open files in the harness, the limit is %d (ulimit -n)", n, n+1000, limit)
		h.log("%s %s", sc.Name, sc.Note)
		return sc
	}
	sim, url, err := simProcess(h.scale.place, h.dir, h.bin)
	if err != nil {
		sc.Note = "skipped: " + err.Error()
		return sc
	}
	defer func() { _ = sim.Stop(syscall.SIGTERM, stopGrace) }()
	// The gateway's connection cap counts the worker's link too: n
	// streams need a cap above n, or one is refused with the cap's 503.
	svc, err := svcPath(h.scale.place, h.dir, h.bin, url, svcOptions{maxConnections: n + 100})
	if err != nil {
		sc.Note = "skipped: " + err.Error()
		return sc
	}
	defer svc.stop()
	runtime.GC()
	time.Sleep(200 * time.Millisecond)
	base := svc.usage()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	opened, failed := 0, 0
	firstFailure := ""
	ready := make(chan struct{}, n)
	for range n {
		wg.Go(func() {
			resp, err := h.client.Do(chatRequest(ctx, svc, holdBody))
			if err == nil && resp.StatusCode == 200 {
				awaitContent(resp.Body)
				mu.Lock()
				opened++
				mu.Unlock()
				ready <- struct{}{}
				<-ctx.Done()
				resp.Body.Close()
				return
			}
			why := fmt.Sprint(err)
			if resp != nil {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				why = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
			}
			mu.Lock()
			failed++
			if firstFailure == "" {
				firstFailure = why
			}
			mu.Unlock()
			ready <- struct{}{}
		})
		// Open at a steady pace rather than all at once.
		time.Sleep(200 * time.Microsecond)
	}
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
wait:
	for range n {
		select {
		case <-ready:
		case <-deadline.C:
			h.log("%s: only some streams opened within 2 minutes", sc.Name)
			break wait
		}
	}
	time.Sleep(500 * time.Millisecond)
	held := svc.usage()
	if h.scale.profile != "" {
		h.heapProfiles(svc, fmt.Sprintf("streams-%d", n))
	}
	cancel()
	wg.Wait()
	sc.Note = "memory is the gateway's and the worker's together"
	sc.Extra["opened"] = opened
	sc.Extra["failed"] = failed
	if firstFailure != "" {
		sc.Extra["first_failure"] = firstFailure
		h.log("%s: first failure: %s", sc.Name, firstFailure)
	}
	sc.Extra["rss_before_bytes"] = base.rss
	sc.Extra["rss_held_bytes"] = held.rss
	sc.Extra["peak_rss_bytes"] = held.hwm
	if opened > 0 {
		sc.Extra["rss_per_stream"] = float64(held.rss-base.rss) / float64(opened)
	}
	h.log("%s done: %d open, RSS %.0f MiB", sc.Name, opened, float64(held.rss)/(1<<20))
	return sc
}

// saturation fills the engine's slots (a worker with 4) with twice as many
// clients and measures how fast the 429s come back.
func (h *rig) saturation(ctx context.Context) *scenario {
	sc := &scenario{Name: "saturation-429", Paths: map[string]stats{}}
	p, err := svcPath(h.scale.place, h.dir, h.bin, h.engine.url, svcOptions{maxConcurrent: 4, queueHold: time.Millisecond})
	if err != nil {
		sc.Note = "skipped: " + err.Error()
		return sc
	}
	defer p.stop()
	body := `{"model":"sim-chat","messages":[{"role":"user","content":"slow\nsim: tokens=4 ttft=200ms"}]}`
	outs, el := closedLoop(ctx, 8, h.scale.duration+h.scale.warmup, unaryCall(h.client, p, body))
	sc.Paths["svc"] = summarise(outs, el, http.StatusTooManyRequests)
	limited, withRetry := 0, 0
	for _, o := range outs {
		if o.status == http.StatusTooManyRequests {
			limited++
			if o.retry != "" {
				withRetry++
			}
		}
	}
	if limited > 0 {
		sc.Extra = map[string]any{"retry_after_share": float64(withRetry) / float64(limited)}
	}
	sc.Note = "worker with 4 slots, 8 clients, queue hold 1 ms; latency is of the 429 answers"
	h.log("%s done", sc.Name)
	return sc
}

// cancels measures how long a client's cancel takes to reach the engine:
// the client closes after the first chunk, the engine notes when its
// request ended.
func (h *rig) cancels(ctx context.Context) *scenario {
	sc := &scenario{Name: "cancel-to-engine", Paths: map[string]stats{}}
	for _, p := range h.paths {
		var lat []time.Duration
		// The cluster's paths share one usage log: each counts its own.
		logged := 0
		if p.key != "" {
			logged = h.count499(ctx, p)
		}
		for range h.scale.cancels {
			h.engine.cancelled()
			ctx, cancel := context.WithCancel(ctx)
			resp, err := h.client.Do(chatRequest(ctx, p, holdBody))
			if err != nil {
				cancel()
				continue
			}
			awaitContent(resp.Body)
			closed := time.Now()
			cancel()
			resp.Body.Close()
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				if ends := h.engine.cancelled(); len(ends) > 0 {
					lat = append(lat, ends[0].Sub(closed))
					break
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		s := stats{Requests: h.scale.cancels, Latency: pct(lat), Statuses: map[string]int{"seen_by_engine": len(lat)}}
		if p.key != "" {
			s.Statuses["logged_499"] = h.loggedCancels(ctx, p, logged+len(lat)) - logged
		}
		sc.Paths[p.name] = s
	}
	sc.overheads()
	sc.Note = "latency is from the client closing to the engine's request ending"
	h.log("%s done", sc.Name)
	return sc
}

// loggedCancels counts the usage log's recent rows with status 499 (each
// cancelled request must be recorded), waiting up to two seconds for want
// of them: rows are written in groups every 100 ms.
func (h *rig) loggedCancels(ctx context.Context, p *path, want int) int {
	n := 0
	wait, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = harness.Poll(wait, 50*time.Millisecond, func() bool {
		n = h.count499(ctx, p)
		return n >= want
	})
	return n
}

func (h *rig) count499(ctx context.Context, p *path) int {
	req, _ := http.NewRequestWithContext(ctx, "GET", p.base+"/api/v1/usage/logs?limit=1000", nil)
	req.Header.Set("Authorization", "Bearer "+p.key)
	resp, err := h.client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var rows []struct {
		StatusCode int `json:"status_code"`
	}
	if json.NewDecoder(resp.Body).Decode(&rows) != nil {
		return 0
	}
	n := 0
	for _, r := range rows {
		if r.StatusCode == 499 {
			n++
		}
	}
	return n
}

// awaitContent reads a stream until its first content chunk, or its end.
func awaitContent(r io.Reader) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil || strings.Contains(line, `"content"`) {
			return
		}
	}
}
