package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// hungEngine puts a worker in front of an engine that takes requests and
// never answers, beside a worker on the simulator, under load. Every
// request must succeed (those sent to the hung engine move to the other
// worker); the hung worker must report its engine stalled within twice
// its time-to-first-byte limit of the engine's first request, after which
// no request but the worker's probes reaches the engine; and once the
// engine answers, a probe must put it back in service.
func hungEngine(ctx context.Context, h *rig, r *result) error {
	ttfb := scaled(h, 2*time.Second, 5*time.Second)
	eng, err := startStuckEngine()
	if err != nil {
		return err
	}
	defer eng.close()
	g, err := h.startGateway(ctx, "hung-gw")
	if err != nil {
		return err
	}
	defer func() { _ = g.Stop(syscall.SIGTERM, stopGrace) }()
	hung, err := h.startWorker(ctx, g, "hung", g.URL, "--engine", "openai="+eng.url, "--engine-ttfb", ttfb.String(), "--max-concurrent", "4")
	if err != nil {
		return err
	}
	defer func() { _ = hung.Kill() }()
	// As many slots as the hung worker: the least loaded worker by share
	// of slots wins, so the hung one gets requests as soon as the other
	// is busy.
	sim, err := h.startWorker(ctx, g, "sim", g.URL, "--engine", "sim=ttft=0", "--max-concurrent", "4")
	if err != nil {
		return err
	}
	defer func() { _ = sim.Kill() }()

	// The load runs until the engine has stalled and a while after, to
	// see that nothing more reaches it.
	limit := 2*ttfb + 30*time.Second
	stop := make(chan struct{})
	var loadDone sync.WaitGroup
	var outcomes []loadOutcome
	loadDone.Go(func() {
		outcomes = runLoad(ctx, g, scaled(h, 12, 16), "hung engine check\nsim: tokens=10 tps=100", limit, stop)
	})
	var stalledAt time.Time
	var unhealthyAt time.Time
	err = g.poll(ctx, 2*ttfb+15*time.Second, func() (bool, string) {
		if st, _, err := g.workerState(ctx, "hung"); err == nil && st == "unhealthy" && unhealthyAt.IsZero() {
			unhealthyAt = time.Now()
		}
		evs, err := g.workerEvents(ctx, "engine_stalled")
		if err != nil || len(evs) == 0 {
			return false, fmt.Sprintf("no engine_stalled event (%v)", err)
		}
		stalledAt = evs[0].CreatedAt
		if !slices.Contains(evs[0].Metadata.Models, "sim-chat") || evs[0].Name != "hung" {
			r.fail("engine_stalled event names %s, models %v; want hung, sim-chat", evs[0].Name, evs[0].Metadata.Models)
		}
		return true, ""
	})
	if err != nil {
		r.fail("the hung worker never reported its engine stalled: %v", err)
	}
	time.Sleep(scaled(h, 2*time.Second, 10*time.Second))
	close(stop)
	loadDone.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	first, after, probes := eng.arrivals(stalledAt)
	if first.IsZero() {
		r.fail("no request reached the hung engine: the check tested nothing")
	} else if !stalledAt.IsZero() {
		detect := stalledAt.Sub(first)
		r.figure("time to detect a hung engine", "%d ms from its first request to engine_stalled (limit %v; bound 2 x limit)", detect.Milliseconds(), ttfb)
		if detect > 2*ttfb+2*time.Second {
			r.fail("the engine stalled %v after its first request, beyond twice the limit (%v)", detect, ttfb)
		}
		if !unhealthyAt.IsZero() {
			r.figure("time to stop routing to it", "%d ms from its first request to the worker listed unhealthy", unhealthyAt.Sub(first).Milliseconds())
		}
	}
	if after > 0 {
		r.fail("%d requests reached the hung engine after it was reported stalled", after)
	}
	moved := judgeLoad(ctx, r, g, outcomes)
	var movedTimes []time.Duration
	for _, m := range moved {
		movedTimes = append(movedTimes, m.ended.Sub(m.sent))
		if d := m.ended.Sub(m.sent); d > 2*ttfb+5*time.Second {
			r.fail("request %s moved off the hung engine took %v, beyond twice the limit (%v)", m.id, d, ttfb)
		}
	}
	r.figure("requests", "%d (%d moved off the hung engine: %s); %d probes of the engine in all", len(outcomes), len(moved), durStats(movedTimes), probes)

	// The engine answers again: a probe must find it.
	answered := time.Now()
	eng.answer.Store(true)
	err = g.poll(ctx, probeWait(ttfb), func() (bool, string) {
		evs, err := g.workerEvents(ctx, "engine_recovered")
		return err == nil && len(evs) > 0, fmt.Sprintf("no engine_recovered event %v after the engine answered (%v)", probeWait(ttfb), err)
	})
	if err != nil {
		r.fail("%v", err)
	} else {
		r.figure("time to take the engine back", "%d ms from answering to engine_recovered", time.Since(answered).Milliseconds())
	}
	if !h.short {
		// The gateway held the worker back for its failures (30 s): then
		// it serves again.
		if err := g.waitWorker(ctx, "hung", hung, 40*time.Second); err != nil {
			r.fail("the hung worker is not healthy after its engine answered: %v", err)
		} else if o := sendChat(ctx, g, "after recovery", false, 30*time.Second, "X-Svc-Worker-Id", g.workerID(ctx, "hung")); !o.ok {
			r.fail("a request pinned to the recovered worker: %s", o.detail)
		}
	}
	for _, p := range []*harness.Proc{hung, sim} {
		if sign := crashed(p); sign != "" {
			r.fail("%s crashed: %s", p.Name(), sign)
		}
	}
	if sign := crashed(g); sign != "" {
		r.fail("gateway crashed: %s", sign)
	}
	return nil
}

