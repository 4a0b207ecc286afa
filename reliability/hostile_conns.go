package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// pipelining writes many requests on one connection before reading any
// answer: every one is answered, in order, none lost.
func (hc *hostile) pipelining(ctx context.Context) {
	const cat = "pipelined requests"
	conns, perConn := scaled(hc.g.h, 4, 20), 50
	auth := "Authorization: Bearer " + hc.g.Key + "\r\n"
	var wg sync.WaitGroup
	for c := range conns {
		wg.Go(func() {
			var raw bytes.Buffer
			want := make([]int, perConn)
			for i := range perConn {
				switch i % 5 {
				case 0:
					raw.WriteString("GET /healthz HTTP/1.1\r\nHost: hostile\r\n\r\n")
					want[i] = 200
				case 1:
					fmt.Fprintf(&raw, "GET /api/v1/pipeline-%d-%d HTTP/1.1\r\nHost: hostile\r\n%s\r\n", c, i, auth)
					want[i] = 404
				case 2:
					fmt.Fprintf(&raw, "POST /v1/chat/completions HTTP/1.1\r\nHost: hostile\r\n%sContent-Type: application/json\r\nContent-Length: 1\r\n\r\n{", auth)
					want[i] = 400
				case 3:
					body := chatJSON("")
					fmt.Fprintf(&raw, "POST /v1/chat/completions HTTP/1.1\r\nHost: hostile\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", auth, len(body), body)
					want[i] = 200
				case 4:
					raw.WriteString("GET /v1/models HTTP/1.1\r\nHost: hostile\r\n\r\n")
					want[i] = 401
				}
				hc.count(cat)
			}
			as, err := hc.exchangeN(ctx, "POST", &raw, perConn, 60*time.Second)
			if ctx.Err() != nil {
				return
			}
			if len(as) < perConn {
				hc.r.fail("%s: connection %d: %d of %d answers, then %v", cat, c, len(as), perConn, err)
			}
			for i, a := range as {
				hc.judge(cat, fmt.Sprintf("connection %d request %d", c, i), a, []int{want[i]})
				if want[i] == 404 && !bytes.Contains(a.body, fmt.Appendf(nil, "pipeline-%d-%d", c, i)) {
					hc.r.fail("%s: connection %d: answer %d is not its request's: %.200s", cat, c, i, a.body)
				}
			}
		})
	}
	wg.Wait()
}

// filler is n bytes of 'a', made as they are read.
type filler struct{ left int64 }

func (f *filler) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), f.left))
	for i := range n {
		p[i] = 'a'
	}
	f.left -= int64(n)
	return n, nil
}

// chunker frames n bytes of filler as 64 KB chunks.
type chunker struct {
	left int64
	buf  bytes.Buffer
	done bool
}

func (c *chunker) Read(p []byte) (int, error) {
	if c.buf.Len() == 0 {
		switch {
		case c.left > 0:
			n := min(c.left, 64<<10)
			fmt.Fprintf(&c.buf, "%x\r\n", n)
			c.buf.Write(bytes.Repeat([]byte{'a'}, int(n)))
			c.buf.WriteString("\r\n")
			c.left -= n
		case !c.done:
			c.buf.WriteString("0\r\n\r\n")
			c.done = true
		default:
			return 0, io.EOF
		}
	}
	return c.buf.Read(p)
}

