package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// linkFaults runs streaming chat completions through a worker whose link
// to the gateway crosses a proxy that cuts, holds and reorders its
// traffic, and checks that every stream arrives byte for byte as the
// same request does over a quiet link: the link's resume must lose and
// repeat nothing. Then an outage longer than the gateway's grace must end
// the streams it catches with the spec's error frame, and the worker must
// come back and serve.
func linkFaults(ctx context.Context, h *rig, r *result) error {
	// The grace outlasts every fault of phase 1 (holds of at most 2.5s,
	// reconnects within about a second) and is short of phase 2's outage.
	const grace = 6 * time.Second
	streams := scaled(h, 100, 1000)
	tokens := scaled(h, 100, 480)
	// Streams start over a spread, so that faults also meet requests
	// being opened, not only replies under way.
	spread := scaled(h, 3*time.Second, 20*time.Second)
	tps := 8
	after := scaled(h, 10, 50) // streams served once the worker is back
	// A request arriving while the link is down waits as long as the
	// worker may take to come back.
	g, err := h.startGateway(ctx, "linkfault-gw", "--worker-grace", grace.String(), "--queue-hold", grace.String())
	if err != nil {
		return err
	}
	defer g.Stop(syscall.SIGTERM, stopGrace)
	p, err := newFaultProxy(g.Addr)
	if err != nil {
		return err
	}
	defer p.close()

	// Prompts past streams are for after the outage: short, so that
	// checking the worker serves again takes little time.
	prompt := func(i int) string {
		if i >= streams {
			return fmt.Sprintf("after the outage %d\nsim: tokens=16", i)
		}
		return fmt.Sprintf("link fault stream %d: tell a long story\nsim: tokens=%d", i, tokens)
	}

	// References come from a second worker on a direct link, fast: the
	// simulator answers the same request with the same bytes, at any rate.
	ref, err := h.startWorker(ctx, g, "linkfault-ref", g.URL, "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "64")
	if err != nil {
		return err
	}
	want := make([]*sseStream, streams+after)
	var refErr atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range want {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			st, body, err := postStream(ctx, g, prompt(i), 60*time.Second)
			s := parseSSE(body)
			if err != nil || st != 200 || !s.clean() {
				refErr.CompareAndSwap(nil, fmt.Sprintf("reference stream %d: status %d, err %v, end %q", i, st, err, tail(string(body), 300)))
				return
			}
			want[i] = s
		})
	}
	wg.Wait()
	if e := refErr.Load(); e != nil {
		ref.Kill()
		return errors.New(e.(string))
	}
	if err := ref.Stop(syscall.SIGTERM, stopGrace); err != nil {
		return err
	}
	if err := g.waitWorkerStatus(ctx, "linkfault-ref", "offline", 30*time.Second); err != nil {
		return err
	}

	w, err := h.startWorker(ctx, g, "linkfault", p.URL(), "--engine", fmt.Sprintf("sim=tps=%d,ttft=0", tps),
		"--max-concurrent", fmt.Sprint(streams+50))
	if err != nil {
		return err
	}
	defer w.Stop(syscall.SIGTERM, stopGrace)

	// Phase 1: every stream under faults, each compared with its reference.
	var active, peak atomic.Int64
	var contentBytes, sseBytes, lostBytes, repeatedBytes, badStreams atomic.Int64
	done := make(chan struct{})
	deadline := scaled(h, 90*time.Second, 240*time.Second)
	for i := range streams {
		wg.Go(func() {
			select {
			case <-ctx.Done():
			case <-time.After(spread * time.Duration(i) / time.Duration(streams)):
			}
			n := active.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			st, body, err := postStream(ctx, g, prompt(i), deadline)
			active.Add(-1)
			sseBytes.Add(int64(len(body)))
			got := parseSSE(body)
			if err != nil || st != 200 {
				badStreams.Add(1)
				r.fail("stream %d: status %d, err %v, ends %q", i, st, err, tail(string(body), 300))
				return
			}
			if msg := got.compare(want[i]); msg != "" {
				badStreams.Add(1)
				gc, wc := got.content(), want[i].content()
				lostBytes.Add(int64(max(0, len(wc)-len(gc))))
				repeatedBytes.Add(int64(max(0, len(gc)-len(wc))))
				r.fail("stream %d: %s", i, msg)
				return
			}
			contentBytes.Add(int64(len(want[i].content())))
		})
	}
	go func() { wg.Wait(); close(done) }()
	var sampler sync.WaitGroup
	var maxFiles int
	sampler.Go(func() {
		for {
			maxFiles = max(maxFiles, openFiles(g.Pid()))
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	counts := p.inject(ctx, done, &active, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)),
		scaled(h, 1200*time.Millisecond, 2500*time.Millisecond), scaled(h, 400*time.Millisecond, 800*time.Millisecond))
	<-done
	sampler.Wait()
	_, gwPeak := rss(g.Pid())
	r.figure("streams", "%d (%d at once at the peak), %d tokens each at %d tokens/s", streams, peak.Load(), tokens, tps)
	r.figure("gateway under the streams", "peak %d open files, peak RSS %d MiB", maxFiles, gwPeak>>20)
	r.figure("bytes checked", "%d content bytes (%d SSE bytes) against references", contentBytes.Load(), sseBytes.Load())
	breaks := counts.cuts + counts.halfCuts + counts.handshake + counts.stale
	r.figure("faults landed during streams", "%d cuts (%d half-cuts, %d during the resume handshake), %d delays, %d reorders (%d stale connections, %d unequal holds)",
		counts.cuts+counts.halfCuts+counts.handshake, counts.halfCuts, counts.handshake, counts.delays, counts.stale+counts.unequal, counts.stale, counts.unequal)
	r.figure("streams lost / repeated bytes", "%d bad streams, %d bytes lost, %d repeated", badStreams.Load(), lostBytes.Load(), repeatedBytes.Load())
	if breaks < 3 {
		r.fail("only %d link breaks landed during the streams", breaks)
	}

	resumes, err := g.transientDrops(ctx, "linkfault")
	if err != nil {
		return err
	}
	r.figure("link resumes seen", "%d transient disconnects in the worker events; the worker logged %d resumes",
		resumes, strings.Count(w.Output(), `"link resumed"`))
	if resumes == 0 {
		r.fail("no transient disconnect event after %d link breaks", breaks)
	}
	if err := g.waitIdle(ctx, "linkfault", 30*time.Second); err != nil {
		r.fail("after phase 1: %v", err)
	}
	// Phase 1's streams are the adaptive limit's samples: what it learnt
	// bounds how many of phase 2's streams are admitted at once.
	if n, err := g.concurrencyLimit(ctx, "linkfault", "sim-chat"); err == nil {
		r.figure("concurrency limit after phase 1", "%d for sim-chat on the worker", n)
	}

	if err := linkOutage(ctx, h, r, g, p, w, grace, want[streams:], func(i int) string { return prompt(streams + i) }); err != nil {
		return err
	}
	for _, pr := range []*harness.Proc{g.Proc, w} {
		if c := crashed(pr); c != "" {
			r.fail("%s crashed: %s", pr.Name(), c)
		}
	}
	return nil
}

