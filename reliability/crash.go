package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// writerInterval is the usage writer's group-commit interval
// (internal/bolt.WriterOptions.Every, 100 ms unless configured): a row
// waits at most this long before its commit starts.
const writerInterval = 100 * time.Millisecond

// crashGateway kills the gateway with SIGKILL at random moments under a
// steady mix of streaming and non-streaming chat completions and
// embeddings, restarting it on the same data directory each time. It
// judges that the gateway always starts again, that the worker comes back
// by itself, and that the usage log holds every request a client saw
// succeed, but those that completed within one group-commit window of a
// kill, once and only once, with totals that are the sum of its rows.
func crashGateway(ctx context.Context, h *rig, r *result) error {
	g, err := h.startGateway(ctx, "crash")
	if err != nil {
		return err
	}
	defer func() { _ = g.Stop(syscall.SIGTERM, stopGrace) }()
	const workerName = "crash-worker"
	w, err := h.startWorker(ctx, g, workerName, g.URL, "--engine", "sim=ttft=0", "--max-concurrent", "8")
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop(syscall.SIGTERM, stopGrace) }()

	kills := scaled(h, 3, 20)
	// The pause before each kill: short runs a few seconds of load per
	// gateway, full ones about 18 s, so 20 kills take some 5 minutes.
	pauseMin, pauseMax := scaled(h, 2*time.Second, 10*time.Second), scaled(h, 4*time.Second, 26*time.Second)
	clients := scaled(h, 4, 6)

	ld := &crashLoad{g: g}
	loadStart := time.Now()
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ld.client(loadCtx, i)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		ld.probeCommits(loadCtx)
	}()

	var killLog []crashKill
	var restarts []time.Duration
	var reconnects []time.Duration
	var runErr error
	for k := 0; k < kills && runErr == nil; k++ {
		pause := pauseMin + rand.N(pauseMax-pauseMin+1)
		if k%4 == 2 {
			// Now and then a kill soon after the restart, while the worker
			// has just reconnected and the first requests are arriving.
			pause = rand.N(time.Second)
		}
		select {
		case <-ctx.Done():
			runErr = ctx.Err()
			continue
		case <-time.After(pause):
		}
		if sign := crashed(g); sign != "" {
			r.fail("gateway crashed before kill %d: %s", k+1, sign)
		}
		sent := time.Now()
		g.Kill()
		killLog = append(killLog, crashKill{sent: sent, reaped: time.Now()})
		start := time.Now()
		if err := g.Restart(ctx); err != nil {
			// A gateway that does not come back after a crash is the worst
			// outcome there is: no further kill says anything.
			r.fail("gateway did not start after kill %d: %v", k+1, err)
			runErr = fmt.Errorf("restart after kill %d: %w", k+1, err)
			continue
		}
		restarts = append(restarts, time.Since(start))
		up := time.Now()
		if err := g.waitWorker(ctx, workerName, w, 60*time.Second); err != nil {
			r.fail("worker did not reconnect after kill %d: %v", k+1, err)
			runErr = fmt.Errorf("reconnect after kill %d: %w", k+1, err)
			continue
		}
		reconnects = append(reconnects, time.Since(up))
	}
	if runErr == nil {
		// Some load on the last gateway before it stops.
		select {
		case <-ctx.Done():
		case <-time.After(pauseMin):
		}
	}
	stopLoad()
	wg.Wait()
	if runErr != nil {
		return runErr
	}

	// A graceful stop commits everything pending, so whatever is missing
	// after it was lost to a kill.
	if err := g.Stop(syscall.SIGTERM, stopGrace); err != nil {
		r.fail("graceful stop: %v", err)
	}
	if err := g.Restart(ctx); err != nil {
		r.fail("gateway did not start after the graceful stop: %v", err)
		return err
	}
	if sign := crashed(g); sign != "" {
		r.fail("gateway crashed: %s", sign)
	}
	if sign := crashed(w); sign != "" {
		r.fail("worker crashed: %s", sign)
	}

	rows, err := usageLog(ctx, g)
	if err != nil {
		return err
	}
	window := writerInterval + ld.maxCommit()
	crashJudgeLog(r, ld, rows, loadStart, killLog, window)
	if err := crashJudgeSummary(ctx, r, g, rows); err != nil {
		return err
	}

	sent, ok := ld.sent.Load(), len(ld.succeeded())
	r.figure("requests sent", "%d", sent)
	r.figure("requests succeeded", "%d (%d streamed, %d non-streaming chat, %d embeddings)", ok,
		ld.okKind[kindStream].Load(), ld.okKind[kindChat].Load(), ld.okKind[kindEmbed].Load())
	r.figure("kills", "%d", len(killLog))
	r.figure("restarts", "%d (and one after a graceful stop)", len(restarts))
	r.figure("restart time", "%s (until /healthz answers, polled every 50 ms)", durStats(restarts))
	r.figure("worker reconnect time", "%s", durStats(reconnects))
	r.figure("commit time (usage read)", "%s", durStats(ld.commitTimes()))
	r.figure("loss window", "%d ms (writer interval %d ms + longest commit %d ms)",
		window.Milliseconds(), writerInterval.Milliseconds(), ld.maxCommit().Milliseconds())
	r.figure("usage rows", "%d", len(rows))
	return nil
}

