package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// soak runs a steady mix of streaming and non-streaming chats and
// embeddings against a gateway and two workers for minutes, cancels some
// requests mid-way and restarts one worker (gracefully and with kill -9)
// over and over. It judges that every request ended, with success or a
// status the spec gives, that the usage log holds exactly the requests
// the gateway took, and that the gateway and the worker never restarted
// give back their goroutines, open files and heap once the load stops.
func soak(ctx context.Context, h *rig, r *result) error {
	duration := scaled(h, 18*time.Second, 10*time.Minute)
	restartEvery := scaled(h, 7*time.Second, 30*time.Second)
	const rate = 12 // requests started per second

	gwPprof, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	wPprof, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	g, err := h.startGateway(ctx, "soak-gw", "--pprof-addr", gwPprof, "--worker-grace", "5s")
	if err != nil {
		return err
	}
	defer g.Kill()
	workerArgs := []string{"--engine", "sim", "--max-concurrent", "8"}
	stable, err := h.startWorker(ctx, g, "soak-stable", g.URL, append(workerArgs, "--pprof-addr", wPprof)...)
	if err != nil {
		return err
	}
	defer stable.Kill()
	var restartedMu sync.Mutex
	restarted, err := h.startWorker(ctx, g, "soak-restarted", g.URL, workerArgs...)
	if err != nil {
		return err
	}
	defer func() {
		restartedMu.Lock()
		defer restartedMu.Unlock()
		restarted.Kill()
	}()

	s := &soakRun{g: g, r: r, client: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 64, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}}
	// Warm-up: every kind of request once or more, so lazily made pools
	// and caches count in the baseline.
	begin := time.Now()
	for i := range 12 {
		s.one(ctx, rand.New(rand.NewPCG(uint64(i), 1)), false)
	}
	if s.failed.Load() > 0 {
		return errors.New("warm-up requests failed")
	}
	s.reset()

	gwRes := &soakResources{name: "gateway", pid: g.Pid(), pprof: "http://" + gwPprof}
	wRes := &soakResources{name: "worker (not restarted)", pid: stable.Pid(), pprof: "http://" + wPprof}
	// No idle client connection may count in the baseline: the ones
	// after the load are closed too.
	s.client.CloseIdleConnections()
	client.CloseIdleConnections()
	time.Sleep(2 * time.Second)
	for _, res := range []*soakResources{gwRes, wRes} {
		if res.base, err = res.sample(ctx, true); err != nil {
			return fmt.Errorf("%s baseline: %w", res.name, err)
		}
		res.peak = res.base
	}

	h.logf("soak: baseline taken at %s; %s of load", time.Since(begin).Round(100*time.Millisecond), duration)
	// The load: requests started at a steady rate, each on its own
	// goroutine, while one worker is restarted and soakResources sampled.
	loadCtx, stopLoad := context.WithTimeout(ctx, duration)
	defer stopLoad()
	var wg sync.WaitGroup
	var restarts, kills atomic.Int64
	wg.Go(func() {
		t := time.NewTicker(restartEvery)
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-loadCtx.Done():
				return
			case <-t.C:
			}
			restartedMu.Lock()
			switch {
			case restarted.Exited(): // its last start failed
			case n%2 == 0:
				restarted.Kill()
				kills.Add(1)
			default:
				if err := restarted.Stop(syscall.SIGTERM, stopGrace); err != nil {
					r.fail("graceful worker stop: %v", err)
				}
			}
			p, err := h.startWorker(ctx, g, "soak-restarted", g.URL, workerArgs...)
			if err != nil {
				r.fail("restart worker (%d) after %s: %v; the gateway lists %s", n, []string{"kill -9", "SIGTERM"}[n%2], err, workerStates(ctx, g))
			} else {
				restarted = p
				restarts.Add(1)
			}
			restartedMu.Unlock()
		}
	})
	wg.Go(func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-t.C:
			}
			for _, res := range []*soakResources{gwRes, wRes} {
				if v, err := res.sample(ctx, false); err == nil {
					res.peak = res.peak.max(v)
				}
			}
		}
	})
	start := time.Now()
	tick := time.NewTicker(time.Second / rate)
	var reqs sync.WaitGroup
	for i := uint64(0); ; i++ {
		select {
		case <-loadCtx.Done():
		case <-tick.C:
			reqs.Go(func() { s.one(ctx, rand.New(rand.NewPCG(i, 2)), true) })
			continue
		}
		break
	}
	tick.Stop()
	reqs.Wait()
	wg.Wait()
	loadTime := time.Since(start)
	h.logf("soak: load done after %s; judging the usage log and waiting for the baseline", loadTime.Round(time.Second))
	restartedMu.Lock()
	if restarted.Exited() { // its last restart failed, which is reported
		if p, err := h.startWorker(ctx, g, "soak-restarted", g.URL, workerArgs...); err == nil {
			restarted = p
		}
	}
	err = g.waitWorker(ctx, "soak-restarted", restarted, 30*time.Second)
	restartedMu.Unlock()
	if err != nil {
		r.fail("restarted worker not back after the load: %v; the gateway lists %s", err, workerStates(ctx, g))
	}

	r.figure("duration", "%s of load at %d requests/s", loadTime.Round(time.Second), rate)
	r.figure("requests", "%d: %d chat streams, %d chats, %d embeddings", s.sent.Load(), s.streams.Load(), s.chats.Load(), s.embeds.Load())
	r.figure("outcomes", "%s", s.outcomes())
	r.figure("client cancels", "%d (%d streams after their first chunk, %d waiting replies)", s.cancels.Load(), s.streamCancels.Load(), s.cancels.Load()-s.streamCancels.Load())
	r.figure("worker restarts", "%d (%d kill -9, %d SIGTERM), every %s", restarts.Load(), kills.Load(), restarts.Load()-kills.Load(), restartEvery)

	s.checkUsage(ctx)
	if st, body, err := g.do(ctx, "GET", "/api/v1/usage/inflight", nil); err != nil || st != 200 || strings.TrimSpace(string(body)) != "[]" {
		r.fail("requests still in progress after the load: status %d, err %v: %s", st, err, tail(string(body), 500))
	}

	// Back to the baseline, within bounds, once the load is gone.
	s.client.CloseIdleConnections()
	client.CloseIdleConnections()
	for _, res := range []*soakResources{gwRes, wRes} {
		settleStart := time.Now()
		res.settle(ctx, 60*time.Second)
		h.logf("soak: %s settled in %s", res.name, time.Since(settleStart).Round(100*time.Millisecond))
		r.figure(res.name+" goroutines", "baseline %d, peak %d, after %d (bound %d; fasthttp's idle pool workers not counted)", res.base.goroutines, res.peak.goroutines, res.after.goroutines, res.base.goroutines+goroutineSlack)
		r.figure(res.name+" open files", "baseline %d, peak %d, after %d (bound %d)", res.base.fds, res.peak.fds, res.after.fds, res.base.fds+fdSlack)
		r.figure(res.name+" heap in use", "baseline %s, peak %s, after %s (bound %s)", soakMiB(res.base.heap), soakMiB(res.peak.heap), soakMiB(res.after.heap), soakMiB(res.heapBound()))
		if !res.within(res.after) {
			r.fail("%s did not return to its baseline within 60s: goroutines %d (baseline %d), open files %d (baseline %d), heap %s (baseline %s)",
				res.name, res.after.goroutines, res.base.goroutines, res.after.fds, res.base.fds, soakMiB(res.after.heap), soakMiB(res.base.heap))
		}
	}
	for _, p := range []*harness.Proc{g.Proc, stable} {
		if c := crashed(p); c != "" {
			r.fail("%s crashed: %s", p.Name(), c)
		}
	}
	return nil
}