// linkOutage takes the link down for longer than the grace while streams
// run: each must end with the worker_lost error frame and [DONE], and
// the worker must come back and serve byte-exact streams again.
func linkOutage(ctx context.Context, h *rig, r *result, g *gateway, p *faultProxy, w *harness.Proc, grace time.Duration,
	want []*sseStream, prompt func(int) string) error {
	n := scaled(h, 20, 100)
	started := make(chan struct{}, n)
	type outcome struct {
		status int
		body   []byte
		err    error
	}
	outs := make([]outcome, n)
	var wg sync.WaitGroup
	sctx, cancel := context.WithTimeout(ctx, grace+60*time.Second)
	defer cancel()
	for i := range n {
		wg.Go(func() {
			body := chatBody("sim-chat", fmt.Sprintf("outage %d\nsim: tokens=100000 tps=20", i), true)
			req, _ := http.NewRequestWithContext(sctx, "POST", g.URL+"/v1/chat/completions", strings.NewReader(string(body)))
			req.Header.Set("Authorization", "Bearer "+g.Key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				outs[i].err = err
				started <- struct{}{}
				return
			}
			defer resp.Body.Close()
			outs[i].status = resp.StatusCode
			// Wait for the first content chunk, so the stream has output
			// and cannot move: it must fail.
			var buf []byte
			tmp := make([]byte, 4096)
			signalled := false
			for {
				k, err := resp.Body.Read(tmp)
				buf = append(buf, tmp[:k]...)
				if !signalled && strings.Contains(string(buf), `"content":"`) {
					signalled = true
					started <- struct{}{}
				}
				if err != nil {
					if err != io.EOF {
						outs[i].err = err
					}
					break
				}
			}
			if !signalled {
				started <- struct{}{}
			}
			outs[i].body = buf
		})
	}
	for range n {
		<-started
	}
	p.setDown(true)
	cut := p.cut()
	downAt := time.Now()
	wg.Wait()
	ended := time.Since(downAt)
	outage := grace + 3*time.Second
	if left := outage - time.Since(downAt); left > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(left):
		}
	}
	p.setDown(false)
	framed, hung := 0, 0
	for i, o := range outs {
		data := sseData(o.body)
		switch {
		case o.err != nil:
			hung++
			r.fail("outage stream %d did not end: %v", i, o.err)
			continue
		case o.status != 200:
			r.fail("outage stream %d: status %d %s", i, o.status, tail(string(o.body), 300))
			continue
		case len(data) < 2 || data[len(data)-1] != "[DONE]":
			r.fail("outage stream %d does not end with [DONE]: %q", i, tail(string(o.body), 300))
			continue
		}
		var frame struct {
			Error *struct {
				Code       string `json:"code"`
				Status     int    `json:"status"`
				RetryAfter int    `json:"retry_after"`
				Message    string `json:"message"`
			} `json:"error"`
		}
		last := data[len(data)-2]
		if json.Unmarshal([]byte(last), &frame) != nil || frame.Error == nil || frame.Error.Code != "worker_lost" ||
			frame.Error.Status != 503 || frame.Error.RetryAfter < 1 || !strings.Contains(frame.Error.Message, "linkfault") {
			r.fail("outage stream %d ends with %s, want the worker_lost 503 frame naming the worker with retry_after", i, last)
			continue
		}
		if strings.Count(string(o.body), "data: [DONE]") != 1 {
			r.fail("outage stream %d has more than one [DONE]", i)
			continue
		}
		framed++
	}
	r.figure("outage (phase 2)", "%d streams, %d links cut for %v (grace %v): %d ended with worker_lost 503 + [DONE] within %v, %d hung",
		n, cut, outage, grace, framed, ended.Round(100*time.Millisecond), hung)

	// The worker comes back on a new session and serves again.
	if err := g.waitWorker(ctx, "linkfault", w, 60*time.Second); err != nil {
		r.fail("worker did not come back after the outage: %v", err)
		return nil
	}
	k := len(want)
	var ok atomic.Int64
	for i := range k {
		wg.Go(func() {
			st, body, err := postStream(ctx, g, prompt(i), 60*time.Second)
			if err != nil || st != 200 {
				r.fail("after the outage, stream %d: status %d, err %v, %q", i, st, err, tail(string(body), 300))
				return
			}
			if msg := parseSSE(body).compare(want[i]); msg != "" {
				r.fail("after the outage, stream %d: %s", i, msg)
				return
			}
			ok.Add(1)
		})
	}
	wg.Wait()
	r.figure("after the outage", "worker back; %d/%d streams byte-exact", ok.Load(), k)
	return nil
}