// crashKill is one SIGKILL: when it was sent and when the process was
// seen gone.
type crashKill struct {
	sent, reaped time.Time
}

// Request kinds of the crash load.
const (
	kindStream = iota
	kindChat
	kindEmbed
	numKinds
)

// crashLoad is the load of the crash check and what it saw succeed.
type crashLoad struct {
	g      *gateway
	sent   atomic.Int64
	okKind [numKinds]atomic.Int64

	mu      sync.Mutex
	ok      map[string]crashOK
	fails   []loadFailure
	commits []time.Duration
}

// crashOK is a request the client saw succeed: when it was sent and when
// it had the whole reply, and the token counts the reply reported.
type crashOK struct {
	start, done time.Time
	usage       usageCounts
}

// loadFailure is a request of the load that did not succeed: when, and
// how it ended.
type loadFailure struct {
	start, done time.Time
	kind        int
	err         *loadError
}

// loadError is how a request of the load failed.
type loadError struct {
	// Status is the HTTP status, 0 when no response came (a refused or
	// cut connection, or the client's timeout).
	Status int
	// Code is the X-Svc-Error-Code of an error response.
	Code string
	// Frame is the status in the error frame a stream ended with, 0 when
	// it ended without one.
	Frame int
	// Cut: the connection ended before the response did.
	Cut bool
	// Timeout: the client gave up waiting.
	Timeout bool
	// ID is the response's X-Request-Id, "" when none came.
	ID  string
	Msg string
}

func (e *loadError) Error() string { return e.Msg }

