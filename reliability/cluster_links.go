package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// clusterLinks sends streams to a replica that is not the organisation's
// home, which forwards each to the home as a stream on its replica link,
// across a proxy that holds, cuts and leaves stale the link's
// connection. Holds (delays, one direction or both, released at
// different times) must change no byte: every stream arrives as its
// reference does. Cuts must change none either, as the link-faults check
// asks of worker links: the front dials again at once and the home
// resumes the session, every stream where it was. Never a hang, a
// garbled or repeated byte, a request run twice (one usage row each, no
// more), or a slot left held at the home. A link cut while idle, between
// bursts, must cost no request.
func clusterLinks(ctx context.Context, h *rig, r *result) error {
	var proxy *faultProxy
	defer func() {
		if proxy != nil {
			proxy.close()
		}
	}()
	c, err := startCluster(ctx, h, r, "cluster-links", clusterSpec{replicas: 2, ttl: 5 * time.Second,
		advertise: func(i int, addr string) (string, error) {
			if i != 0 {
				return "http://" + addr, nil
			}
			// The other replica reaches the home only across the proxy.
			p, err := newFaultProxy(addr)
			proxy = p
			if err != nil {
				return "", err
			}
			return p.URL(), nil
		}})
	if c == nil || err != nil {
		return err
	}
	defer c.close()
	home, front := c.replicas[0], c.replicas[1]
	// The worker dials the home directly: only the replicas' link crosses
	// the proxy.
	w, err := harness.StartWorker(h.workerSpec("links-box", home.URL, c.tokenFile, "--engine", "sim=tps=40,ttft=0", "--max-concurrent", "128"))
	if err != nil {
		return err
	}
	c.workers = append(c.workers, w)
	if err := c.waitWorkers(ctx, 0, []string{"links-box"}, 30*time.Second); err != nil {
		return err
	}
	homeAPI := &gateway{Gateway: home.Gateway, h: h, Key: c.api.Key}
	frontAPI := &gateway{Gateway: front.Gateway, h: h, Key: c.api.Key}

	streams := scaled(h, 40, 200)
	tokens := scaled(h, 40, 120)
	prompt := func(i int) string {
		return fmt.Sprintf("cluster link stream %d: a story\nsim: tokens=%d", i, tokens)
	}
	// References, straight from the home.
	want := make([]*sseStream, streams)
	var refErr atomic.Value
	var wg sync.WaitGroup
	for i := range want {
		wg.Go(func() {
			st, body, err := postStream(ctx, homeAPI, prompt(i), 60*time.Second)
			s := parseSSE(body)
			if err != nil || st != 200 || !s.clean() {
				refErr.CompareAndSwap(nil, fmt.Sprintf("reference stream %d: status %d, err %v, end %q", i, st, err, tail(string(body), 300)))
			}
			want[i] = s
		})
	}
	wg.Wait()
	if e := refErr.Load(); e != nil {
		return errors.New(e.(string))
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	spread := scaled(h, 4*time.Second, 8*time.Second)

	// run sends every stream to the front over spread while inject
	// breaks the link, and judges each answer.
	type outcome struct{ exact int }
	// sent counts the requests made, each of which must have one row.
	sent := streams
	run := func(phase string, cuts bool) (outcome, faultCounts) {
		sent += streams
		var o outcome
		var mu sync.Mutex
		var active atomic.Int64
		done := make(chan struct{})
		var sw sync.WaitGroup
		for i := range streams {
			sw.Go(func() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(spread * time.Duration(i) / time.Duration(streams)):
				}
				active.Add(1)
				st, body, err := postStream(ctx, frontAPI, prompt(i), 90*time.Second)
				active.Add(-1)
				got := parseSSE(body)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					r.fail("%s: stream %d: %v after %d bytes (a hang or a cut the front did not end)", phase, i, err, len(body))
				case st == 200 && got.compare(want[i]) == "":
					o.exact++
				case st == 200 && endedLost(got, want[i]):
					r.fail("%s: stream %d ended as lost after the reference's beginning: the link did not resume", phase, i)
				default:
					r.fail("%s: stream %d: status %d: %s; ends %q", phase, i, st, got.compare(want[i]), tail(string(body), 300))
				}
			})
		}
		go func() { sw.Wait(); close(done) }()
		counts := injectPeer(ctx, proxy, done, &active, rng, cuts)
		<-done
		return o, counts
	}

	holds, hc := run("holds", false)
	r.figure("holds", "%d streams of %d tokens through the front: %d byte for byte as the reference; %d delays, %d unequal holds landed",
		streams, tokens, holds.exact, hc.delays, hc.unequal)
	if hc.delays+hc.unequal < 2 {
		r.fail("only %d holds landed during the streams", hc.delays+hc.unequal)
	}
	cut, cc := run("cuts", true)
	r.figure("cuts", "%d streams: %d byte for byte as the reference, the link resumed after each of %d cuts",
		streams, cut.exact, cc.cuts)
	if cc.cuts < 2 {
		r.fail("only %d cuts landed during the streams", cc.cuts)
	}
	if err := homeAPI.poll(ctx, 30*time.Second, func() (bool, string) {
		st, body, err := homeAPI.do(ctx, "GET", "/api/v1/usage/inflight", nil)
		return err == nil && st == 200 && strings.TrimSpace(string(body)) == "[]", string(body)
	}); err != nil {
		r.fail("the home still holds requests the cuts ended: %v", err)
	}

	// Stale pooled connections: cut while idle, between two bursts.
	chat := chatBody("sim-chat", "between the bursts\nsim: tokens=4", false)
	stale := 0
	for burst := range scaled(h, 5, 20) {
		sent += 8
		var bw sync.WaitGroup
		var failed atomic.Int64
		for range 8 {
			bw.Go(func() {
				if st, body, err := frontAPI.do(ctx, "POST", "/v1/chat/completions", chat); err != nil || st != 200 {
					failed.Add(1)
					r.fail("stale connections: burst %d: %d %v %.200s", burst, st, err, body)
				}
			})
		}
		bw.Wait()
		stale += proxy.cut()
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
	}
	r.figure("stale connections", "%d idle connections between the replicas cut between bursts of 8 requests; every request of the next burst served", stale)
	// Each request ran once: one row each, none twice.
	if _, err := c.settle(ctx); err != nil {
		return err
	}
	rows, err := c.usageRows(ctx)
	if err != nil {
		return err
	}
	twice := 0
	for _, rs := range rows {
		if len(rs) > 1 {
			twice++
		}
	}
	if len(rows) != sent || twice > 0 {
		r.fail("%d requests made %d usage rows, %d of them for a request run twice", sent, len(rows), twice)
	}
	r.figure("rows", "%d requests, %d usage rows, none twice", sent, len(rows))
	c.crashes(r)
	return nil
}

