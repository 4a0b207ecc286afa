package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
	"github.com/svc-dev/svc/internal/usage"
)

// stalledClients holds every slot of a worker with streaming clients that
// never read a byte, as anyone with a key could, and judges that each is
// cut off within the stall timeout (plus slack), that its slot is freed
// at once and the worker serves a full set of new streams afterwards,
// that each row is a 499 billing no more text than the client had
// received, and that a large non-streaming answer left unread is cut off
// too. Meanwhile a client on a second worker reads its stream slowly and
// must get all of it: slowness is not a stall.
func stalledClients(ctx context.Context, h *rig, r *result) error {
	slots := scaled(h, 8, 40)
	stall := scaled(h, 2*time.Second, 30*time.Second)
	// A stalled stream fills the socket buffers within milliseconds (the
	// simulator does not pace its tokens here); the rest is slack for a
	// loaded machine.
	bound := stall + 3*time.Second
	g, err := h.startGateway(ctx, "stalled", "--stall-timeout", stall.String())
	if err != nil {
		return err
	}
	defer func() { _ = g.Stop(syscall.SIGTERM, stopGrace) }()
	const held, slow = "stalled-worker", "slow-reader-worker"
	w, err := h.startWorker(ctx, g, held, g.URL, "--engine", "sim=tps=0,ttft=0", "--max-concurrent", strconv.Itoa(slots))
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop(syscall.SIGTERM, stopGrace) }()
	w2, err := h.startWorker(ctx, g, slow, g.URL, "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "1")
	if err != nil {
		return err
	}
	defer func() { _ = w2.Stop(syscall.SIGTERM, stopGrace) }()
	heldID, err := workerID(ctx, g, held)
	if err != nil {
		return err
	}
	slowID, err := workerID(ctx, g, slow)
	if err != nil {
		return err
	}
	r.figure("stalled streams", "%d on a worker with %d slots, --stall-timeout %s", slots, slots, stall)

	var readers sync.WaitGroup
	// The slow reader frees a loopback segment's worth of its buffer (64
	// KB, before its kernel reopens the window) in well under the stall
	// timeout, but reads slower than the stream is made throughout.
	readers.Go(func() { slowReader(ctx, g, slowID, scaled(h, 50*time.Millisecond, 250*time.Millisecond), r) })

	// Far more than any socket buffer holds: a client that reads nothing
	// can never let one of these finish.
	body := chatBody("sim-long", "go on\nsim: tokens=30000", true)
	start := time.Now()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range slots {
		c, err := stalledRequest(ctx, g, "/v1/chat/completions", heldID, body)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	// What the relay had written for them shortly before the cut-off.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(stall / 2):
	}
	relayed := 0
	if st, b, err := g.do(ctx, "GET", "/api/v1/usage/inflight", nil); err == nil && st == 200 {
		var list []struct {
			Tokens *int `json:"tokens_generated"`
		}
		_ = json.Unmarshal(b, &list)
		for _, e := range list {
			if e.Tokens != nil {
				relayed += *e.Tokens
			}
		}
	}

	// Every slot frees within the bound.
	var freed time.Duration
	if err := harness.Poll(ctx, 50*time.Millisecond, func() bool {
		_, active, err := g.workerState(ctx, held)
		if err == nil && active == 0 {
			freed = time.Since(start)
			return true
		}
		return time.Since(start) > bound+30*time.Second
	}); err != nil {
		return err
	}
	if freed == 0 {
		r.fail("the %d stalled streams still held slots %s after they were sent (bound %s)", slots, time.Since(start).Round(time.Second), bound)
		return nil
	}
	if freed > bound {
		r.fail("the last slot was freed %s after the streams were sent, past the bound of %s", freed.Round(10*time.Millisecond), bound)
	}
	r.figure("slots freed after a stall", "all %d %.2f s after the requests were sent (stall timeout %s, bound %s)",
		slots, freed.Seconds(), stall, bound)

	// The worker serves a full set of new streams at once.
	served, after := 0, time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range slots {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			st, b, err := g.do(rctx, "POST", "/v1/chat/completions", chatBody("sim-chat", "hi\nsim: tokens=20", true), "X-Svc-Worker-Id", heldID)
			_, done, errFrame := streamContent(b)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || st != 200 || !done || errFrame != "" {
				r.fail("a stream after the stall: %d %v %s", st, err, tail(string(b), 300))
				return
			}
			served++
		})
	}
	wg.Wait()
	r.figure("served after the stall", "%d/%d new streams on the freed slots in %.2f s", served, slots, time.Since(after).Seconds())

	// Each row is a 499 billing no more than its client received.
	rows, err := usageLog(ctx, g)
	if err != nil {
		return err
	}
	byID := map[string]usageRow{}
	for _, row := range rows {
		byID[row.ID] = row
	}
	var billed, receivedTokens, receivedChunks, worst int64
	for i, c := range conns {
		id, chunks, chars, reset := heldStream(c)
		row, ok := byID[id]
		switch {
		case id == "":
			r.fail("stalled stream %d: no response headers came", i)
			continue
		case !ok:
			r.fail("stalled stream %d (%s): no usage row", i, id)
			continue
		case !reset:
			r.fail("stalled stream %d (%s): the connection ended cleanly, not cut off", i, id)
		}
		got := int64(usage.EstimateTokens(chars))
		if row.StatusCode != 499 || row.ErrorMessage == nil || *row.ErrorMessage != "Client disconnected" {
			r.fail("stalled stream %d (%s): row status %d %v, want 499 Client disconnected", i, id, row.StatusCode, row.ErrorMessage)
		}
		if row.CompletionTokens > got {
			r.fail("stalled stream %d (%s): billed %d completion tokens, the client received %d characters (%d tokens)",
				i, id, row.CompletionTokens, chars, got)
		}
		billed += row.CompletionTokens
		receivedTokens += got
		receivedChunks += int64(chunks)
		worst = max(worst, got-row.CompletionTokens)
	}
	r.figure("billed to stalled streams", "%d completion tokens; the clients received %d (~4 characters a token) in %d chunks whole, at most %d more than billed on one stream; %d chunks relayed in all",
		billed, receivedTokens, receivedChunks, worst, relayed)

	// A large non-streaming answer left unread is cut off too.
	unaryStalled(ctx, g, heldID, bound, r)

	readers.Wait()
	if st, b, err := g.do(ctx, "GET", "/api/v1/usage/inflight", nil); err != nil || st != 200 || strings.TrimSpace(string(b)) != "[]" {
		r.fail("requests still in flight at the end: %d %v %s", st, err, tail(string(b), 300))
	}
	if stalls, err := g.metric(ctx, "svc_client_stalls_total"); err != nil || int(stalls) != slots+1 {
		r.fail("svc_client_stalls_total %v (%v), want %d", stalls, err, slots+1)
	}
	for _, p := range []interface{ Crashed() string }{g, w, w2} {
		if sign := crashed(p); sign != "" {
			r.fail("a process crashed: %s", sign)
		}
	}
	return nil
}

