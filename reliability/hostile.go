package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	svcserver "github.com/svc-dev/svc/internal/server"
)

// hostileInput sends every route of the route table what an attacker or a
// broken client sends: malformed, truncated, deep and oversized JSON,
// bodies far over the limit, invalid UTF-8 and NUL bytes everywhere,
// oversized headers and URLs, smuggling framings, pipelined requests,
// slowloris and idle connections by the thousand, and broken multipart
// uploads. Every answer must be the spec's 4xx with a JSON detail (or a
// success where the input is in fact acceptable), never a 5xx, a hang or
// a crash; the gateway's peak memory stays under a stated bound; and a
// legitimate client is served promptly throughout.
func hostileInput(ctx context.Context, h *rig, r *result) error {
	g, err := h.startGateway(ctx, "hostile")
	if err != nil {
		return err
	}
	defer g.Stop(syscall.SIGTERM, stopGrace)
	w, err := h.startWorker(ctx, g, "hostile-box", g.URL, "--engine", "sim=tps=0,ttft=0")
	if err != nil {
		return err
	}
	defer w.Stop(syscall.SIGTERM, stopGrace)
	return hostileAt(ctx, h, r, g, "hostile-box")
}

// hostileAt sends the hostile input to g, whose organisation has the
// worker named worker.
func hostileAt(ctx context.Context, h *rig, r *result, g *gateway, worker string) error {
	hc := &hostile{g: g, r: r, counts: map[string]int{}}
	var err error
	if hc.workerID, err = workerID(ctx, g, worker); err != nil {
		return err
	}
	_, base := rss(g.Pid())
	r.figure("gateway peak RSS at start", "%.1f MB", mb(base))

	phases := []struct {
		name string
		run  func(context.Context)
	}{
		{"json", hc.jsonBodies},
		{"path", hc.pathParams},
		{"methods", hc.wrongMethods},
		{"bytes", hc.badBytes},
		{"headers", hc.bigHeaders},
		{"framing", hc.framing},
		{"multipart", hc.multipart},
		{"pipelining", hc.pipelining},
		{"big bodies", hc.bigBodies},
		{"connections", hc.connections},
	}
	for _, p := range phases {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		start := time.Now()
		p.run(ctx)
		h.logf("hostile: %s in %.1fs", p.name, time.Since(start).Seconds())
		if g.Exited() {
			r.fail("the gateway exited during %s: %v", p.name, g.Err())
			break
		}
	}

	// After all of it the gateway still serves.
	if !g.Exited() {
		if st, body, err := g.do(ctx, "POST", "/v1/chat/completions", chatBody("sim-chat", "still there?", false)); err != nil || st != 200 {
			r.fail("after the hostile input a legitimate chat completion = %d %v %.200s", st, err, body)
		}
	}
	if c := crashed(g); c != "" {
		r.fail("the gateway crashed: %s", c)
	}
	_, peak := rss(g.Pid())
	if g.Exited() {
		peak = hc.peak
	}
	hc.peak = max(hc.peak, peak)
	r.figure("gateway peak RSS (VmHWM) over the whole check", "%.1f MB (bound %d MB)", mb(hc.peak), rssBound>>20)
	if hc.peak > rssBound {
		r.fail("the gateway's peak RSS %.1f MB is over the %d MB bound", mb(hc.peak), rssBound>>20)
	}
	hc.report()
	return nil
}

// rssBound is the gateway's peak resident memory allowed over the whole
// check. A caller without a valid key may send no more than 1 MB of body
// (anonymousGrowth bounds what those cost), but a key holder's body of up
// to 32 MB is read whole before its handler runs; a chunked one, whose
// size is not known up front, grows a buffer that doubles to 64 MB while
// the 32 MB are copied into it, and Go's collector lets the heap reach
// twice what is live: about 200 MB for each over-limit upload in flight.
// This check sends two at once: 30 MB to start with, 2 x 200 MB, and room
// for the idle connections: 512 MB. A body of 500 MB costs what one of
// 50 MB does; a gateway that kept reading past its limit would blow
// through it.
const rssBound = 512 << 20

