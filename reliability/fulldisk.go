package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// fullDiskSize is the small filesystem the gateway's data directory is
// put on: room for the database to grow under load for a while, and
// small enough to fill at once.
const fullDiskSize = 16 << 20

// fullDisk runs the gateway with its data directory on a small tmpfs,
// fills the filesystem with a file while requests run, then deletes the
// file. It judges that no request a client saw succeed lost its usage row
// (each has exactly one, billing what the client was told, and the
// totals are the rows' sum), that while the rows waiting were at their
// bound (--store-backlog-mb 1) new requests were refused with the spec's
// 503, that /healthz and the metrics said so, and that the gateway wrote
// the backlog and served again by itself once space returned. It needs
// root to mount the filesystem, and is skipped, saying so, without.
func fullDisk(ctx context.Context, h *rig, r *result) error {
	mnt := filepath.Join(h.dir, "fulldisk-mnt")
	if os.Geteuid() != 0 {
		r.figure("skipped", "not root (uid %d): mounting a small tmpfs needs root", os.Geteuid())
		return nil
	}
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", fullDiskSize)); err != nil {
		r.figure("skipped", "cannot mount a tmpfs at %s: %v", mnt, err)
		return nil
	}
	defer func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	}()

	s := h.spec("fulldisk", "NO_COLOR=1")
	s.Args = []string{"--rental-providers", "none", "--store-backlog-mb", "1"}
	hg, err := harness.StartGateway(ctx, harness.GatewaySpec{Spec: s, Data: filepath.Join(mnt, "data")})
	if err != nil {
		return err
	}
	key, err := hg.AdminKey()
	if err != nil {
		_ = hg.Kill()
		return err
	}
	g := &gateway{Gateway: hg, h: h, Key: key}
	defer func() { _ = g.Stop(syscall.SIGTERM, stopGrace) }()
	pid := g.Pid()
	const workerName = "fulldisk-worker"
	w, err := h.startWorker(ctx, g, workerName, g.URL, "--engine", "sim=ttft=0", "--max-concurrent", "8")
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop(syscall.SIGTERM, stopGrace) }()

	ld := &fullDiskLoad{g: g, ok: map[string]usageCounts{}}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	for i := range scaled(h, 4, 6) {
		wg.Go(func() { ld.client(loadCtx, i) })
	}
	health := &healthWatch{g: g}
	wg.Go(func() { health.run(loadCtx) })

	warm := scaled(h, time.Second, 5*time.Second)
	sleep(ctx, warm)
	if st := health.last(); st.Store == nil || st.Store.State != "ok" || st.Status != "ok" {
		r.fail("/healthz before the disk filled: %+v", st)
	}

	// Fill the filesystem.
	filled := time.Now()
	fillerPath := filepath.Join(mnt, "filler")
	filler, err := fill(fillerPath)
	if err != nil {
		return fmt.Errorf("fill %s: %w", mnt, err)
	}
	r.figure("filler", "%.1f MiB of the %d MiB filesystem", mb(filler), fullDiskSize>>20)

	// Load runs until the backlog reaches its bound and requests are
	// refused, and a while longer.
	refusing, err := health.await(ctx, scaled(h, 20*time.Second, 60*time.Second), func(st healthState) bool {
		return st.Store != nil && st.Store.State == "refusing"
	})
	if err != nil {
		r.fail("the backlog never reached its bound: %v; /healthz last said %+v", err, health.last())
	} else {
		r.figure("disk full to refusing", "%d ms (bound 1 MiB)", refusing.Sub(filled).Milliseconds())
		if v, err := g.metric(ctx, "svc_store_refusing"); err != nil || v != 1 {
			r.fail("svc_store_refusing while refusing: %v %v", v, err)
		}
	}
	sleep(ctx, scaled(h, time.Second, 10*time.Second))
	full := health.last()
	okAtFull := len(ld.succeeded())

	// Free the space; the gateway writes its backlog and serves again,
	// without a restart.
	freed := time.Now()
	if err := os.Remove(fillerPath); err != nil {
		return err
	}
	// "ok" means the commits succeed again and the rows waiting are below
	// the bound: the backlog was written, oldest first, in the commit
	// that succeeded.
	recovered, err := health.await(ctx, scaled(h, 15*time.Second, 30*time.Second), func(st healthState) bool {
		return st.Store != nil && st.Store.State == "ok"
	})
	if err != nil {
		r.fail("the store did not recover after space returned: %v; /healthz last said %+v", err, health.last())
	} else {
		r.figure("recovery", "%d ms from freeing space to the backlog written and requests served (/healthz polled every 50 ms; retries at most 1 s apart)",
			recovered.Sub(freed).Milliseconds())
	}
	sleep(ctx, scaled(h, time.Second, 5*time.Second))
	stopLoad()
	wg.Wait()
	if g.Exited() || g.Pid() != pid {
		r.fail("the gateway did not stay up: recovery must come without a restart")
	}
	if sign := crashed(g); sign != "" {
		r.fail("gateway crashed: %s", sign)
	}
	if n := len(ld.succeeded()) - okAtFull; n == 0 {
		r.fail("no request succeeded after space returned")
	}

	// The judgement: every request a client saw succeed has its row, once.
	if _, err := health.await(ctx, 10*time.Second, func(st healthState) bool {
		return st.Store != nil && st.Store.PendingUsageRows == 0
	}); err != nil {
		r.fail("rows still waiting after the load: %+v", health.last())
	}
	rows, err := usageLog(ctx, g)
	if err != nil {
		return err
	}
	fullDiskJudge(r, ld, rows)
	if err := crashJudgeSummary(ctx, r, g, rows); err != nil {
		return err
	}
	if v, err := g.metric(ctx, "svc_store_failed_commits_total"); err != nil || v == 0 {
		r.fail("svc_store_failed_commits_total after a full disk: %v %v", v, err)
	} else {
		r.figure("failed commits", "%.0f (retried, backing off to 1 s)", v)
	}
	states := health.states()
	for _, want := range []string{"ok", "retrying", "refusing"} {
		if !strings.Contains(" "+states+" ", " "+want+" ") {
			r.fail("/healthz never said %q (it said %s)", want, states)
		}
	}
	r.figure("/healthz store states", "%s", states)
	if full.Store != nil {
		r.figure("at the bound", "%d usage rows waiting, %.2f MiB held of %.0f MiB; %q",
			full.Store.PendingUsageRows, mb(full.Store.BacklogBytes), mb(full.Store.BacklogLimitBytes), full.Store.Error)
	}
	r.figure("requests", "%d sent, %d succeeded, %d refused with 503 for the store, %d other failures",
		ld.sent.Load(), len(ld.succeeded()), ld.refused.Load(), ld.other.Load())
	return nil
}