// Tolerances for "back to the baseline".
const (
	goroutineSlack = 5
	fdSlack        = 4
	heapSlack      = 4 << 20
)

// soakRun is the load's bookkeeping.
type soakRun struct {
	g      *gateway
	r      *result
	client *http.Client

	sent, streams, chats, embeds atomic.Int64
	cancels, streamCancels       atomic.Int64
	failed                       atomic.Int64

	mu sync.Mutex
	// seen maps each X-Request-Id a client received to the status it saw.
	seen map[string]int
	// cancelled counts cancelled requests whose id the client never saw,
	// and of those, the ones fully written before the cancel: the gateway
	// had them, so each must have a row.
	unseenCancels, unseenWritten int
	byOutcome                    map[string]int
}

// reset zeroes the figures after the warm-up; the ids seen stay, since
// the warm-up's requests are in the usage log too.
func (s *soakRun) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byOutcome = map[string]int{}
	s.sent.Store(0)
	s.streams.Store(0)
	s.chats.Store(0)
	s.embeds.Store(0)
	s.cancels.Store(0)
	s.streamCancels.Store(0)
	s.failed.Store(0)
}

// spec'd is what a request may end with while workers come and go.
var soakStatuses = map[int]bool{200: true, 429: true, 502: true, 503: true, 504: true}

