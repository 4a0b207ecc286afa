package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// rig holds what every check shares: the svc binary under test, a
// working directory for data dirs and logs, and every process the checks
// start.
type rig struct {
	short bool
	dir   string
	bin   string
	logw  io.Writer
	procs harness.Group
}

func (h *rig) logf(format string, args ...any) {
	fmt.Fprintf(h.logw, "reliability: "+format+"\n", args...)
}

// scaled picks the short or the full figure.
func scaled[T any](h *rig, short, full T) T {
	if h.short {
		return short
	}
	return full
}

// stopGrace is how long a process has to exit after SIGTERM before it is
// killed.
const stopGrace = 30 * time.Second

// spec is how the checks run svc: its output goes to DIR/NAME.log,
// appended across restarts so a check can read everything it logged.
func (h *rig) spec(name string, env ...string) harness.Spec {
	return harness.Spec{Name: name, Bin: h.bin, Env: env, LogFile: filepath.Join(h.dir, name+".log"), Group: &h.procs}
}

// crashed is the first sign of a panic, fatal error or data race in a
// process's log, and what follows it.
func crashed(p interface{ Crashed() string }) string {
	c := p.Crashed()
	return c[:min(len(c), 2000)]
}

// gateway is a running `svc serve` with its own data directory.
type gateway struct {
	*harness.Gateway
	h   *rig
	Key string // the organisation default's unrestricted key
}

// startGateway runs `svc serve` on a free loopback port with a fresh
// data directory and waits until it answers.
func (h *rig) startGateway(ctx context.Context, name string, args ...string) (*gateway, error) {
	s := h.spec(name, "NO_COLOR=1")
	s.Args = append([]string{"--rental-providers", "none"}, args...)
	g, err := harness.StartGateway(ctx, harness.GatewaySpec{Spec: s, Data: filepath.Join(h.dir, name+"-data")})
	if err != nil {
		return nil, err
	}
	key, err := g.AdminKey()
	if err != nil {
		_ = g.Kill()
		return nil, err
	}
	return &gateway{Gateway: g, h: h, Key: key}, nil
}

// workerSpec is `svc worker` called name, dialling gatewayURL (the
// gateway's or a proxy's) with the token in tokenFile.
func (h *rig) workerSpec(name, gatewayURL, tokenFile string, args ...string) harness.WorkerSpec {
	s := h.spec("worker-"+name, "NO_COLOR=1")
	s.Args = append([]string{"--power", "off"}, args...)
	return harness.WorkerSpec{Spec: s, Worker: name, Gateway: gatewayURL, TokenFile: tokenFile}
}

// startWorker runs `svc worker` against gatewayURL (the gateway's or a
// proxy's) with the gateway's token and waits until the gateway lists it
// as healthy.
func (h *rig) startWorker(ctx context.Context, g *gateway, name, gatewayURL string, args ...string) (*harness.Proc, error) {
	return g.StartWorker(ctx, h.workerSpec(name, gatewayURL, g.TokenFile(), args...))
}

// waitWorker waits up to timeout until the worker named name is healthy.
func (g *gateway) waitWorker(ctx context.Context, name string, p *harness.Proc, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return g.WaitWorker(ctx, g.Key, name, p)
}

// workerState is the gateway's listing of one worker: its status and
// how many requests it runs.
func (g *gateway) workerState(ctx context.Context, name string) (status string, active int, err error) {
	st, body, err := g.do(ctx, "GET", "/api/v1/workers", nil)
	if err != nil {
		return "", 0, err
	}
	var list struct {
		Workers []struct {
			Name   string `json:"worker_name"`
			Status string `json:"status"`
			Active int    `json:"active_tasks"`
		} `json:"workers"`
	}
	if st != 200 || json.Unmarshal(body, &list) != nil {
		return "", 0, fmt.Errorf("workers: status %d %s", st, tail(string(body), 200))
	}
	for _, w := range list.Workers {
		if w.Name == name {
			return w.Status, w.Active, nil
		}
	}
	return "", 0, fmt.Errorf("no worker %s", name)
}