// probeWait bounds how long a stalled engine that answers again takes to
// be found answering: the probe then under way may have been sent before
// (it times out after the limit), then the pause between probes.
func probeWait(ttfb time.Duration) time.Duration { return ttfb + 5*time.Second + 5*time.Second }

// frozenWorker stops one of two workers with SIGSTOP under load (its link
// stays open, its heartbeats stop) and continues it later. Once the
// gateway lists it stale no request may go to it; requests on it that had
// no output must move to the other worker within a bound of the freeze;
// requests with output finish on it once it continues; every request
// succeeds.
func frozenWorker(ctx context.Context, h *rig, r *result) error {
	g, err := h.startGateway(ctx, "frozen-gw")
	if err != nil {
		return err
	}
	defer func() { _ = g.Stop(syscall.SIGTERM, stopGrace) }()
	frozen, err := h.startWorker(ctx, g, "frozen", g.URL, "--engine", "sim=ttft=0", "--max-concurrent", "16")
	if err != nil {
		return err
	}
	defer func() {
		_ = frozen.Signal(syscall.SIGCONT)
		_ = frozen.Kill()
	}()
	steady, err := h.startWorker(ctx, g, "steady", g.URL, "--engine", "sim=ttft=0", "--max-concurrent", "32")
	if err != nil {
		return err
	}
	defer func() { _ = steady.Kill() }()

	// Heartbeats every 5 s are late after 10 s, noticed within a sweep
	// (1 s); a moved request then takes about a second on the other
	// worker.
	const moveBound = 15 * time.Second
	// Each round freezes the worker for a while after the gateway stops
	// routing to it; the long freeze outlasts the link's 15 s dead-peer
	// timer, so the link drops and resumes too.
	holds := scaled(h, []time.Duration{3 * time.Second}, []time.Duration{3 * time.Second, 15 * time.Second, 3 * time.Second})
	var detects, movedTimes []time.Duration
	var total, moved, resumed int
	var running []int // requests running on the worker as it froze
	served := map[string]int{}
	for round, hold := range holds {
		stop := make(chan struct{})
		var loadDone sync.WaitGroup
		var outcomes []loadOutcome
		loadDone.Go(func() {
			outcomes = runLoad(ctx, g, scaled(h, 8, 16), "frozen worker check\nsim: tokens=40 tps=40", 90*time.Second, stop)
		})
		// Frozen at a random point between two heartbeats in a full run,
		// so that the times measured span the range.
		time.Sleep(2*time.Second + scaled(h, 0, rand.N(5*time.Second)))
		_, active, _ := g.workerState(ctx, "frozen")
		running = append(running, active)
		freeze := time.Now()
		if err := frozen.Signal(syscall.SIGSTOP); err != nil {
			close(stop)
			loadDone.Wait()
			return err
		}
		var detect time.Time
		err := g.poll(ctx, 20*time.Second, func() (bool, string) {
			st, _, err := g.workerState(ctx, "frozen")
			return err == nil && st == "stale", fmt.Sprintf("the frozen worker is %q (%v), want stale", st, err)
		})
		if err != nil {
			r.fail("round %d: %v", round+1, err)
		} else {
			detect = time.Now()
			detects = append(detects, detect.Sub(freeze))
		}
		time.Sleep(hold)
		thaw := time.Now()
		_ = frozen.Signal(syscall.SIGCONT)
		time.Sleep(time.Second)
		close(stop)
		loadDone.Wait()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := g.waitWorker(ctx, "frozen", frozen, 30*time.Second); err != nil {
			r.fail("round %d: the worker is not healthy after it continued: %v", round+1, err)
		}
		rows := judgeLoad(ctx, r, g, outcomes)
		moved += len(rows)
		total += len(outcomes)
		byID := map[string]bool{}
		for _, m := range rows {
			byID[m.id] = true
			d := m.ended.Sub(freeze)
			movedTimes = append(movedTimes, d)
			if d > moveBound {
				r.fail("round %d: request %s moved off the frozen worker ended %v after the freeze, beyond %v", round+1, m.id, d, moveBound)
			}
		}
		for _, o := range outcomes {
			served[o.worker]++
			switch {
			case !o.ok || byID[o.id]:
			case o.worker == "frozen" && o.sent.Before(freeze) && o.ended.After(thaw):
				resumed++
			case !detect.IsZero() && o.sent.After(detect) && o.sent.Before(thaw) && (o.worker != "steady" || o.attempts != 1):
				r.fail("round %d: request %s sent %v after the frozen worker was listed stale went to %s (%d attempts)",
					round+1, o.id, o.sent.Sub(detect).Round(time.Millisecond), o.worker, o.attempts)
			}
		}
	}
	r.figure("time to stop routing to a frozen worker", "%s from SIGSTOP to the worker listed stale (heartbeat 5 s, stale after 10 s)", durStats(detects))
	r.figure("requests", "%d in %d rounds (%d served by the frozen worker, %d by the other); %v running on it at each SIGSTOP",
		total, len(holds), served["frozen"], served["steady"], running)
	r.figure("moved", "%d moved off the frozen worker, ended %s after the freeze (bound %v); %d with output finished on it after SIGCONT",
		moved, durStats(movedTimes), moveBound, resumed)
	for _, p := range []*harness.Proc{frozen, steady} {
		if sign := crashed(p); sign != "" {
			r.fail("%s crashed: %s", p.Name(), sign)
		}
	}
	if sign := crashed(g); sign != "" {
		r.fail("gateway crashed: %s", sign)
	}
	return nil
}