// usageCounts are a reply's usage object.
type usageCounts struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// client sends requests one after another until ctx ends. While the
// gateway is down its requests fail at once, so it pauses a little after
// each failure rather than spin.
func (l *crashLoad) client(ctx context.Context, n int) {
	for i := 0; ctx.Err() == nil; i++ {
		kind := kindStream
		switch x := (n*7919 + i) % 10; {
		case x == 0:
			kind = kindEmbed
		case x%2 == 1:
			kind = kindChat
		}
		l.sent.Add(1)
		start := time.Now()
		id, u, err := l.request(ctx, kind, fmt.Sprintf("client %d request %d", n, i))
		if err != nil {
			if ctx.Err() == nil {
				l.mu.Lock()
				l.fails = append(l.fails, loadFailure{start: start, done: time.Now(), kind: kind, err: err})
				l.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		done := time.Now()
		l.okKind[kind].Add(1)
		l.mu.Lock()
		if l.ok == nil {
			l.ok = map[string]crashOK{}
		}
		l.ok[id] = crashOK{start: start, done: done, usage: u}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// request sends one request and returns its id and reported usage when
// the client saw it succeed: a 200 with the whole body, and for a stream
// its [DONE] with no error frame before it.
func (l *crashLoad) request(ctx context.Context, kind int, prompt string) (string, usageCounts, *loadError) {
	var u usageCounts
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	path := "/v1/chat/completions"
	var body []byte
	switch kind {
	case kindStream:
		body = chatBody("sim-chat", prompt+"\nsim: tokens=40 tps=400", true)
	case kindChat:
		body = chatBody("sim-chat", prompt+"\nsim: tokens=40 tps=400", false)
	default:
		path = "/v1/embeddings"
		body, _ = json.Marshal(map[string]any{"model": "sim-embed", "input": prompt})
	}
	req, err := http.NewRequestWithContext(ctx, "POST", l.g.URL+path, bytes.NewReader(body))
	if err != nil {
		return "", u, &loadError{Msg: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+l.g.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", u, &loadError{Cut: ctx.Err() == nil, Timeout: ctx.Err() != nil, Msg: err.Error()}
	}
	defer resp.Body.Close()
	b, readErr := io.ReadAll(resp.Body)
	id := resp.Header.Get("X-Request-Id")
	fail := &loadError{Status: resp.StatusCode, Code: resp.Header.Get("X-Svc-Error-Code"), ID: id}
	var reply struct {
		Usage *usageCounts `json:"usage"`
	}
	switch {
	case resp.StatusCode != http.StatusOK:
		fail.Msg = fmt.Sprintf("status %d: %s", resp.StatusCode, tail(string(b), 200))
		return "", u, fail
	case id == "":
		fail.Msg = "no X-Request-Id"
		return "", u, fail
	case kind == kindStream:
		// The stream is the client's once [DONE] is in: a kill that cuts
		// the chunked encoding's last bytes takes nothing it was owed.
		data := sseData(b)
		_, done, errFrame := streamContent(b)
		if !done || errFrame != "" || data[len(data)-1] != "[DONE]" {
			fail.Msg = "stream did not finish: " + tail(string(b), 200)
			fail.Cut = readErr != nil
			fail.Timeout = ctx.Err() != nil
			if errFrame != "" {
				var f struct {
					Error struct {
						Status int `json:"status"`
					} `json:"error"`
				}
				_ = json.Unmarshal([]byte(errFrame), &f)
				fail.Frame = f.Error.Status
			}
			return "", u, fail
		}
		for _, d := range data {
			if json.Unmarshal([]byte(d), &reply) == nil && reply.Usage != nil {
				break
			}
		}
	case readErr != nil:
		fail.Cut, fail.Timeout, fail.Msg = ctx.Err() == nil, ctx.Err() != nil, readErr.Error()
		return "", u, fail
	case json.Unmarshal(b, &reply) != nil:
		fail.Msg = "body is not JSON"
		return "", u, fail
	}
	if reply.Usage == nil {
		fail.Msg = fmt.Sprintf("reply %s reports no usage", id)
		return "", u, fail
	}
	return id, *reply.Usage, nil
}

// probeCommits reads the usage summary now and then. A usage read first
// waits for the rows queued before it to be committed, and asks for that
// commit at once, so its time is an upper bound on one commit's.
func (l *crashLoad) probeCommits(ctx context.Context) {
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, _, err := l.g.do(rctx, "GET", "/api/v1/usage/summary?days=1", nil)
		cancel()
		if err == nil && st == http.StatusOK {
			l.mu.Lock()
			l.commits = append(l.commits, time.Since(start))
			l.mu.Unlock()
		}
	}
}

func (l *crashLoad) commitTimes() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.commits)
}

func (l *crashLoad) maxCommit() time.Duration {
	c := l.commitTimes()
	if len(c) == 0 {
		return 0
	}
	return slices.Max(c)
}

func (l *crashLoad) failures() []loadFailure {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.fails)
}

func (l *crashLoad) succeeded() map[string]crashOK {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]crashOK, len(l.ok))
	for k, v := range l.ok {
		out[k] = v
	}
	return out
}

