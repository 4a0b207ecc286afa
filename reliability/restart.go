package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// restartGateway replaces the gateway under steady load the ways README's
// "Upgrades and restarts" gives: a new `svc serve` on the same data
// directory and address, then SIGTERM to the old one, or, every other
// time, SIGTERM first and the new one started during the drain. Its
// clients send
// one request after another and never retry, as an SDK configured
// without retries would; each request is noted with its outcome. It
// judges that no request failed (no refused or reset connection, no
// error status), that every request seen to succeed has its usage row
// with the usage the client was told, that the old server exited cleanly
// and the worker came back to the new one by itself, and it measures the
// gap: the longest time around a restart in which no request completed.
func restartGateway(ctx context.Context, h *rig, r *result) error {
	args := []string{"--drain-timeout", "20s"}
	g, err := h.startGateway(ctx, "restart", args...)
	if err != nil {
		return err
	}
	defer func() { _ = g.Stop(syscall.SIGTERM, stopGrace) }()
	const workerName = "restart-worker"
	w, err := h.startWorker(ctx, g, workerName, g.URL, "--engine", "sim=ttft=0", "--max-concurrent", "16")
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop(syscall.SIGTERM, stopGrace) }()

	restarts := scaled(h, 2, 10)
	pause := scaled(h, 3*time.Second, 5*time.Second)
	clients := scaled(h, 4, 6)

	ld := &restartLoad{g: g}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() { ld.client(loadCtx, i) })
	}
	var rounds []restartRound
	var runErr error
	for k := 0; k < restarts && runErr == nil; k++ {
		select {
		case <-ctx.Done():
			runErr = ctx.Err()
			continue
		case <-time.After(pause):
		}
		round, err := replaceGateway(ctx, h, g, args, w, workerName, k%2 == 1)
		if err != nil {
			r.fail("restart %d: %v", k+1, err)
			runErr = err
			continue
		}
		rounds = append(rounds, round)
	}
	if runErr == nil {
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	stopLoad()
	wg.Wait()
	if runErr != nil {
		return runErr
	}
	if sign := crashed(g); sign != "" {
		r.fail("gateway crashed: %s", sign)
	}
	if sign := crashed(w); sign != "" {
		r.fail("worker crashed: %s", sign)
	}

	reqs := ld.all()
	failed := 0
	kinds := map[string]int{}
	for _, q := range reqs {
		if q.err != "" {
			failed++
			kinds[q.err]++
			r.fail("request %s at %s failed: %s", q.name, q.start.Format("15:04:05.000"), q.err)
		}
	}
	rows, err := usageLog(ctx, g)
	if err != nil {
		return err
	}
	byID := make(map[string]usageRow, len(rows))
	for _, row := range rows {
		byID[row.ID] = row
	}
	lost := 0
	for _, q := range reqs {
		if q.err != "" {
			continue
		}
		row, ok := byID[q.id]
		got := usageCounts{row.PromptTokens, row.CompletionTokens, row.TotalTokens}
		switch {
		case !ok:
			lost++
			r.fail("request %s (%s) succeeded but has no usage row", q.name, q.id)
		case row.StatusCode != http.StatusOK || got != q.usage:
			r.fail("request %s succeeded with usage %+v but its row has status %d and %+v", q.name, q.usage, row.StatusCode, got)
		}
	}

	var gaps, drains, ready, back, waits []time.Duration
	termFirst := 0
	for i := range rounds {
		rd := &rounds[i]
		if rd.termFirst {
			termFirst++
		}
		rd.gap, rd.wait = ld.gapAround(rd.term, rd.workerBack)
		gaps = append(gaps, rd.gap)
		waits = append(waits, rd.wait)
		drains = append(drains, rd.oldExit.Sub(rd.term))
		ready = append(ready, rd.newReady.Sub(rd.oldExit))
		back = append(back, rd.workerBack.Sub(rd.oldExit))
	}
	r.figure("requests", "%d sent, %d succeeded, %d failed%s", len(reqs), len(reqs)-failed, failed, errorKinds(kinds))
	r.figure("restarts", "%d (%d new server first, then SIGTERM to the old one; %d SIGTERM first)", len(rounds), len(rounds)-termFirst, termFirst)
	r.figure("restart gap", "%s (longest time with no request completing, around each restart)", durStats(gaps))
	r.figure("longest wait", "%s (the slowest request sent during each restart)", durStats(waits))
	r.figure("old server's drain", "%s (SIGTERM to exit)", durStats(drains))
	r.figure("new server ready", "%s (after the old one exited)", durStats(ready))
	r.figure("worker back", "%s (after the old server exited)", durStats(back))
	r.figure("usage rows", "%d; %d succeeded requests without one", len(rows), lost)
	return nil
}

// restartRound is one replacement of the gateway, timed.
type restartRound struct {
	termFirst  bool      // SIGTERM went to the old server before the new one started
	term       time.Time // SIGTERM sent to the old server
	oldExit    time.Time // the old server seen gone
	newReady   time.Time // the new server logged that it listens
	workerBack time.Time // the worker listed healthy by the new server
	gap, wait  time.Duration
}