// bigBodies streams bodies of 50 and 500 MB, with Content-Length and
// chunked, to routes with and without a limit of their own, while the
// gateway's peak RSS is sampled: it must stay under rssBound, and every
// body over the limit is a 413.
func (hc *hostile) bigBodies(ctx context.Context) {
	const cat = "bodies of 50 and 500 MB"
	sctx, stop := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for sctx.Err() == nil {
			hc.sample()
			select {
			case <-sctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	defer sampler.Wait()
	defer stop()

	var bigs []big
	json := "Content-Type: application/json\r\n"
	mp := "Content-Type: multipart/form-data; boundary=b\r\n"
	for _, size := range []int64{50 << 20, 500 << 20} {
		for _, rt := range []struct{ method, path, ct string }{
			{"POST", "/v1/chat/completions", json},
			{"POST", "/api/v1/embeddings", json},
			{"POST", "/v1/audio/transcriptions", mp},
			{"GET", "/v1/models", ""},
			{"POST", "/api/v1/no-such-route", json},
			{"PATCH", "/api/v1/console/orgs/default", json},
		} {
			for _, k := range []string{hc.g.Key, ""} {
				allowed := entityTooLarge
				switch {
				case k == "":
					allowed = []int{401, 413}
				case strings.HasPrefix(rt.path, "/api/v1/console/"):
					// A key may not call it at all, which it is told
					// before it is told to shrink the body.
					allowed = []int{403}
				}
				auth := ""
				if k != "" {
					auth = "Authorization: Bearer " + k + "\r\n"
				}
				start := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: hostile\r\n%s%s", rt.method, rt.path, auth, rt.ct)
				bigs = append(bigs,
					big{fmt.Sprintf("%s %s, %d MB with Content-Length, key %v", rt.method, rt.path, size>>20, k != ""),
						start + fmt.Sprintf("Content-Length: %d\r\n\r\n", size), func() io.Reader { return &filler{size} }, allowed},
					big{fmt.Sprintf("%s %s, %d MB chunked, key %v", rt.method, rt.path, size>>20, k != ""),
						start + "Transfer-Encoding: chunked\r\n\r\n", func() io.Reader { return &chunker{left: size} }, allowed})
			}
		}
		path := "/v1/chat/completions"
		start := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: hostile\r\nAuthorization: Bearer %s\r\n%s", path, hc.g.Key, json)
		bigs = append(bigs,
			big{fmt.Sprintf("POST %s, one chunk of %d MB", path, size>>20),
				start + fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n", size), func() io.Reader { return &filler{size} }, entityTooLarge},
			big{fmt.Sprintf("POST %s, %d MB with Expect: 100-continue", path, size>>20),
				start + fmt.Sprintf("Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", size), func() io.Reader { return &filler{0} }, entityTooLarge})
	}
	// Without a key first, then with one; the 50 MB bodies before the
	// 500 MB ones, with the peak read after each: a caller without a key
	// may cost no more than anonymousGrowth, and a 500 MB body no more
	// than a 50 MB one.
	type batch struct {
		keyed bool
		size  int64
	}
	batches := map[batch][]big{}
	for _, b := range bigs {
		k := batch{keyed: !strings.HasSuffix(b.label, "key false"), size: 50 << 20}
		if strings.Contains(b.label, "500 MB") {
			k.size = 500 << 20
		}
		batches[k] = append(batches[k], b)
	}
	hc.sample()
	before := hc.peakRSS()
	hc.r.figure("gateway peak RSS before the large bodies", "%.1f MB", mb(before))
	for _, k := range []batch{{false, 50 << 20}, {false, 500 << 20}, {true, 50 << 20}, {true, 500 << 20}} {
		hc.bigBatch(ctx, cat, batches[k])
		hc.sample()
		who := "without a key"
		if k.keyed {
			who = "with a key"
		}
		peak := hc.peakRSS()
		hc.r.figure(fmt.Sprintf("gateway peak RSS after the %d MB bodies %s", k.size>>20, who), "%.1f MB", mb(peak))
		if !k.keyed && peak-before > anonymousGrowth {
			hc.r.fail("bodies sent without a key grew the gateway's peak RSS by %.1f MB, over the %d MB bound",
				mb(peak-before), anonymousGrowth>>20)
		}
	}
}

// anonymousGrowth bounds what callers without a valid key can add to the
// gateway's peak memory: they may send no more than 1 MB of body.
const anonymousGrowth = 32 << 20

type big struct {
	label   string
	head    string
	body    func() io.Reader
	allowed []int
}

// bigBatch sends bigs two at a time.
func (hc *hostile) bigBatch(ctx context.Context, cat string, bigs []big) {
	work := make(chan big)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for b := range work {
				hc.count(cat)
				method, _, _ := strings.Cut(b.head, " ")
				a, err := hc.exchange(ctx, method, io.MultiReader(strings.NewReader(b.head), b.body()))
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					hc.r.fail("%s: %s: no answer: %v", cat, b.label, err)
					continue
				}
				hc.judge(cat, b.label, a, b.allowed)
			}
		})
	}
	for _, b := range bigs {
		if ctx.Err() != nil {
			break
		}
		work <- b
	}
	close(work)
	wg.Wait()
}

