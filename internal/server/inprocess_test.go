package server_test

// The gateway `svc serve` runs and a worker, in the test's process, for
// tests that drive the whole of it over HTTP (the fuzz targets).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/engine/sim"
	"github.com/svc-dev/svc/internal/harness"
	"github.com/svc-dev/svc/internal/server"
	"github.com/svc-dev/svc/internal/worker"
)

// inProcess is a gateway and a simulated worker run by the test.
type inProcess struct {
	url, key, dir string
	hc            *http.Client // plain, for the usage log
}

// startInProcess runs the server `svc serve` runs on a random loopback
// port and a temporary data directory, and a worker serving the
// simulator's models at once, and more's; they stop when tb ends. The
// organisation's rate limit is lifted: tests send faster than a plan
// allows.
func startInProcess(tb testing.TB, more ...engine.Engine) *inProcess {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.DiscardHandler)
	dir := tb.TempDir()
	ready := make(chan string, 1)
	var wg sync.WaitGroup
	stopped := make(chan error, 1)
	wg.Go(func() {
		stopped <- server.Run(ctx, server.Config{Addr: "127.0.0.1:0", DataDir: dir, Logger: log,
			DrainTimeout: time.Second, Ready: func(addr string) { ready <- addr }})
	})
	tb.Cleanup(func() { cancel(); wg.Wait() })
	var addr string
	select {
	case addr = <-ready:
	case err := <-stopped:
		tb.Fatalf("the gateway stopped: %v", err)
	case <-time.After(30 * time.Second):
		tb.Fatal("the gateway did not start")
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			tb.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	g := &inProcess{url: "http://" + addr, key: read(server.AdminKeyFile), dir: dir,
		hc: &http.Client{Timeout: 30 * time.Second}}
	r, err := g.consoleDo(g.consoleClient(), "PATCH", "/api/v1/console/orgs/default", []byte(`{"requests_per_minute": 0}`))
	if err != nil || r.status != http.StatusOK {
		tb.Fatalf("lifting the rate limit: %v %d %s", err, r.status, r.body)
	}

	kp, err := e2ee.GenerateKeyPair()
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := sim.ParseOptions("tps=0,ttft=0,rtf=0")
	if err != nil {
		tb.Fatal(err)
	}
	agent, err := worker.New(worker.Config{Gateway: g.url, Token: read(server.WorkerTokenFile), Name: "fuzz",
		MaxConcurrent: 4, Version: "v0.0.0", Engines: append([]engine.Engine{sim.New(cfg)}, more...), E2E: kp, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	wg.Go(func() { _ = agent.Run(ctx) })
	hc := &http.Client{Timeout: 5 * time.Second}
	if !harness.Eventually(30*time.Second, func() bool {
		r, err := g.get(hc, "/v1/models")
		return err == nil && bytes.Contains(r.body, []byte(`"sim-image"`))
	}) {
		tb.Fatal("the worker's models were not listed")
	}
	return g
}

// consoleClient is a client of the console, on the admin socket.
func (g *inProcess) consoleClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", filepath.Join(g.dir, server.SocketFile))
		}}}
}

// consoleDo calls the console, which asks for no key.
func (g *inProcess) consoleDo(hc *http.Client, method, path string, body []byte) (answer, error) {
	req, err := http.NewRequest(method, "http://console"+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return roundTrip(hc, req)
}

// answer is an HTTP answer with its body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (g *inProcess) post(hc *http.Client, path string, body []byte) (answer, error) {
	return g.do(hc, "POST", path, body)
}

func (g *inProcess) get(hc *http.Client, path string) (answer, error) {
	return g.do(hc, "GET", path, nil)
}

func (g *inProcess) do(hc *http.Client, method, path string, body []byte) (answer, error) {
	req, err := http.NewRequest(method, g.url+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+g.key)
	return roundTrip(hc, req)
}

// roundTrip sends req and reads the whole answer.
func roundTrip(hc *http.Client, req *http.Request) (answer, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("reading the answer: %w", err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// inference sends body to path with hc and checks what comes back, as
// the inference fuzz targets require: an answer in time, checkAnswer's
// rules, and a usage row of the answer's status. A body a sealing
// client's transport refuses to seal is skipped.
func (g *inProcess) inference(t *testing.T, hc *http.Client, path string, body []byte) {
	t.Helper()
	what := path
	if _, sealing := hc.Transport.(*e2ee.Transport); sealing {
		what = "sealed " + path
	}
	a, err := g.post(hc, path, body)
	if err != nil && strings.Contains(err.Error(), "e2ee:") {
		t.Skip("the transport does not seal it")
	}
	if err != nil {
		t.Fatalf("%s %q: %v", what, body, err)
	}
	if err := checkAnswer(a); err != nil {
		t.Fatalf("%s %q: %v\nstatus %d: %.2000s", what, body, err, a.status, a.body)
	}
	id := a.header.Get("X-Request-Id")
	row, err := g.usageRow(id)
	if err != nil {
		t.Fatalf("%s %q (status %d, id %s): %v", what, body, a.status, id, err)
	}
	if got := row["status_code"]; got != float64(a.status) {
		t.Fatalf("%s %q: answered %d, logged %v: %v", what, body, a.status, got, row)
	}
}

// usageRow waits for the usage row of request id among the newest.
func (g *inProcess) usageRow(id string) (map[string]any, error) {
	// Within the fuzzing engine's 10 s for an input, so that a lost row
	// is reported as one, not as a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var row map[string]any
	last := errors.New("not looked for")
	// Rows are committed in groups: a short poll finds most at once.
	err := harness.Poll(ctx, 2*time.Millisecond, func() bool {
		r, err := g.get(g.hc, "/api/v1/usage/logs?limit=20")
		if err != nil {
			last = err
			return false
		}
		var rows []map[string]any
		if err := json.Unmarshal(r.body, &rows); err != nil {
			last = err
			return false
		}
		for _, r := range rows {
			if r["id"] == id {
				row = r
				return true
			}
		}
		last = fmt.Errorf("not among the %d newest", len(rows))
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("no usage row: %w", last)
	}
	return row, nil
}

// readThenLeave sends body to path on a connection of its own, reads at
// most n bytes of the answer and closes the connection.
func (g *inProcess) readThenLeave(path, body string, n int) ([]byte, error) {
	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, g.key, len(body), body)
	if _, err := io.WriteString(c, req); err != nil {
		return nil, err
	}
	got, err := io.ReadAll(io.LimitReader(c, int64(n)))
	if err != nil && !errors.Is(err, io.EOF) {
		return got, fmt.Errorf("%s: reading the answer: %w", path, err)
	}
	return got, nil
}