// readLag bounds how long after its gateway died a client may still be
// reading a reply that gateway had already written: the bytes wait in
// the socket buffer. A request completed later than this after a kill was
// served by the next gateway.
const readLag = 250 * time.Millisecond

// rowsByID indexes the usage log by request id, failing r for each id
// that has more than one row; dups counts those.
func rowsByID(r *result, rows []usageRow) (byID map[string]usageRow, dups int) {
	seen := make(map[string]int, len(rows))
	byID = make(map[string]usageRow, len(rows))
	for _, row := range rows {
		seen[row.ID]++
		byID[row.ID] = row
	}
	for id, n := range seen {
		if n > 1 {
			dups++
			r.fail("usage row %s appears %d times", id, n)
		}
	}
	return byID, dups
}

// crashJudgeLog checks the usage log against what the clients saw
// succeed: each such request has exactly one row, unless it completed
// within window of a kill.
func crashJudgeLog(r *result, ld *crashLoad, rows []usageRow, loadStart time.Time, kills []crashKill, window time.Duration) {
	byID, dups := rowsByID(r, rows)
	lostPer := make([]int, len(kills))
	atRisk := make([]int, len(kills))
	ok := ld.succeeded()
	// The kill a completion time falls next to, if any.
	near := func(t time.Time) int {
		for i, k := range kills {
			if !t.Before(k.sent.Add(-window)) && !t.After(k.reaped.Add(readLag)) {
				return i
			}
		}
		return -1
	}
	mismatched := 0
	var earliest time.Duration // the longest a lost row's request completed before its kill
	for id, o := range ok {
		t := o.done
		k := near(t)
		if k >= 0 {
			atRisk[k]++
		}
		if row, found := byID[id]; found {
			// The row bills what the client was told it used.
			got := usageCounts{row.PromptTokens, row.CompletionTokens, row.TotalTokens}
			if row.StatusCode != http.StatusOK || got != o.usage {
				mismatched++
				r.fail("request %s succeeded with usage %+v but its row has status %d and %+v", id, o.usage, row.StatusCode, got)
			}
			continue
		}
		if k >= 0 {
			lostPer[k]++
			earliest = max(earliest, kills[k].sent.Sub(t))
			continue
		}
		// How far it was from the kill after it, to say how far outside
		// the window the loss is.
		after := "no kill after it"
		for _, kl := range kills {
			if kl.sent.After(t) {
				after = fmt.Sprintf("%d ms before kill at %s", kl.sent.Sub(t).Milliseconds(), kl.sent.Format("15:04:05.000"))
				break
			}
		}
		r.fail("request %s succeeded at %s but has no usage row (%s; window %d ms)",
			id, t.Format("15:04:05.000"), after, window.Milliseconds())
	}
	total, most := 0, 0
	for _, n := range lostPer {
		total += n
		most = max(most, n)
	}
	risk := 0
	for _, n := range atRisk {
		risk += n
	}
	// Each gateway that ran a while served: a worker that came back with
	// its slots still held by requests of the gateway before would serve
	// nothing. The last run ends with the load, the others at a kill.
	served := make([]int, len(kills)+1)
	for _, o := range ok {
		e := 0
		for e < len(kills) && o.done.After(kills[e].reaped.Add(readLag)) {
			e++
		}
		served[e]++
	}
	for e := range len(kills) {
		from := loadStart
		if e > 0 {
			from = kills[e-1].reaped
		}
		if served[e] == 0 && kills[e].sent.Sub(from) >= 2*time.Second {
			r.fail("gateway run %d ran %v and saw no request succeed", e+1, kills[e].sent.Sub(from).Round(time.Millisecond))
		}
	}
	if served[len(kills)] == 0 {
		r.fail("the last gateway run saw no request succeed")
	}
	r.figure("requests succeeded per gateway run", "%v", served)
	r.figure("rows lost to kills", "%d in total, at most %d per kill (of %d requests completed within the window of a kill)", total, most, risk)
	r.figure("rows lost per kill", "%v", lostPer)
	r.figure("earliest lost completion", "%d ms before its kill", earliest.Milliseconds())
	r.figure("duplicate rows", "%d", dups)
	r.figure("rows unlike their reply", "%d", mismatched)
}