// client is the harness's HTTP client: no overall timeout (streams run
// long; callers pass contexts), and enough idle connections for its load.
var client = &http.Client{Transport: &http.Transport{
	MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, MaxConnsPerHost: 0,
	DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
}}

// do sends a request with the gateway's admin key unless hdr sets
// Authorization, and reads the whole answer.
func (g *gateway) do(ctx context.Context, method, path string, body []byte, hdr ...string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, g.URL+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+g.Key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// usageRow is the part of a usage log row the checks read.
type usageRow struct {
	ID               string    `json:"id"`
	CreatedAt        time.Time `json:"created_at"`
	Model            string    `json:"model"`
	RequestType      string    `json:"request_type"`
	StatusCode       int       `json:"status_code"`
	ErrorMessage     *string   `json:"error_message"`
	PromptTokens     int64     `json:"prompt_tokens"`
	CompletionTokens int64     `json:"completion_tokens"`
	TotalTokens      int64     `json:"total_tokens"`
	WorkerName       string    `json:"worker_name"`
	Stream           bool      `json:"stream"`
	Attempts         int       `json:"attempts"`
}

// usageLog reads the whole usage log, newest first, a page of 1000 rows
// at a time. Nothing may be recorded meanwhile: offsets count from the
// newest row.
func usageLog(ctx context.Context, g *gateway) ([]usageRow, error) {
	const page = 1000
	var out []usageRow
	for offset := 0; ; offset += page {
		st, body, err := g.do(ctx, "GET", "/api/v1/usage/logs?limit="+strconv.Itoa(page)+"&offset="+strconv.Itoa(offset), nil)
		if err != nil {
			return nil, fmt.Errorf("usage log at %d: %w", offset, err)
		}
		if st != http.StatusOK {
			return nil, fmt.Errorf("usage log at %d: status %d: %s", offset, st, tail(string(body), 500))
		}
		var rows []usageRow
		if err := json.Unmarshal(body, &rows); err != nil {
			return nil, fmt.Errorf("usage log at %d: %w", offset, err)
		}
		out = append(out, rows...)
		if len(rows) < page {
			return out, nil
		}
	}
}

// metricLines reads the gateway's /metrics, a line a sample.
func (g *gateway) metricLines(ctx context.Context) ([]string, error) {
	st, body, err := g.do(ctx, "GET", "/metrics", nil)
	if err != nil {
		return nil, err
	}
	if st != 200 {
		return nil, fmt.Errorf("metrics: status %d", st)
	}
	return strings.Split(string(body), "\n"), nil
}

// metric reads one unlabelled sample from the gateway's /metrics.
func (g *gateway) metric(ctx context.Context, name string) (float64, error) {
	lines, err := g.metricLines(ctx)
	if err != nil {
		return 0, err
	}
	for _, line := range lines {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metrics: no %s", name)
}

// chatBody is a chat completion request for one user message.
func chatBody(model, prompt string, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": model, "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	})
	return b
}

// sseData returns the data payloads of an SSE body, in order.
func sseData(body []byte) []string {
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// streamContent joins the content deltas of a chat stream and reports
// whether it ended with [DONE], and the error frame, if any, before it.
func streamContent(body []byte) (content string, done bool, errFrame string) {
	var sb strings.Builder
	for _, d := range sseData(body) {
		if d == "[DONE]" {
			done = true
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal([]byte(d), &chunk) != nil {
			continue
		}
		if len(chunk.Error) > 0 && string(chunk.Error) != "null" {
			errFrame = d
		}
		for _, c := range chunk.Choices {
			sb.WriteString(c.Delta.Content)
		}
	}
	return sb.String(), done, errFrame
}

// openFiles counts a process's open file descriptors.
func openFiles(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// rss is a process's resident and peak resident memory in bytes.
func rss(pid int) (now, peak int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			now = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	return now, peak
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// raiseFileLimit lifts the open-file soft limit to the hard one: a
// thousand streams and thousands of idle connections need the sockets.
func raiseFileLimit() {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil && r.Cur < r.Max {
		r.Cur = r.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	}
}