// replaceGateway starts a new `svc serve` on g's address and data
// directory and sends SIGTERM to the old one, after the new one has taken
// over the listening socket or, termFirst, before the new one starts. It
// waits for the old one to exit, the new one to listen and the worker to
// be back. g runs the new one after it.
func replaceGateway(ctx context.Context, h *rig, g *gateway, args []string, w *harness.Proc, workerName string, termFirst bool) (restartRound, error) {
	rd := restartRound{termFirst: termFirst}
	old := g.Proc
	if termFirst {
		rd.term = time.Now()
		if err := old.Signal(syscall.SIGTERM); err != nil {
			return rd, err
		}
	}
	s := h.spec("restart", "NO_COLOR=1")
	s.Args = append([]string{"serve", "--addr", g.Addr, "--data", g.Data, "--log-format", "json", "--rental-providers", "none"}, args...)
	s.KeepLog = true
	next, err := harness.Start(s)
	if err != nil {
		return rd, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := next.Log().WaitMsg(wctx, "took over the listening socket"); err != nil {
		_ = next.Kill()
		return rd, fmt.Errorf("the new server did not take over the socket: %w\n%s", err, tail(next.Output(), 2000))
	}
	if !termFirst {
		rd.term = time.Now()
		if err := old.Signal(syscall.SIGTERM); err != nil {
			_ = next.Kill()
			return rd, err
		}
	}
	select {
	case <-old.Done():
		rd.oldExit = time.Now()
	case <-wctx.Done():
		_ = next.Kill()
		return rd, errors.New("the old server did not exit within 30 s of SIGTERM")
	}
	if err := old.Err(); err != nil {
		return rd, fmt.Errorf("the old server exited with %v", err)
	}
	if _, err := next.Log().WaitMsg(wctx, "listening"); err != nil {
		_ = next.Kill()
		return rd, fmt.Errorf("the new server did not start: %w\n%s", err, tail(next.Output(), 2000))
	}
	rd.newReady = time.Now()
	g.Proc = next
	if err := g.waitWorker(ctx, workerName, w, 30*time.Second); err != nil {
		return rd, fmt.Errorf("the worker did not come back to the new server: %w", err)
	}
	rd.workerBack = time.Now()
	return rd, nil
}

// restartLoad is the restart check's clients and every request they sent.
type restartLoad struct {
	g *gateway

	mu   sync.Mutex
	reqs []restartReq
}

// restartReq is one request as its client saw it.
type restartReq struct {
	name       string
	start, end time.Time
	id         string
	usage      usageCounts
	err        string // why it failed; "" when it succeeded
}

// client sends requests one after another until ctx ends, each on an
// HTTP client of its own with keep-alive connections, as one application
// with an SDK would, and never retries one. Client 0 sends streams of
// about a second, so that a restart has something long to drain; the
// others short streams and non-streaming chats.
func (l *restartLoad) client(ctx context.Context, n int) {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: (&net.Dialer{Timeout: 30 * time.Second}).DialContext, MaxIdleConnsPerHost: 4,
	}}
	defer hc.CloseIdleConnections()
	for i := 0; ctx.Err() == nil; i++ {
		stream, sim := i%2 == 0, "tokens=40 tps=400"
		if n == 0 {
			stream, sim = true, "tokens=200 tps=200"
		}
		q := restartReq{name: fmt.Sprintf("%d/%d", n, i), start: time.Now()}
		id, u, err := l.request(ctx, hc, stream, fmt.Sprintf("client %d request %d\nsim: %s", n, i, sim))
		if ctx.Err() != nil {
			// Cut off by the end of the load, not by the gateway.
			return
		}
		q.end, q.id, q.usage = time.Now(), id, u
		if err != nil {
			q.err = err.Error()
		}
		l.mu.Lock()
		l.reqs = append(l.reqs, q)
		l.mu.Unlock()
	}
}

// request sends one chat completion and returns its id and usage when
// the client saw it succeed: a 200 with the whole body, for a stream its
// [DONE] with no error frame before it.
func (l *restartLoad) request(ctx context.Context, hc *http.Client, stream bool, prompt string) (string, usageCounts, error) {
	var u usageCounts
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", l.g.URL+"/v1/chat/completions",
		bytes.NewReader(chatBody("sim-chat", prompt, stream)))
	if err != nil {
		return "", u, err
	}
	req.Header.Set("Authorization", "Bearer "+l.g.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "", u, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", u, fmt.Errorf("read the reply: %w", err)
	}
	id := resp.Header.Get("X-Request-Id")
	var reply struct {
		Usage *usageCounts `json:"usage"`
	}
	switch {
	case resp.StatusCode != http.StatusOK:
		return "", u, fmt.Errorf("status %d: %s", resp.StatusCode, tail(string(b), 200))
	case stream:
		_, done, errFrame := streamContent(b)
		if !done || errFrame != "" {
			return "", u, fmt.Errorf("stream did not finish: %s", tail(string(b), 200))
		}
		for _, d := range sseData(b) {
			if json.Unmarshal([]byte(d), &reply) == nil && reply.Usage != nil {
				break
			}
		}
	case json.Unmarshal(b, &reply) != nil:
		return "", u, errors.New("body is not JSON")
	}
	if reply.Usage == nil {
		return "", u, fmt.Errorf("reply %s reports no usage", id)
	}
	return id, *reply.Usage, nil
}

func (l *restartLoad) all() []restartReq {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

// gapAround is the longest time in which no request completed, among
// the intervals between completions that overlap [from, to], and the
// longest a request sent in [from, to] took.
func (l *restartLoad) gapAround(from, to time.Time) (gap, wait time.Duration) {
	var ends []time.Time
	for _, q := range l.all() {
		if q.err == "" {
			ends = append(ends, q.end)
		}
		if !q.start.Before(from) && !q.start.After(to) {
			wait = max(wait, q.end.Sub(q.start))
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(ends); i++ {
		if ends[i].After(from) && ends[i-1].Before(to) {
			gap = max(gap, ends[i].Sub(ends[i-1]))
		}
	}
	return gap, wait
}

// errorKinds lists how many requests failed with each error.
func errorKinds(kinds map[string]int) string {
	if len(kinds) == 0 {
		return ""
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%d × %s", n, tail(k, 80)))
	}
	slices.Sort(parts)
	return " (" + strings.Join(parts, "; ") + ")"
}