// crashJudgeSummary checks that the totals the summary reports are the
// sums over the rows: a row and its aggregates are committed together,
// so no kill may leave one without the other.
func crashJudgeSummary(ctx context.Context, r *result, g *gateway, rows []usageRow) error {
	st, body, err := g.do(ctx, "GET", "/api/v1/usage/summary?days=2", nil)
	if err != nil {
		return fmt.Errorf("usage summary: %w", err)
	}
	if st != http.StatusOK {
		return fmt.Errorf("usage summary: status %d: %s", st, body)
	}
	var sum usageTotals
	if err := json.Unmarshal(body, &sum); err != nil {
		return fmt.Errorf("usage summary: %w", err)
	}
	var want usageTotals
	for _, row := range rows {
		want.Requests++
		switch {
		case row.StatusCode < 400:
			want.Succeeded++
		case row.StatusCode == 499:
			want.Cancelled++
		default:
			want.Failed++
		}
		want.PromptTokens += row.PromptTokens
		want.CompletionTokens += row.CompletionTokens
		want.TotalTokens += row.TotalTokens
	}
	if sum != want {
		r.fail("usage summary %+v is not the sum over the rows %+v", sum, want)
	}
	r.figure("summary", "%d requests (%d succeeded, %d failed, %d cancelled), %d tokens: equal to the rows' sum: %v",
		sum.Requests, sum.Succeeded, sum.Failed, sum.Cancelled, sum.TotalTokens, sum == want)
	return nil
}