func (s *soakRun) fail(format string, args ...any) {
	s.failed.Add(1)
	s.r.fail(format, args...)
}

func (s *soakRun) outcome(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byOutcome == nil {
		s.byOutcome = map[string]int{}
	}
	s.byOutcome[what]++
}

func (s *soakRun) outcomes() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for k, v := range s.byOutcome {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func (s *soakRun) saw(id string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]int{}
	}
	if _, dup := s.seen[id]; dup {
		s.r.fail("request id %s given to two requests", id)
	}
	s.seen[id] = status
}

// one sends one request of a random kind; with cancels, about one chat
// in eight is cancelled by the client part-way.
func (s *soakRun) one(ctx context.Context, rng *rand.Rand, cancels bool) {
	s.sent.Add(1)
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	kind := rng.IntN(20)
	stream := kind < 8
	cancelIt := cancels && kind < 15 && rng.IntN(8) == 0
	var path string
	var body []byte
	switch {
	case kind >= 15:
		s.embeds.Add(1)
		path = "/v1/embeddings"
		body, _ = json.Marshal(map[string]any{"model": "sim-embed", "input": fmt.Sprintf("soak text %d", rng.Uint64())})
	default:
		if stream {
			s.streams.Add(1)
		} else {
			s.chats.Add(1)
		}
		path = "/v1/chat/completions"
		tokens := 10 + rng.IntN(60)
		if cancelIt {
			tokens = 400 // long enough that the cancel lands mid-way
		}
		body = chatBody("sim-chat", fmt.Sprintf("soak %d\nsim: tokens=%d tps=100", rng.Uint64(), tokens), stream)
	}
	var written atomic.Bool
	reqCtx, cancelReq := context.WithCancel(ctx)
	defer cancelReq()
	reqCtx = httptrace.WithClientTrace(reqCtx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { written.Store(true) }})
	req, err := http.NewRequestWithContext(reqCtx, "POST", s.g.URL+path, bytes.NewReader(body))
	if err != nil {
		s.fail("soak: %v", err)
		return
	}
	req.Header.Set("Authorization", "Bearer "+s.g.Key)
	req.Header.Set("Content-Type", "application/json")
	if cancelIt && !stream {
		delay := time.Duration(50+rng.IntN(400)) * time.Millisecond
		t := time.AfterFunc(delay, cancelReq)
		defer t.Stop()
	}
	resp, err := s.client.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			s.fail("%s (stream %v) did not end within 120s: hung", path, stream)
			s.outcome("hung")
		case cancelIt && !stream:
			s.cancels.Add(1)
			s.mu.Lock()
			s.unseenCancels++
			if written.Load() {
				s.unseenWritten++
			}
			s.mu.Unlock()
			s.outcome("cancelled")
		default:
			s.fail("%s (stream %v): %v", path, stream, err)
			s.outcome("transport error")
		}
		return
	}
	defer resp.Body.Close()
	id := resp.Header.Get("X-Request-Id")
	if id == "" {
		s.fail("%s: status %d without X-Request-Id", path, resp.StatusCode)
	} else {
		s.saw(id, resp.StatusCode)
	}
	if stream && resp.StatusCode == 200 {
		s.readStream(ctx, resp, cancelIt, cancelReq, rng)
		return
	}
	b, err := io.ReadAll(resp.Body)
	switch {
	case ctx.Err() != nil:
		s.fail("%s: reply did not end within 120s: hung", path)
		s.outcome("hung")
	case err != nil && cancelIt:
		s.cancels.Add(1)
		s.outcome("cancelled")
	case err != nil:
		s.fail("%s: status %d, reading the reply: %v", path, resp.StatusCode, err)
		s.outcome("transport error")
	case !soakStatuses[resp.StatusCode]:
		s.fail("%s (stream %v): status %d is not one a worker restart may give: %s", path, stream, resp.StatusCode, tail(string(b), 300))
		s.outcome(strconv.Itoa(resp.StatusCode))
	case resp.StatusCode != 200:
		if !json.Valid(b) || !bytes.Contains(b, []byte(`"detail"`)) {
			s.fail("%s: status %d with a body that is not the spec's error: %s", path, resp.StatusCode, tail(string(b), 300))
		}
		s.outcome(strconv.Itoa(resp.StatusCode))
	default:
		var ok struct {
			Choices []json.RawMessage `json:"choices"`
			Data    []json.RawMessage `json:"data"`
		}
		if json.Unmarshal(b, &ok) != nil || len(ok.Choices)+len(ok.Data) == 0 {
			s.fail("%s: 200 with an unusable body: %s", path, tail(string(b), 300))
		}
		s.outcome("200")
	}
}