// postStream sends a streaming chat completion and reads it whole,
// within limit.
func postStream(ctx context.Context, g *gateway, prompt string, limit time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	return g.do(ctx, "POST", "/v1/chat/completions", chatBody("sim-chat", prompt, true))
}

// sseStream is a chat stream taken apart: its data payloads, in order.
type sseStream struct {
	data   []string
	deltas []string // each chunk's content, "" for chunks without
	ids    map[string]int
	usage  int // completion_tokens of the usage chunk, -1 without one
	worker bool
	errMsg string
}

func parseSSE(body []byte) *sseStream {
	s := &sseStream{data: sseData(body), ids: map[string]int{}, usage: -1}
	for _, d := range s.data {
		if d == "[DONE]" {
			continue
		}
		var c struct {
			ID      string `json:"id"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Svc *struct {
				Worker    json.RawMessage `json:"worker"`
				RequestID string          `json:"request_id"`
			} `json:"svc"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			s.errMsg = "unparsable chunk " + d
			s.deltas = append(s.deltas, "")
			continue
		}
		if len(c.Error) > 0 && string(c.Error) != "null" {
			s.errMsg = "error frame " + d
		}
		var sb strings.Builder
		for _, ch := range c.Choices {
			sb.WriteString(ch.Delta.Content)
		}
		s.deltas = append(s.deltas, sb.String())
		if c.ID != "" {
			s.ids[c.ID]++
		}
		if c.Usage != nil {
			s.usage = c.Usage.CompletionTokens
		}
		if c.Svc != nil && len(c.Svc.Worker) > 0 && c.Svc.RequestID != "" {
			s.worker = true
		}
	}
	return s
}