// fill writes a file at path until the filesystem has no room left and
// returns its size.
func fill(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for _, chunk := range []int{1 << 20, 4 << 10} {
		buf := make([]byte, chunk)
		for {
			k, err := f.Write(buf)
			n += int64(k)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// fullDiskLoad is the load of the full-disk check and what it saw.
type fullDiskLoad struct {
	g       *gateway
	sent    atomic.Int64
	refused atomic.Int64
	other   atomic.Int64

	mu        sync.Mutex
	ok        map[string]usageCounts
	badRefuse []string
	others    []string
}

// client sends chat completions, every other one streamed, one after
// another until ctx ends; after a refusal it pauses a little rather than
// spin.
func (l *fullDiskLoad) client(ctx context.Context, n int) {
	for i := 0; ctx.Err() == nil; i++ {
		l.sent.Add(1)
		res := l.request(ctx, (n+i)%2 == 0, fmt.Sprintf("client %d request %d", n, i))
		l.mu.Lock()
		switch {
		case res.err == nil:
			l.ok[res.id] = res.usage
		case res.refusal:
			l.refused.Add(1)
			if res.bad != "" && len(l.badRefuse) < 10 {
				l.badRefuse = append(l.badRefuse, res.bad)
			}
		case ctx.Err() == nil:
			l.other.Add(1)
			if len(l.others) < 10 {
				l.others = append(l.others, res.err.Error())
			}
		}
		l.mu.Unlock()
		if res.err != nil {
			sleep(ctx, 20*time.Millisecond)
		}
	}
}

// fullDiskResult is one request's outcome: a success with its id and
// usage, a refusal for the store (bad says what is wrong with its shape),
// or another failure.
type fullDiskResult struct {
	id      string
	usage   usageCounts
	refusal bool
	bad     string
	err     error
}

func (l *fullDiskLoad) request(ctx context.Context, stream bool, prompt string) fullDiskResult {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body := chatBody("sim-chat", prompt+"\nsim: tokens=8 tps=100000", stream)
	req, err := http.NewRequestWithContext(ctx, "POST", l.g.URL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return fullDiskResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+l.g.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fullDiskResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fullDiskResult{err: err}
	}
	id := resp.Header.Get("X-Request-Id")
	if resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(b, []byte("usage store unavailable")) {
		return fullDiskResult{refusal: true, bad: refusalProblem(resp, b), err: errors.New("refused")}
	}
	if resp.StatusCode != http.StatusOK {
		return fullDiskResult{err: fmt.Errorf("status %d: %s", resp.StatusCode, tail(string(b), 200))}
	}
	var reply struct {
		Usage *usageCounts `json:"usage"`
	}
	if stream {
		data := sseData(b)
		if _, done, errFrame := streamContent(b); !done || errFrame != "" {
			return fullDiskResult{err: fmt.Errorf("stream %s did not finish: %s", id, errFrame)}
		}
		for _, d := range data {
			if json.Unmarshal([]byte(d), &reply) == nil && reply.Usage != nil {
				break
			}
		}
	} else if err := json.Unmarshal(b, &reply); err != nil {
		return fullDiskResult{err: fmt.Errorf("reply %s: %w", id, err)}
	}
	if id == "" || reply.Usage == nil {
		return fullDiskResult{err: fmt.Errorf("reply %q reports no usage", id)}
	}
	return fullDiskResult{id: id, usage: *reply.Usage}
}

// refusalProblem says what is wrong with a refusal for the store, ""
// when it is the spec's 503: Retry-After, X-Request-Id, and the
// compatible envelope of type service_unavailable beside detail.
func refusalProblem(resp *http.Response, b []byte) string {
	var body struct {
		Detail string `json:"detail"`
		Error  struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	switch {
	case json.Unmarshal(b, &body) != nil:
		return "body is not JSON: " + tail(string(b), 200)
	case resp.Header.Get("Retry-After") == "":
		return "no Retry-After"
	case resp.Header.Get("X-Request-Id") == "":
		return "no X-Request-Id"
	case body.Error.Type != "service_unavailable" || body.Detail == "" || body.Detail != body.Error.Message:
		return "not the 503 shape: " + tail(string(b), 300)
	case !strings.Contains(body.Detail, "disk full"):
		return "does not say the disk is full: " + body.Detail
	}
	return ""
}

func (l *fullDiskLoad) succeeded() map[string]usageCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]usageCounts, len(l.ok))
	for k, v := range l.ok {
		out[k] = v
	}
	return out
}

// fullDiskJudge checks the log against what the clients saw: every
// success has exactly one row billing what it was told; every refusal
// had the spec's shape; nothing else failed.
func fullDiskJudge(r *result, ld *fullDiskLoad, rows []usageRow) {
	byID, dups := rowsByID(r, rows)
	lost, unlike := 0, 0
	for id, u := range ld.succeeded() {
		row, ok := byID[id]
		if !ok {
			lost++
			r.fail("request %s succeeded but has no usage row", id)
			continue
		}
		if got := (usageCounts{row.PromptTokens, row.CompletionTokens, row.TotalTokens}); row.StatusCode != http.StatusOK || got != u {
			unlike++
			r.fail("request %s succeeded with usage %+v but its row has status %d and %+v", id, u, row.StatusCode, got)
		}
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	for _, p := range ld.badRefuse {
		r.fail("refusal for the store: %s", p)
	}
	for _, e := range ld.others {
		r.fail("request failed other than refused: %s", e)
	}
	if ld.refused.Load() == 0 {
		r.fail("no request was refused while the backlog was at its bound")
	}
	r.figure("rows lost", "%d (of %d requests succeeded)", lost, len(ld.ok))
	r.figure("duplicate rows", "%d", dups)
	r.figure("rows unlike their reply", "%d", unlike)
	r.figure("usage rows", "%d", len(rows))
}

// healthState is the part of /healthz the check reads.
type healthState struct {
	Status string `json:"status"`
	Store  *struct {
		State             string `json:"state"`
		Error             string `json:"error"`
		PendingUsageRows  int    `json:"pending_usage_rows"`
		BacklogBytes      int64  `json:"backlog_bytes"`
		BacklogLimitBytes int64  `json:"backlog_limit_bytes"`
	} `json:"store"`
}

// healthWatch polls /healthz and keeps the last answer and the store
// states it went through.
type healthWatch struct {
	g *gateway

	mu   sync.Mutex
	cur  healthState
	seen []string
	at   time.Time
}

func (hw *healthWatch) run(ctx context.Context) {
	for ctx.Err() == nil {
		hw.poll(ctx)
		sleep(ctx, 50*time.Millisecond)
	}
}

func (hw *healthWatch) poll(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, body, err := hw.g.do(rctx, "GET", "/healthz", nil)
	var hs healthState
	if err != nil || st != http.StatusOK || json.Unmarshal(body, &hs) != nil {
		return
	}
	hw.mu.Lock()
	defer hw.mu.Unlock()
	hw.cur, hw.at = hs, time.Now()
	if hs.Store != nil && (len(hw.seen) == 0 || hw.seen[len(hw.seen)-1] != hs.Store.State) {
		hw.seen = append(hw.seen, hs.Store.State)
	}
}

func (hw *healthWatch) last() healthState {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	return hw.cur
}

// states are the store states /healthz went through, in order.
func (hw *healthWatch) states() string {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	return strings.Join(hw.seen, " ")
}

// await polls /healthz itself until cond holds, for at most limit, and
// returns when it first did.
func (hw *healthWatch) await(ctx context.Context, limit time.Duration, cond func(healthState) bool) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		hw.poll(ctx)
		hw.mu.Lock()
		st, at := hw.cur, hw.at
		hw.mu.Unlock()
		if cond(st) {
			return at, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("not within %v", limit)
		}
		if ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
		sleep(ctx, 50*time.Millisecond)
	}
}