// stalledRequest sends a request on a connection of its own, pinned to a
// worker, and never reads its answer.
func stalledRequest(ctx context.Context, g *gateway, path, workerID string, body []byte) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", g.Addr)
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: stalled\r\nAuthorization: Bearer %s\r\nX-Svc-Worker-Id: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, g.Key, workerID, len(body), body)
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// heldStream reads what a stalled stream's client still holds once it is
// cut off: the request id, the chunks that arrived whole and the
// characters of content in them, and whether the connection was reset
// rather than ended.
func heldStream(c net.Conn) (id string, chunks, chars int, reset bool) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", 0, 0, false
	}
	raw, err := io.ReadAll(resp.Body)
	for _, line := range bytes.Split(raw, []byte("\n")) {
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		d, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok || json.Unmarshal(d, &chunk) != nil {
			continue
		}
		for _, ch := range chunk.Choices {
			chars += len([]rune(ch.Delta.Content))
		}
		chunks++
	}
	return resp.Header.Get("X-Request-Id"), chunks, chars, errors.Is(err, syscall.ECONNRESET)
}

// unaryStalled asks for embeddings of 2,048 inputs, some 10 MB of JSON,
// and reads none of it: the gateway must reset the connection within
// bound, after the socket's buffers filled.
func unaryStalled(ctx context.Context, g *gateway, workerID string, bound time.Duration, r *result) {
	inputs := make([]string, 2048)
	for i := range inputs {
		inputs[i] = "input " + strconv.Itoa(i)
	}
	body, _ := json.Marshal(map[string]any{"model": "sim-embed", "input": inputs})
	before, err := g.metric(ctx, "svc_client_stalls_total")
	if err != nil {
		r.fail("unread embeddings: %v", err)
		return
	}
	start := time.Now()
	c, err := stalledRequest(ctx, g, "/v1/embeddings", workerID, body)
	if err != nil {
		r.fail("unread embeddings: %v", err)
		return
	}
	defer c.Close()
	// Nothing reads the connection until the gateway has counted it cut
	// off; then the client finds what its kernel held, and the reset.
	var cut time.Duration
	_ = harness.Poll(ctx, 50*time.Millisecond, func() bool {
		if n, err := g.metric(ctx, "svc_client_stalls_total"); err == nil && n > before {
			cut = time.Since(start)
			return true
		}
		return time.Since(start) > bound+30*time.Second
	})
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, c)
	switch {
	case cut == 0 || cut > bound:
		r.fail("unread embeddings: cut off %s after the request (0: never), past the bound of %s", cut, bound)
	case !errors.Is(err, syscall.ECONNRESET):
		r.fail("unread embeddings: the connection ended with %v after %d bytes, not a reset", err, n)
	default:
		r.figure("unread non-streaming answer", "10 MB of embeddings: cut off %.2f s after the request, with %d KB at the client",
			cut.Seconds(), n>>10)
	}
}

// slowReader reads a stream 8 KB at a time every pause, far slower than
// it is made, so the gateway waits on it throughout: it reads, and must
// get the whole stream.
func slowReader(ctx context.Context, g *gateway, workerID string, pause time.Duration, r *result) {
	c, err := stalledRequest(ctx, g, "/v1/chat/completions", workerID, chatBody("sim-chat", "slowly\nsim: tokens=1500", true))
	if err != nil {
		r.fail("slow reader: %v", err)
		return
	}
	defer c.Close()
	start := time.Now()
	var raw bytes.Buffer
	buf := make([]byte, 8<<10)
	for !bytes.HasSuffix(raw.Bytes(), []byte("\r\n0\r\n\r\n")) {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := c.Read(buf)
		raw.Write(buf[:n])
		if err != nil {
			r.fail("slow reader: cut off after %d bytes in %s: %v", raw.Len(), time.Since(start).Round(time.Millisecond), err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
	size := raw.Len()
	resp, err := http.ReadResponse(bufio.NewReader(&raw), nil)
	if err != nil {
		r.fail("slow reader: %v", err)
		return
	}
	b, err := io.ReadAll(resp.Body)
	content, done, errFrame := streamContent(b)
	if err != nil || resp.StatusCode != 200 || !done || errFrame != "" || content == "" {
		r.fail("slow reader: %d, done %v, error frame %q, read error %v", resp.StatusCode, done, errFrame, err)
		return
	}
	r.figure("slow reader", "%d KB of stream read 8 KB every %s: whole, in %.1f s", size>>10, pause, time.Since(start).Seconds())
}