// shape is what is wrong with a stream's form per the spec, or "".
func (s *sseStream) shape() string {
	switch {
	case s.errMsg != "":
		return s.errMsg
	case len(s.data) < 3 || s.data[len(s.data)-1] != "[DONE]":
		return "does not end with [DONE]"
	case slices.Index(s.data, "[DONE]") != len(s.data)-1:
		return "[DONE] before the end"
	case s.usage < 0:
		return "no usage chunk"
	case !s.worker || !strings.Contains(s.data[len(s.data)-2], `"worker"`):
		return "the last chunk does not carry svc.worker and svc.request_id"
	case len(s.ids) > 1:
		return fmt.Sprintf("chunks of %d different completions", len(s.ids))
	}
	return ""
}

func (s *sseStream) clean() bool { return s.shape() == "" }

func (s *sseStream) content() string { return strings.Join(s.deltas, "") }

// compare says how s differs from the reference want, or "".
func (s *sseStream) compare(want *sseStream) string {
	if msg := s.shape(); msg != "" {
		return msg
	}
	if gc, wc := s.content(), want.content(); gc != wc {
		i := 0
		for i < min(len(gc), len(wc)) && gc[i] == wc[i] {
			i++
		}
		return fmt.Sprintf("content differs from the reference at byte %d: got %d bytes, want %d", i, len(gc), len(wc))
	}
	if len(s.deltas) != len(want.deltas) {
		return fmt.Sprintf("%d chunks, want %d", len(s.deltas), len(want.deltas))
	}
	if i := slices.Compare(s.deltas, want.deltas); i != 0 {
		return "chunk boundaries differ from the reference"
	}
	if s.usage != want.usage {
		return fmt.Sprintf("usage says %d completion tokens, want %d", s.usage, want.usage)
	}
	return ""
}

// transientDrops counts the worker's disconnected events with transient
// true: the link drops it resumed from.
func (g *gateway) transientDrops(ctx context.Context, name string) (int, error) {
	n := 0
	for offset := 0; ; offset += 1000 {
		st, body, err := g.do(ctx, "GET", fmt.Sprintf("/api/v1/workers/events?event_type=disconnected&limit=1000&offset=%d", offset), nil)
		if err != nil {
			return 0, err
		}
		if st != 200 {
			return 0, fmt.Errorf("worker events: status %d %s", st, body)
		}
		var evs []struct {
			Name      string `json:"worker_name"`
			Transient bool   `json:"transient"`
		}
		if err := json.Unmarshal(body, &evs); err != nil {
			return 0, fmt.Errorf("worker events: %w", err)
		}
		for _, e := range evs {
			if e.Name == name && e.Transient {
				n++
			}
		}
		if len(evs) < 1000 {
			return n, nil
		}
	}
}

func (g *gateway) waitWorkerStatus(ctx context.Context, name, want string, timeout time.Duration) error {
	return g.poll(ctx, timeout, func() (bool, string) {
		st, _, err := g.workerState(ctx, name)
		return err == nil && st == want, fmt.Sprintf("worker %s is %q (%v), want %s", name, st, err, want)
	})
}