// hostileTimeout bounds every exchange: an answer that has not come by
// then is a hang.
const hostileTimeout = 20 * time.Second

type hostile struct {
	g        *gateway
	r        *result
	workerID string
	peak     int64

	mu     sync.Mutex
	counts map[string]int // inputs tried, by category
	status map[int]int    // answers seen, by status
}

func (hc *hostile) count(category string) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	hc.counts[category]++
}

func (hc *hostile) seen(status int) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.status == nil {
		hc.status = map[int]int{}
	}
	hc.status[status]++
}

func (hc *hostile) report() {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	var cats []string
	total := 0
	for c, n := range hc.counts {
		cats = append(cats, c)
		total += n
	}
	sort.Strings(cats)
	for _, c := range cats {
		hc.r.figure("inputs: "+c, "%d", hc.counts[c])
	}
	hc.r.figure("inputs: total", "%d", total)
	var sts []int
	for s := range hc.status {
		sts = append(sts, s)
	}
	sort.Ints(sts)
	var parts []string
	for _, s := range sts {
		parts = append(parts, fmt.Sprintf("%d×%d", s, hc.status[s]))
	}
	hc.r.figure("answers by status", "%s", strings.Join(parts, " "))
}

// sample tracks the gateway's peak RSS while it is alive, so the figure
// survives a crash.
func (hc *hostile) sample() {
	if hc.g.Exited() {
		return
	}
	if _, p := rss(hc.g.Pid()); p > 0 {
		hc.mu.Lock()
		hc.peak = max(hc.peak, p)
		hc.mu.Unlock()
	}
}

// peakRSS is the highest RSS sampled so far; the sampler may be writing
// it as it is read.
func (hc *hostile) peakRSS() int64 {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.peak
}

// answer is one HTTP response read off a raw connection.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// probe is one hostile request and the statuses it may be answered with;
// nil allows any status below 500 (the input may be acceptable).
type probe struct {
	category string
	label    string
	raw      []byte
	allowed  []int
}

// exchange sends raw on a new connection and reads one answer. The
// request is written while the answer is read: a gateway that refuses a
// body early answers before it has all been sent.
func (hc *hostile) exchange(ctx context.Context, method string, raw io.Reader) (*answer, error) {
	as, err := hc.exchangeN(ctx, method, raw, 1, hostileTimeout)
	if len(as) == 0 {
		return nil, err
	}
	return as[0], nil
}

// exchangeN reads up to n answers from one connection, in order.
func (hc *hostile) exchangeN(ctx context.Context, method string, raw io.Reader, n int, timeout time.Duration) ([]*answer, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", hc.g.Addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(conn, raw) })
	// The writer may block on a body the gateway stopped reading; closing
	// the connection releases it.
	defer wg.Wait()
	defer conn.Close()
	br := bufio.NewReader(conn)
	var out []*answer
	for range n {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return out, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return out, err
		}
		out = append(out, &answer{status: resp.StatusCode, header: resp.Header, body: body})
		if resp.Close {
			break
		}
	}
	return out, nil
}

// send runs one probe and judges its answer.
func (hc *hostile) send(ctx context.Context, p probe) *answer {
	hc.count(p.category)
	method, _, _ := strings.Cut(string(p.raw[:min(len(p.raw), 16)]), " ")
	a, err := hc.exchange(ctx, method, strings.NewReader(string(p.raw)))
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		hc.r.fail("%s: %s: no answer: %v", p.category, p.label, err)
		return nil
	}
	hc.judge(p.category, p.label, a, p.allowed)
	return a
}