// endedLost reports whether got is the reference's beginning ended as a
// stream whose worker was lost: the error frame, then [DONE].
func endedLost(got, want *sseStream) bool {
	n := len(got.data)
	if n < 2 || got.data[n-1] != "[DONE]" || !strings.Contains(got.data[n-2], "worker_lost") {
		return false
	}
	return strings.HasPrefix(want.content(), got.content())
}

// injectPeer holds, and with cuts also cuts, the replicas' connections
// until done closes.
func injectPeer(ctx context.Context, p *faultProxy, done <-chan struct{}, active *atomic.Int64, rng *rand.Rand, cuts bool) faultCounts {
	var c faultCounts
	pause := pauser(ctx, done)
	if !pause(500 * time.Millisecond) {
		return c
	}
	turn := 0
	for pause(time.Duration(100+rng.IntN(400)) * time.Millisecond) {
		ls := p.current()
		if len(ls) == 0 || active.Load() == 0 {
			continue
		}
		turn++
		switch k := rng.IntN(100); {
		case cuts && turn%2 == 1:
			// Every other fault: one of the connections and some of the
			// others, both ways.
			first := rng.IntN(len(ls))
			for i, l := range ls {
				if i == first || rng.IntN(2) == 0 {
					l.kill()
				}
			}
			c.cuts++
		case k < 50:
			holdFor(ls, rng.IntN(3), time.Duration(100+rng.IntN(1000))*time.Millisecond, pause)
			c.delays++
		default:
			for _, l := range ls {
				l.up.hold()
				l.down.hold()
			}
			pause(time.Duration(100+rng.IntN(500)) * time.Millisecond)
			for _, l := range ls {
				l.down.release()
			}
			pause(time.Duration(100+rng.IntN(500)) * time.Millisecond)
			for _, l := range ls {
				l.up.release()
			}
			c.unequal++
		}
	}
	for _, l := range p.current() {
		l.up.release()
		l.down.release()
	}
	return c
}