// loadOutcome is one request of a load: when it was sent and ended, how,
// and from its usage row where it ran.
type loadOutcome struct {
	id          string
	stream      bool
	sent, ended time.Time
	ok          bool   // 200, and a whole answer
	detail      string // why not
	worker      string
	attempts    int
}

// runLoad sends chats of prompt from clients, streamed and not in turn,
// each within limit, until stop closes, and returns how each went.
func runLoad(ctx context.Context, g *gateway, clients int, prompt string, limit time.Duration, stop <-chan struct{}) []loadOutcome {
	var mu sync.Mutex
	var out []loadOutcome
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for n := i; ; n++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				// Each its own conversation: one prompt for all would go to
				// one worker by affinity.
				o := sendChat(ctx, g, fmt.Sprintf("request %d.%d\n%s", i, n, prompt), n%2 == 0, limit)
				mu.Lock()
				out = append(out, o)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// sendChat sends one chat completion and reads its answer whole.
func sendChat(ctx context.Context, g *gateway, prompt string, stream bool, limit time.Duration, hdr ...string) loadOutcome {
	o := loadOutcome{stream: stream, sent: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", g.URL+"/v1/chat/completions", bytes.NewReader(chatBody("sim-chat", prompt, stream)))
	if err != nil {
		o.detail = err.Error()
		return o
	}
	req.Header.Set("Authorization", "Bearer "+g.Key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		o.ended, o.detail = time.Now(), err.Error()
		return o
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	o.ended, o.id = time.Now(), resp.Header.Get("X-Request-Id")
	switch {
	case err != nil:
		o.detail = "read: " + err.Error()
	case resp.StatusCode != http.StatusOK:
		o.detail = fmt.Sprintf("status %d: %s", resp.StatusCode, tail(string(body), 300))
	case stream:
		if content, done, frame := streamContent(body); !done || frame != "" || content == "" {
			o.detail = "stream incomplete: " + tail(string(body), 300)
		}
	default:
		var c struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if json.Unmarshal(body, &c) != nil || len(c.Choices) == 0 || c.Choices[0].Message.Content == "" {
			o.detail = "answer without content: " + tail(string(body), 300)
		}
	}
	o.ok = o.detail == ""
	return o
}

// judgeLoad fails every request that did not succeed or has no usage row
// of 200, fills in where each ran, and returns those that moved to
// another worker.
func judgeLoad(ctx context.Context, r *result, g *gateway, outcomes []loadOutcome) []loadOutcome {
	rows, err := usageLog(ctx, g)
	if err != nil {
		r.fail("usage log: %v", err)
		return nil
	}
	byID := map[string]usageRow{}
	for _, row := range rows {
		byID[row.ID] = row
	}
	var moved []loadOutcome
	for i := range outcomes {
		o := &outcomes[i]
		if !o.ok {
			r.fail("request %s (stream %v) failed: %s", o.id, o.stream, o.detail)
			continue
		}
		row, found := byID[o.id]
		if !found || row.StatusCode != http.StatusOK {
			r.fail("request %s answered 200 has usage row %+v (found %v)", o.id, row, found)
			continue
		}
		o.worker, o.attempts = row.WorkerName, row.Attempts
		if row.Attempts > 1 {
			moved = append(moved, *o)
		}
	}
	return moved
}

// workerEvent is the part of a worker event the checks read.
type workerEvent struct {
	Name      string    `json:"worker_name"`
	CreatedAt time.Time `json:"created_at"`
	Metadata  struct {
		Models []string `json:"models"`
	} `json:"metadata"`
}

// workerEvents lists the events of a type, newest first.
func (g *gateway) workerEvents(ctx context.Context, typ string) ([]workerEvent, error) {
	st, body, err := g.do(ctx, "GET", "/api/v1/workers/events?event_type="+typ, nil)
	if err != nil {
		return nil, err
	}
	var evs []workerEvent
	if st != http.StatusOK || json.Unmarshal(body, &evs) != nil {
		return nil, fmt.Errorf("worker events: status %d %s", st, tail(string(body), 200))
	}
	return evs, nil
}

// workerID is the id of the worker called name, "" if none.
func (g *gateway) workerID(ctx context.Context, name string) string {
	_, body, err := g.do(ctx, "GET", "/api/v1/workers", nil)
	if err != nil {
		return ""
	}
	var list struct {
		Workers []struct {
			ID   string `json:"worker_id"`
			Name string `json:"worker_name"`
		} `json:"workers"`
	}
	_ = json.Unmarshal(body, &list)
	for _, w := range list.Workers {
		if w.Name == name {
			return w.ID
		}
	}
	return ""
}

// stuckEngine is an OpenAI-compatible server that lists sim-chat and
// takes every other request without ever answering it, until answer is
// set. It tells the worker's probes (one token of "ping") from requests.
type stuckEngine struct {
	url    string
	srv    *http.Server
	served chan struct{} // closed when the server has stopped
	answer atomic.Bool

	mu       sync.Mutex
	requests []time.Time // when each request that is not a probe came
	probes   int
}

func startStuckEngine() (*stuckEngine, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &stuckEngine{url: "http://" + ln.Addr().String(), served: make(chan struct{})}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(e.served)
		_ = e.srv.Serve(ln)
	}()
	return e, nil
}

// close stops the server; the requests it holds end with their
// connections.
func (e *stuckEngine) close() {
	_ = e.srv.Close()
	<-e.served
}

// arrivals reports when the first request came, how many came after t,
// and how many probes came.
func (e *stuckEngine) arrivals(t time.Time) (first time.Time, after, probes int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, at := range e.requests {
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if !t.IsZero() && at.After(t) {
			after++
		}
	}
	return first, after, e.probes
}

func (e *stuckEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"sim-chat","object":"model","owned_by":"stuck"}]}`)
		return
	}
	if r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	probe := bytes.Contains(body, []byte(`"content":"ping"`)) && bytes.Contains(body, []byte(`"max_tokens":1`))
	e.mu.Lock()
	if probe {
		e.probes++
	} else {
		e.requests = append(e.requests, time.Now())
	}
	e.mu.Unlock()
	if !e.answer.Load() {
		<-r.Context().Done()
		return
	}
	var req struct {
		Stream bool `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	if req.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"sim-chat","choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":null}]}`+"\n\n"+
			`data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"sim-chat","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`+"\n\n"+
			"data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":0,"model":"sim-chat","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
}