// connections holds thousands of idle connections and dribbles slowloris
// requests a byte at a time while a legitimate client sends requests:
// every one of them must be answered, promptly.
func (hc *hostile) connections(ctx context.Context) {
	idle := scaled(hc.g.h, 300, 4000)
	slow := scaled(hc.g.h, 40, 200)
	hold := scaled(hc.g.h, 8*time.Second, 40*time.Second)
	hc.r.figure("idle connections held", "%d", idle)
	hc.r.figure("slowloris connections", "%d (headers or body a byte every 500 ms, for %v)", slow, hold)

	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var conns []net.Conn
	var mu sync.Mutex
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var dialFail atomic.Int64
	var firstErr atomic.Value
	dial := func() net.Conn {
		c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(pctx, "tcp", hc.g.Addr)
		if err != nil {
			if dialFail.Add(1) == 1 {
				firstErr.Store(err.Error())
			}
			return nil
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return c
	}
	// Idle connections: half never send a byte, half are keep-alive
	// connections left open after one answer.
	var opening sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range idle {
		sem <- struct{}{}
		opening.Go(func() {
			defer func() { <-sem }()
			hc.count("idle connections")
			c := dial()
			if c == nil || i%2 == 0 {
				return
			}
			_ = c.SetDeadline(time.Now().Add(hostileTimeout))
			_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: hostile\r\n\r\n")
			buf := make([]byte, 512)
			if _, err := c.Read(buf); err != nil {
				hc.r.fail("idle connections: a keep-alive request got no answer: %v", err)
			}
			_ = c.SetDeadline(time.Time{})
		})
	}
	opening.Wait()

	// Slowloris: headers, or a body, a byte at a time.
	var dribblers sync.WaitGroup
	for i := range slow {
		dribblers.Go(func() {
			hc.count("slowloris connections")
			c := dial()
			if c == nil {
				return
			}
			body := chatJSON("")
			head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: hostile\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", hc.g.Key, len(body))
			slowPart := head + body
			if i%2 == 1 {
				_, _ = io.WriteString(c, head)
				slowPart = body
			}
			for j := 0; j < len(slowPart) && pctx.Err() == nil; j++ {
				if _, err := c.Write([]byte{slowPart[j]}); err != nil {
					return // the gateway closed it: allowed
				}
				select {
				case <-pctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
		})
	}

	// The legitimate client, on its own connections.
	var lat []time.Duration
	deadline := time.Now().Add(hold)
	legit := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: hostileTimeout}
	defer legit.CloseIdleConnections()
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		hc.count("legitimate requests under load")
		path, body := "/v1/models", []byte(nil)
		if i%2 == 1 {
			path, body = "/v1/chat/completions", chatBody("sim-chat", "legitimate", false)
		}
		method := map[bool]string{true: "POST", false: "GET"}[body != nil]
		req, _ := http.NewRequestWithContext(ctx, method, hc.g.URL+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+hc.g.Key)
		start := time.Now()
		resp, err := legit.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		d := time.Since(start)
		lat = append(lat, d)
		switch {
		case err != nil:
			hc.r.fail("a legitimate %s %s under slowloris and idle load failed: %v", method, path, err)
		case resp.StatusCode != 200:
			hc.r.fail("a legitimate %s %s under slowloris and idle load = %d", method, path, resp.StatusCode)
		case d > legitBound:
			hc.r.fail("a legitimate %s %s under slowloris and idle load took %v (bound %v)", method, path, d.Round(time.Millisecond), legitBound)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	hc.sample()
	now, _ := rss(hc.g.Pid())
	hc.r.figure("gateway RSS holding the idle and slowloris connections", "%.1f MB", mb(now))
	if n, err := hc.g.metric(ctx, "go_goroutines"); err == nil {
		hc.r.figure("gateway goroutines holding them", "%.0f", n)
	}
	var open, answered, closed int
	mu.Lock()
	for _, c := range conns {
		// A connection the gateway closed reads EOF at once, one it
		// answered (a dribbled body completed) reads the answer, and one
		// still waiting times out.
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		n, err := c.Read(make([]byte, 1))
		switch {
		case n > 0:
			answered++
		case isTimeout(err):
			open++
		default:
			closed++
		}
	}
	mu.Unlock()
	hc.r.figure("idle and slowloris connections at the end", "%d open, %d answered, %d closed by the gateway", open, answered, closed)
	stop()
	dribblers.Wait()
	if n := dialFail.Load(); n > 0 {
		hc.r.fail("%d of %d connections could not be opened: %v", n, idle+slow, firstErr.Load())
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(100 * time.Microsecond) }
		hc.r.figure("legitimate client latency under the load", "p50 %v, p99 %v, max %v over %d requests (bound %v)", q(0.5), q(0.99), lat[len(lat)-1].Round(100*time.Microsecond), len(lat), legitBound)
	}
}

// legitBound is how long a legitimate request may take while the gateway
// holds the slowloris and idle connections: generous, for a shared
// machine; a gateway starved by them takes until a timeout.
const legitBound = 5 * time.Second

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