// waitIdle waits until the worker reports no running request: slots of
// streams that ended under faults were all given back.
func (g *gateway) waitIdle(ctx context.Context, name string, timeout time.Duration) error {
	return g.poll(ctx, timeout, func() (bool, string) {
		st, n, err := g.workerState(ctx, name)
		return err == nil && n == 0, fmt.Sprintf("worker %s is %q with %d active tasks (%v) after every stream ended", name, st, n, err)
	})
}

func (g *gateway) poll(ctx context.Context, timeout time.Duration, ok func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		good, why := ok()
		if good {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New(why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// faultProxy relays the worker's link to the gateway and breaks it on
// demand: cuts, holds of either direction, and stale connections whose
// held traffic arrives after the new connection's.
type faultProxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	links    map[*proxyLink]struct{}
	down     bool // refuse new connections: the network is out
	accepted int
	wg       sync.WaitGroup
}

// proxyLink is one relayed connection: worker side, gateway side, and a
// gate for each direction.
type proxyLink struct {
	worker, gw net.Conn
	up, down   *gate // worker to gateway, gateway to worker
	dead       chan struct{}
	once       sync.Once
}

// kill closes both sides and drops whatever the link holds.
func (l *proxyLink) kill() {
	l.once.Do(func() {
		close(l.dead)
		_ = l.worker.Close()
		_ = l.gw.Close()
	})
}

// gate holds the traffic of one direction while it is shut.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while traffic flows
}

func newGate() *gate {
	c := make(chan struct{})
	close(c)
	return &gate{open: c}
}

func (g *gate) hold() {
	g.mu.Lock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
	g.mu.Unlock()
}

// wait blocks while the gate is shut; false means the link died.
func (g *gate) wait(dead <-chan struct{}) bool {
	g.mu.Lock()
	c := g.open
	g.mu.Unlock()
	select {
	case <-c:
		return true
	case <-dead:
		return false
	}
}

func newFaultProxy(target string) (*faultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &faultProxy{ln: ln, target: target, links: map[*proxyLink]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *faultProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *faultProxy) close() {
	_ = p.ln.Close()
	p.cut()
	p.wg.Wait()
}

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &proxyLink{worker: c, gw: up, up: newGate(), down: newGate(), dead: make(chan struct{})}
		p.mu.Lock()
		p.links[l] = struct{}{}
		p.accepted++
		p.mu.Unlock()
		var pumps sync.WaitGroup
		pumps.Go(func() { pump(l.gw, l.worker, l.up, l.dead) })
		pumps.Go(func() { pump(l.worker, l.gw, l.down, l.dead) })
		p.wg.Go(func() {
			pumps.Wait()
			l.kill()
			p.mu.Lock()
			delete(p.links, l)
			p.mu.Unlock()
		})
	}
}

// pump copies src to dst, waiting at the gate before each write and
// before passing on the end: bytes read while the gate is shut, and the
// close behind them, arrive late, when it opens, even if src has closed
// meanwhile.
func pump(dst, src net.Conn, g *gate, dead <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !g.wait(dead) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			if g.wait(dead) {
				_ = dst.Close()
			}
			return
		}
	}
}

func (p *faultProxy) current() []*proxyLink {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*proxyLink, 0, len(p.links))
	for l := range p.links {
		out = append(out, l)
	}
	return out
}

func (p *faultProxy) setDown(on bool) {
	p.mu.Lock()
	p.down = on
	p.mu.Unlock()
}

// cut closes every link both ways and reports how many there were.
func (p *faultProxy) cut() int {
	ls := p.current()
	for _, l := range ls {
		l.kill()
	}
	return len(ls)
}