// usageTotals are the fields of GET /api/v1/usage/summary that a sum
// over usage rows can reproduce.
type usageTotals struct {
	Requests         int64 `json:"requests"`
	Succeeded        int64 `json:"succeeded"`
	Failed           int64 `json:"failed"`
	Cancelled        int64 `json:"cancelled"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// durStats is the mean and the largest of ds, in ms.
func durStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	var total time.Duration
	for _, d := range ds {
		total += d
	}
	return fmt.Sprintf("mean %d ms, max %d ms (n=%d)", (total / time.Duration(len(ds))).Milliseconds(), slices.Max(ds).Milliseconds(), len(ds))
}

// workerLostWait bounds how long a stream may take to end after its worker
// was killed: the gateway's grace plus a generous margin for a loaded
// machine.
const workerLostWait = 30 * time.Second

// crashWorker kills the worker with SIGKILL while it serves long streams
// and non-streaming requests, several rounds. Every request must end as
// the spec says, within a bound: a stream with an error frame naming the
// worker (code worker_lost, retry_after) and then [DONE], a non-streaming
// request with a 503 or 502 and a JSON detail; each gets a usage row with
// that status; and the worker, started again, reconnects and serves.
func crashWorker(ctx context.Context, h *rig, r *result) error {
	const grace = time.Second
	g, err := h.startGateway(ctx, "worker-kill", "--worker-grace", grace.String())
	if err != nil {
		return err
	}
	defer func() { _ = g.Stop(syscall.SIGTERM, stopGrace) }()
	const workerName = "kill-me"
	workerArgs := []string{"--engine", "sim=ttft=0", "--max-concurrent", "8"}
	w, err := h.startWorker(ctx, g, workerName, g.URL, workerArgs...)
	if err != nil {
		return err
	}
	defer func() { w.Kill() }()

	rounds := scaled(h, 3, 20)
	streams, unaries := scaled(h, 4, 6), 2
	var cut, framesOK, rowsOK, unaryOK int
	var reconnects, ends []time.Duration
	for round := 1; round <= rounds; round++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		outcomes, err := killRound(ctx, r, g, w, workerName, round, streams, unaries)
		if err != nil {
			return err
		}
		rows, err := usageLog(ctx, g)
		if err != nil {
			return err
		}
		byID := map[string]usageRow{}
		for _, row := range rows {
			byID[row.ID] = row
		}
		for _, o := range outcomes {
			ends = append(ends, o.after)
			if o.stream {
				cut++
			}
			if o.ok {
				if o.stream {
					framesOK++
				} else {
					unaryOK++
				}
			}
			if o.id == "" {
				continue
			}
			row, found := byID[o.id]
			switch {
			case !found:
				r.fail("round %d: request %s has no usage row", round, o.id)
			case row.StatusCode != o.status:
				r.fail("round %d: request %s answered %d has a usage row with status %d", round, o.id, o.status, row.StatusCode)
			case row.ErrorMessage == nil || *row.ErrorMessage == "":
				r.fail("round %d: request %s failed but its usage row has no error message", round, o.id)
			case row.WorkerName != workerName:
				r.fail("round %d: request %s has a usage row naming worker %q", round, o.id, row.WorkerName)
			default:
				rowsOK++
			}
		}
		if err := idleGateway(ctx, g); err != nil {
			r.fail("round %d: %v", round, err)
		}

		start := time.Now()
		w, err = harness.StartWorker(h.workerSpec(workerName, g.URL, g.TokenFile(), workerArgs...))
		if err == nil {
			err = g.waitWorker(ctx, workerName, w, 60*time.Second)
		}
		if err != nil {
			r.fail("round %d: the worker did not reconnect after its restart: %v", round, err)
			return err
		}
		reconnects = append(reconnects, time.Since(start))
		servesAgain(ctx, r, g, round)
	}
	if sign := crashed(g); sign != "" {
		r.fail("gateway crashed: %s", sign)
	}
	if sign := crashed(w); sign != "" {
		r.fail("worker crashed: %s", sign)
	}
	r.figure("rounds", "%d (%d streams and %d non-streaming requests each)", rounds, streams, unaries)
	r.figure("streams cut", "%d", cut)
	r.figure("error frames correct", "%d of %d", framesOK, cut)
	r.figure("non-streaming failures correct", "%d of %d", unaryOK, rounds*unaries)
	r.figure("usage rows correct", "%d of %d", rowsOK, rounds*(streams+unaries))
	r.figure("end after the kill", "%s (worker grace %v)", durStats(ends), grace)
	r.figure("worker reconnect time", "%s", durStats(reconnects))
	return nil
}

// killOutcome is how one request of a worker-kill round ended.
type killOutcome struct {
	id     string
	stream bool
	status int           // the status it was answered with: a stream's frame's
	ok     bool          // ended as the spec says
	after  time.Duration // from the kill to the end of the reply
}

// killRound starts the requests, waits until the worker runs them all,
// kills it and judges how each ends.
func killRound(ctx context.Context, r *result, g *gateway, w *harness.Proc, workerName string, round, streams, unaries int) ([]killOutcome, error) {
	ctx, cancel := context.WithTimeout(ctx, workerLostWait+30*time.Second)
	defer cancel()
	var killed atomic.Pointer[time.Time]
	outcomes := make([]killOutcome, streams+unaries)
	started := make(chan struct{}, streams)
	var wg sync.WaitGroup
	for i := range streams + unaries {
		stream := i < streams
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &outcomes[i]
			o.stream = stream
			prompt := fmt.Sprintf("round %d request %d\nsim: tokens=100000 tps=50", round, i)
			var err error
			if stream {
				err = lostStream(ctx, g, prompt, workerName, o, started)
			} else {
				err = lostUnary(ctx, g, prompt, workerName, o)
			}
			if k := killed.Load(); k != nil {
				if o.after = time.Since(*k); o.after > workerLostWait {
					r.fail("round %d: request %s ended %v after its worker was killed", round, o.id, o.after.Round(time.Millisecond))
				}
			}
			if err != nil {
				r.fail("round %d: %v", round, err)
				return
			}
			o.ok = true
		}()
	}
	// Every stream has output and every request holds a slot: the kill
	// lands in the middle of all of them.
	waitErr := func() error {
		for range streams {
			select {
			case <-started:
			case <-ctx.Done():
				return errors.New("streams did not start")
			}
		}
		return waitActive(ctx, g, workerName, streams+unaries)
	}()
	now := time.Now()
	killed.Store(&now)
	w.Kill()
	wg.Wait()
	if waitErr != nil {
		return nil, fmt.Errorf("round %d: %w", round, waitErr)
	}
	return outcomes, nil
}

// lostStream runs a stream whose worker is killed once it has output:
// it must end with the worker_lost frame naming the worker, and [DONE].
func lostStream(ctx context.Context, g *gateway, prompt, workerName string, o *killOutcome, started chan<- struct{}) error {
	req, err := http.NewRequestWithContext(ctx, "POST", g.URL+"/v1/chat/completions", bytes.NewReader(chatBody("sim-chat", prompt, true)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+g.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		started <- struct{}{}
		return fmt.Errorf("stream: %w", err)
	}
	defer resp.Body.Close()
	o.id = resp.Header.Get("X-Request-Id")
	if resp.StatusCode != http.StatusOK {
		started <- struct{}{}
		b, _ := io.ReadAll(resp.Body)
		o.status = resp.StatusCode
		return fmt.Errorf("stream %s: status %d before its worker was killed: %s", o.id, resp.StatusCode, tail(string(b), 300))
	}
	var body []byte
	buf := make([]byte, 32<<10)
	signalled := false
	var readErr error
	for {
		n, err := resp.Body.Read(buf)
		body = append(body, buf[:n]...)
		if !signalled && bytes.Contains(body, []byte(`"content"`)) {
			signalled = true
			started <- struct{}{}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
	}
	if !signalled {
		started <- struct{}{}
	}
	data := sseData(body)
	content, done, frame := streamContent(body)
	switch {
	case readErr != nil && ctx.Err() != nil:
		return fmt.Errorf("stream %s did not end within %v of its worker's kill (%d bytes of content)", o.id, workerLostWait, len(content))
	case readErr != nil:
		return fmt.Errorf("stream %s was cut without an error frame: %v (ends %q)", o.id, readErr, tail(string(body), 200))
	case content == "":
		return fmt.Errorf("stream %s ended before any output: %q", o.id, tail(string(body), 300))
	case !done || data[len(data)-1] != "[DONE]":
		return fmt.Errorf("stream %s ended without [DONE]: %q", o.id, tail(string(body), 300))
	case frame == "" || len(data) < 2 || data[len(data)-2] != frame:
		return fmt.Errorf("stream %s ended without an error frame before [DONE]: %q", o.id, tail(string(body), 300))
	}
	var f struct {
		Error struct {
			Message    string `json:"message"`
			Code       string `json:"code"`
			Status     int    `json:"status"`
			RetryAfter *int   `json:"retry_after"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(frame), &f); err != nil {
		return fmt.Errorf("stream %s: error frame %s: %w", o.id, frame, err)
	}
	o.status = f.Error.Status
	switch {
	case f.Error.Code != "worker_lost":
		return fmt.Errorf("stream %s: error frame code %q, want worker_lost: %s", o.id, f.Error.Code, frame)
	case f.Error.Status != http.StatusServiceUnavailable:
		return fmt.Errorf("stream %s: error frame status %d, want 503: %s", o.id, f.Error.Status, frame)
	case f.Error.RetryAfter == nil || *f.Error.RetryAfter < 1:
		return fmt.Errorf("stream %s: error frame without retry_after: %s", o.id, frame)
	case !strings.Contains(f.Error.Message, workerName):
		return fmt.Errorf("stream %s: error frame does not name worker %s: %s", o.id, workerName, frame)
	}
	return nil
}