// readStream reads a chat stream to its end; with cancel, it closes it
// after the first chunk. A stream must end with [DONE] or an error frame.
func (s *soakRun) readStream(ctx context.Context, resp *http.Response, cancelIt bool, cancel func(), rng *rand.Rand) {
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var done, errFrame bool
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if cancelIt {
			s.cancels.Add(1)
			s.streamCancels.Add(1)
			time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
			cancel()
			s.outcome("cancelled")
			return
		}
		if d == "[DONE]" {
			done = true
			continue
		}
		if strings.Contains(d, `"error"`) && !strings.Contains(d, `"error":null`) {
			errFrame = true
		}
	}
	switch {
	case ctx.Err() != nil:
		s.fail("chat stream did not end within 120s: hung")
		s.outcome("hung")
	case sc.Err() != nil:
		s.fail("chat stream broke off: %v", sc.Err())
		s.outcome("transport error")
	case done:
		s.outcome("200")
	case errFrame:
		s.outcome("stream error frame")
	default:
		s.fail("chat stream ended with neither [DONE] nor an error frame")
		s.outcome("truncated stream")
	}
}

// checkUsage wants one usage row per request the gateway took: each id a
// client saw with the status it saw (a stream cut by an error frame
// records the error), and for cancelled requests whose id the client
// never saw, a 499 row for each one the gateway had.
func (s *soakRun) checkUsage(ctx context.Context) {
	s.mu.Lock()
	want := len(s.seen) + s.unseenWritten
	s.mu.Unlock()
	var rows []usageRow
	deadline := time.Now().Add(15 * time.Second)
	for {
		var err error
		rows, err = usageLog(ctx, s.g)
		if err != nil {
			s.r.fail("read the usage log: %v", err)
			return
		}
		// The log is written in batches: wait for the last.
		if len(rows) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	byID := map[string]usageRow{}
	for _, row := range rows {
		if _, dup := byID[row.ID]; dup {
			s.r.fail("usage log has request %s twice", row.ID)
		}
		byID[row.ID] = row
	}
	missing := 0
	for id, status := range s.seen {
		row, ok := byID[id]
		if !ok {
			missing++
			if missing <= 5 {
				s.r.fail("request %s (status %d) has no usage row", id, status)
			}
			continue
		}
		delete(byID, id)
		if row.StatusCode != status && !(status == 200 && (row.StatusCode == 499 || soakStatuses[row.StatusCode])) {
			s.r.fail("request %s: client saw %d, usage log says %d", id, status, row.StatusCode)
		}
	}
	if missing > 5 {
		s.r.fail("and %d more requests have no usage row", missing-5)
	}
	// What is left are the rows of requests cancelled before their
	// answer began.
	extra := len(byID)
	for id, row := range byID {
		if row.StatusCode != 499 && !soakStatuses[row.StatusCode] {
			s.r.fail("usage row %s of a cancelled request has status %d", id, row.StatusCode)
		}
	}
	if extra < s.unseenWritten || extra > s.unseenCancels {
		s.r.fail("usage log has %d rows for requests the client never saw answered; %d were cancelled after being sent whole, %d cancelled in all",
			extra, s.unseenWritten, s.unseenCancels)
	}
	s.r.figure("usage rows", "%d for %d requests (warm-up included): %d answered, %d cancelled before an answer (%d sent whole)",
		len(rows), len(s.seen)+s.unseenCancels, len(s.seen), s.unseenCancels, s.unseenWritten)
}

// soakResources follows one process's goroutines, open files and heap.
type soakResources struct {
	name  string
	pid   int
	pprof string

	base, peak, after soakSample
}

type soakSample struct {
	goroutines, fds int
	heap            int64 // bytes in use by live objects' spans
}

func (u soakSample) max(v soakSample) soakSample {
	return soakSample{max(u.goroutines, v.goroutines), max(u.fds, v.fds), max(u.heap, v.heap)}
}

func (res *soakResources) heapBound() int64 { return res.base.heap*3/2 + heapSlack }

func (res *soakResources) within(u soakSample) bool {
	return u.goroutines <= res.base.goroutines+goroutineSlack && u.fds <= res.base.fds+fdSlack && u.heap <= res.heapBound()
}

// settle waits, up to timeout, for the process to come back within its
// bounds, and records where it ended.
func (res *soakResources) settle(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		u, err := res.sample(ctx, true)
		if err == nil {
			res.after = u
			if res.within(u) {
				return
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(2 * time.Second)
	}
}

var (
	goroutineTotal = regexp.MustCompile(`goroutine profile: total (\d+)`)
	heapInuse      = regexp.MustCompile(`# HeapInuse = (\d+)`)
)

// idlePoolWorkers counts fasthttp's idle workers in a goroutine profile:
// goroutines parked in its worker pool, with nothing above the pool's own
// frame, which fasthttp keeps for reuse and reaps on its own clock (10 s
// idle, swept every 10 s). They are a bounded cache, not a leak, so the
// figures leave them out.
func idlePoolWorkers(profile []byte) int {
	n := 0
	_, groups, _ := strings.Cut(string(profile), "\n") // past "goroutine profile: total N"
	for _, group := range strings.Split(groups, "\n\n") {
		head, frames, ok := strings.Cut(group, "\n")
		if !ok {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimSpace(frames), "\n")
		if strings.Contains(first, "fasthttp.(*workerPool).workerFunc") {
			count, _, _ := strings.Cut(head, " @ ")
			c, _ := strconv.Atoi(strings.TrimSpace(count))
			n += c
		}
	}
	return n
}

// sample reads the process's figures; gc forces collections first, so
// the heap is what is live.
func (res *soakResources) sample(ctx context.Context, gc bool) (soakSample, error) {
	var u soakSample
	b, err := soakGet(ctx, res.pprof+"/debug/pprof/goroutine?debug=1")
	if err != nil {
		return u, err
	}
	m := goroutineTotal.FindSubmatch(b)
	if m == nil {
		return u, errors.New("no goroutine total in the profile")
	}
	u.goroutines, _ = strconv.Atoi(string(m[1]))
	u.goroutines -= idlePoolWorkers(b)
	heapURL := res.pprof + "/debug/pprof/heap?debug=1"
	if gc {
		heapURL += "&gc=1"
		// A second collection empties the sync.Pools, which keep what
		// they held through the first: buffers kept for reuse are not
		// live.
		if _, err := soakGet(ctx, heapURL); err != nil {
			return u, err
		}
	}
	if b, err = soakGet(ctx, heapURL); err != nil {
		return u, err
	}
	if m = heapInuse.FindSubmatch(b); m == nil {
		return u, errors.New("no HeapInuse in the heap profile")
	}
	u.heap, _ = strconv.ParseInt(string(m[1]), 10, 64)
	// The profile's own connection is counted too; it is there in the
	// baseline as well.
	u.fds = openFiles(res.pid)
	return u, nil
}

func soakGet(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return b, err
}

func soakMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// workerStates is how the gateway lists its workers, for a failure.
func workerStates(ctx context.Context, g *gateway) string {
	_, body, err := g.do(ctx, "GET", "/api/v1/workers", nil)
	if err != nil {
		return err.Error()
	}
	var list struct {
		Workers []map[string]any `json:"workers"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return tail(string(body), 300)
	}
	var out []string
	for _, w := range list.Workers {
		out = append(out, fmt.Sprintf("%v: status %v, connected_at %v, last_seen_seconds_ago %v, active_tasks %v",
			w["worker_name"], w["status"], w["connected_at"], w["last_seen_seconds_ago"], w["active_tasks"]))
	}
	return strings.Join(out, "; ")
}