func (p *faultProxy) acceptedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// pauser waits d and reports true, or false as soon as done closes or ctx
// ends.
func pauser(ctx context.Context, done <-chan struct{}) func(d time.Duration) bool {
	return func(d time.Duration) bool {
		select {
		case <-done:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
}

// holdFor shuts the links' gates for d, measured by pause: dirs 0 holds
// what goes up (to the gateway), 1 what comes down, 2 both.
func holdFor(ls []*proxyLink, dirs int, d time.Duration, pause func(time.Duration) bool) {
	for _, l := range ls {
		if dirs != 1 {
			l.up.hold()
		}
		if dirs != 0 {
			l.down.hold()
		}
	}
	pause(d)
	for _, l := range ls {
		l.up.release()
		l.down.release()
	}
}

// faultCounts are the faults that landed while streams ran.
type faultCounts struct {
	cuts, halfCuts, handshake, delays, unequal, stale int
}

// inject breaks the link over and over, at most gap apart, until done
// closes; holds last up to maxHold. A fault counts when it touched a link
// while streams were running.
func (p *faultProxy) inject(ctx context.Context, done <-chan struct{}, active *atomic.Int64, rng *rand.Rand, maxHold, gap time.Duration) faultCounts {
	var c faultCounts
	pause := pauser(ctx, done)
	hold := func() time.Duration {
		return 100*time.Millisecond + time.Duration(rng.Int64N(int64(maxHold-100*time.Millisecond)))
	}
	// The first faults wait for the streams to be under way.
	if !pause(time.Second) {
		return c
	}
	for pause(50*time.Millisecond + time.Duration(rng.Int64N(int64(gap)))) {
		ls := p.current()
		if len(ls) == 0 {
			continue
		}
		landed := active.Load() > 0
		count := func(n *int) {
			if landed {
				*n++
			}
		}
		newLink := func(before int) {
			for wait := 0; wait < 150 && p.acceptedCount() == before; wait++ {
				pause(20 * time.Millisecond)
			}
		}
		switch k := rng.IntN(100); {
		case k < 25: // both ways at once
			for _, l := range ls {
				l.kill()
			}
			count(&c.cuts)
		case k < 35: // again as the worker reconnects, mid-handshake
			before := p.acceptedCount()
			for _, l := range ls {
				l.kill()
			}
			newLink(before)
			pause(time.Duration(rng.IntN(40)) * time.Millisecond)
			for _, l := range p.current() {
				l.kill()
			}
			count(&c.handshake)
		case k < 45: // the gateway's side first; the worker hears late
			for _, l := range ls {
				l.up.hold()
				l.down.hold()
				_ = l.gw.Close()
			}
			pause(time.Duration(50+rng.IntN(1000)) * time.Millisecond)
			for _, l := range ls {
				l.kill()
			}
			count(&c.halfCuts)
		case k < 68: // one direction, or both for the same time
			holdFor(ls, rng.IntN(3), hold(), pause)
			count(&c.delays)
		case k < 85: // both directions, released at different times
			first, second := hold(), hold()
			for _, l := range ls {
				l.up.hold()
				l.down.hold()
			}
			gates := func(up bool) {
				for _, l := range ls {
					if up {
						l.up.release()
					} else {
						l.down.release()
					}
				}
			}
			upFirst := rng.IntN(2) == 0
			pause(min(first, second))
			gates(upFirst)
			pause(max(first, second) - min(first, second))
			gates(!upFirst)
			count(&c.unequal)
		default: // stale connection: the worker reconnects while its old
			// connection's held traffic is still on the way to the gateway
			before := p.acceptedCount()
			for _, l := range ls {
				l.up.hold()
				l.down.hold()
				_ = l.worker.Close()
			}
			newLink(before)
			pause(time.Duration(rng.IntN(400)) * time.Millisecond)
			for _, l := range ls {
				l.up.release()
				l.down.release()
			}
			count(&c.stale)
		}
	}
	// Nothing stays held once the streams are done.
	for _, l := range p.current() {
		l.up.release()
		l.down.release()
	}
	return c
}

// concurrencyLimit is the adaptive concurrency limit the gateway reports
// for model on the worker named name (svc_worker_concurrency_limit).
func (g *gateway) concurrencyLimit(ctx context.Context, name, model string) (int, error) {
	lines, err := g.metricLines(ctx)
	if err != nil {
		return 0, err
	}
	for _, line := range lines {
		if !strings.HasPrefix(line, "svc_worker_concurrency_limit{") ||
			!strings.Contains(line, `worker_name="`+name+`"`) || !strings.Contains(line, `model="`+model+`"`) {
			continue
		}
		_, v, _ := strings.Cut(line, "} ")
		return strconv.Atoi(strings.TrimSpace(v))
	}
	return 0, fmt.Errorf("metrics: no limit for %s on %s", model, name)
}