// lostUnary runs a non-streaming request whose worker is killed while it
// generates: with no other worker it must fail with a 503 or 502 and the
// spec's error body.
func lostUnary(ctx context.Context, g *gateway, prompt, workerName string, o *killOutcome) error {
	req, err := http.NewRequestWithContext(ctx, "POST", g.URL+"/v1/chat/completions", bytes.NewReader(chatBody("sim-chat", prompt, false)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+g.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("non-streaming request did not end within %v of its worker's kill", workerLostWait)
		}
		return fmt.Errorf("non-streaming request: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	o.id, o.status = resp.Header.Get("X-Request-Id"), resp.StatusCode
	if err != nil {
		return fmt.Errorf("non-streaming request %s: body cut: %v", o.id, err)
	}
	var e struct {
		Detail json.RawMessage `json:"detail"`
	}
	var detail string
	switch {
	case resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusBadGateway:
		return fmt.Errorf("non-streaming request %s: status %d after its worker was killed, want 503 or 502: %s", o.id, resp.StatusCode, tail(string(b), 300))
	case o.id == "":
		return fmt.Errorf("non-streaming request answered %d without X-Request-Id", resp.StatusCode)
	case json.Unmarshal(b, &e) != nil || json.Unmarshal(e.Detail, &detail) != nil || detail == "":
		return fmt.Errorf("non-streaming request %s: %d without a string detail: %s", o.id, resp.StatusCode, tail(string(b), 300))
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "":
		return fmt.Errorf("non-streaming request %s: 503 without Retry-After: %s", o.id, b)
	case !strings.Contains(detail, workerName):
		return fmt.Errorf("non-streaming request %s: %d does not name worker %s: %s", o.id, resp.StatusCode, workerName, b)
	}
	return nil
}

// waitActive waits until the worker runs n requests.
func waitActive(ctx context.Context, g *gateway, name string, n int) error {
	last := 0
	for ctx.Err() == nil {
		if _, active, err := g.workerState(ctx, name); err == nil {
			if last = active; active >= n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("worker %s runs %d requests, want %d", name, last, n)
}

// idleGateway checks that nothing is left in progress once every request
// of a round has ended.
func idleGateway(ctx context.Context, g *gateway) error {
	st, body, err := g.do(ctx, "GET", "/api/v1/usage/inflight", nil)
	if err != nil {
		return fmt.Errorf("in-progress list: %w", err)
	}
	var list []json.RawMessage
	if st != http.StatusOK || json.Unmarshal(body, &list) != nil {
		return fmt.Errorf("in-progress list: status %d: %s", st, tail(string(body), 300))
	}
	if len(list) > 0 {
		return fmt.Errorf("%d requests still in progress after every request ended: %s", len(list), tail(string(body), 500))
	}
	return nil
}

// servesAgain checks that the restarted worker serves a stream and a
// non-streaming request.
func servesAgain(ctx context.Context, r *result, g *gateway, round int) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, stream := range []bool{true, false} {
		st, body, err := g.do(ctx, "POST", "/v1/chat/completions", chatBody("sim-chat", "after restart\nsim: tokens=20 tps=0", stream))
		if err != nil {
			r.fail("round %d: request after the worker's restart: %v", round, err)
			continue
		}
		if st != http.StatusOK {
			r.fail("round %d: request after the worker's restart: status %d: %s", round, st, tail(string(body), 300))
			continue
		}
		if stream {
			if _, done, frame := streamContent(body); !done || frame != "" {
				r.fail("round %d: stream after the worker's restart did not finish: %q", round, tail(string(body), 300))
			}
		}
	}
}