// judge checks one answer: never a 5xx, the allowed status when the
// probe names them, and an error body the spec describes.
func (hc *hostile) judge(category, label string, a *answer, allowed []int) {
	hc.seen(a.status)
	switch {
	case a.status >= 500:
		hc.r.fail("%s: %s = %d %.300s", category, label, a.status, a.body)
		return
	case allowed != nil && !slices.Contains(allowed, a.status):
		hc.r.fail("%s: %s = %d, want %v: %.300s", category, label, a.status, allowed, a.body)
		return
	}
	if a.status >= 400 {
		if msg := errorBodyProblem(a); msg != "" {
			hc.r.fail("%s: %s = %d with %s: %.300s", category, label, a.status, msg, a.body)
		}
	}
	if v := a.header.Get("X-Injected"); v != "" {
		hc.r.fail("%s: %s: a header was injected into the answer: X-Injected: %s", category, label, v)
	}
}

// errorBodyProblem says what is wrong with an error answer's body, or "".
func errorBodyProblem(a *answer) string {
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return "Content-Type " + ct
	}
	var body struct {
		Detail json.RawMessage `json:"detail"`
	}
	if err := json.Unmarshal(a.body, &body); err != nil {
		return "a body that is not JSON"
	}
	var s string
	var o struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	switch {
	case json.Unmarshal(body.Detail, &s) == nil && s != "":
	case json.Unmarshal(body.Detail, &o) == nil && o.Error.Message != "":
	default:
		return "no detail"
	}
	return ""
}

// request frames a request by hand, so it can be as wrong as a probe
// needs. hdrs are whole header lines; a nil body sends no Content-Length.
func request(method, target string, body []byte, hdrs ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: hostile\r\n", method, target)
	for _, h := range hdrs {
		b.WriteString(h + "\r\n")
	}
	if body != nil {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("Connection: close\r\n\r\n")
	b.Write(body)
	return []byte(b.String())
}

// bearer is the Authorization header line for key; "" sends none.
func bearer(key string) []string {
	if key == "" {
		return nil
	}
	return []string{"Authorization: Bearer " + key}
}

// target is a route as a client sees it: method, a concrete path, and
// the answer it must give without a key.
type target struct {
	method, path string
	route        svcserver.RouteInfo
}

// noKey is the status a request without a key gets on route.
func noKey(rt svcserver.RouteInfo) []int {
	if rt.Access == "public" {
		return nil
	}
	return []int{401}
}

// routes is every route of the table with its path parameters filled by
// plausible values.
func (hc *hostile) routes() []target {
	fill := strings.NewReplacer("{worker_id}", hc.workerID, "{id}", "inst_0123456789", "{org}", "default", "{user}", "admin")
	var out []target
	for _, rt := range svcserver.RouteTable() {
		out = append(out, target{method: rt.Method, path: fill.Replace(rt.Path), route: rt})
	}
	return out
}

// takesJSON reports whether a route reads a JSON body.
func takesJSON(t target) bool {
	return (t.method == "POST" || t.method == "PUT" || t.method == "PATCH") && !strings.HasSuffix(t.path, "/audio/transcriptions")
}

// parallel runs probes on a few connections at once.
func (hc *hostile) parallel(ctx context.Context, probes []probe) {
	work := make(chan probe)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for p := range work {
				hc.send(ctx, p)
			}
		})
	}
	for _, p := range probes {
		if ctx.Err() != nil {
			break
		}
		work <- p
	}
	close(work)
	wg.Wait()
	hc.sample()
}

func workerID(ctx context.Context, g *gateway, name string) (string, error) {
	st, body, err := g.do(ctx, "GET", "/api/v1/workers", nil)
	if err != nil || st != 200 {
		return "", fmt.Errorf("list workers: %d %v", st, err)
	}
	var list struct {
		Workers []struct {
			ID   string `json:"worker_id"`
			Name string `json:"worker_name"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", err
	}
	for _, w := range list.Workers {
		if w.Name == name {
			return w.ID, nil
		}
	}
	return "", errors.New("no worker " + name)
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
