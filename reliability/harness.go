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
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// harness holds what every check shares: the svc binary under test and
// a working directory for data dirs and logs.
type harness struct {
	short bool
	dir   string
	bin   string
	logw  io.Writer
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.logw, "reliability: "+format+"\n", args...)
}

// scaled picks the short or the full figure.
func scaled[T any](h *harness, short, full T) T {
	if h.short {
		return short
	}
	return full
}

// proc is a running svc process. Its output goes to DIR/NAME.log,
// appended across restarts so a check can read everything it logged.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // the exit status, once done is closed
}

// start runs the svc binary with args; env is added to the harness's.
func (h *harness) start(name string, env []string, args ...string) (*proc, error) {
	logPath := filepath.Join(h.dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(h.bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process at once, as a power cut or the OOM killer would.
func (p *proc) kill() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop asks the process to end and waits up to 30s before killing it.
func (p *proc) stop() error {
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		p.kill()
		return fmt.Errorf("%s did not exit within 30s of SIGTERM", p.name)
	}
}

// output is everything the process has logged so far, over all its runs.
func (p *proc) output() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// crashed returns the first sign of a panic or fatal error in the log.
func (p *proc) crashed() string {
	out := p.output()
	for _, sign := range []string{"panic: ", "fatal error: ", "WARNING: DATA RACE"} {
		if i := strings.Index(out, sign); i >= 0 {
			return out[i:min(len(out), i+2000)]
		}
	}
	return ""
}

// gateway is a running `svc serve` with its own data directory.
type gateway struct {
	*proc
	h    *harness
	name string
	Addr string // host:port, kept across restarts
	URL  string
	Data string
	Key  string // the organisation default's unrestricted key
	args []string
}

// startGateway runs `svc serve` on a free loopback port with a fresh
// data directory and waits until it answers.
func (h *harness) startGateway(ctx context.Context, name string, args ...string) (*gateway, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	g := &gateway{h: h, name: name, Addr: addr, URL: "http://" + addr, Data: filepath.Join(h.dir, name+"-data"), args: args}
	if err := g.restart(ctx); err != nil {
		return nil, err
	}
	key, err := os.ReadFile(filepath.Join(g.Data, "admin.key"))
	if err != nil {
		return nil, fmt.Errorf("read admin key: %w", err)
	}
	g.Key = strings.TrimSpace(string(key))
	return g, nil
}

// restart starts the gateway again on the same address and data dir:
// after kill or stop.
func (g *gateway) restart(ctx context.Context) error {
	argv := append([]string{"serve", "--addr", g.Addr, "--data", g.Data, "--log-format", "json",
		"--rental-providers", "none"}, g.args...)
	p, err := g.h.start(g.name, []string{"NO_COLOR=1"}, argv...)
	if err != nil {
		return err
	}
	g.proc = p
	if err := waitHTTP(ctx, g.URL+"/healthz", p, 30*time.Second); err != nil {
		p.kill()
		return fmt.Errorf("%s: %w\n%s", g.name, err, tail(p.output(), 3000))
	}
	return nil
}

// tokenFile is the worker token the first start wrote.
func (g *gateway) tokenFile() string { return filepath.Join(g.Data, "worker.token") }

// startWorker runs `svc worker` against gatewayURL (the gateway's or a
// proxy's) and waits until the gateway lists it as online.
func (h *harness) startWorker(ctx context.Context, g *gateway, name, gatewayURL string, args ...string) (*proc, error) {
	argv := append([]string{"worker", "--gateway", gatewayURL, "--token-file", g.tokenFile(), "--name", name,
		"--log-format", "json", "--power", "off"}, args...)
	p, err := h.start("worker-"+name, []string{"NO_COLOR=1"}, argv...)
	if err != nil {
		return nil, err
	}
	if err := g.waitWorker(ctx, name, p, 30*time.Second); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// waitWorker waits until the worker named name is healthy. It polls
// often enough to time a reconnect.
func (g *gateway) waitWorker(ctx context.Context, name string, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if st, _, err := g.workerState(ctx, name); err == nil && st == "healthy" {
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("worker %s exited: %v\n%s", name, p.err, tail(p.output(), 3000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("worker %s not healthy within %v", name, timeout)
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

// metric reads one unlabelled sample from the gateway's /metrics.
func (g *gateway) metric(ctx context.Context, name string) (float64, error) {
	st, body, err := g.do(ctx, "GET", "/metrics", nil)
	if err != nil {
		return 0, err
	}
	if st != 200 {
		return 0, fmt.Errorf("metrics: status %d", st)
	}
	for _, line := range strings.Split(string(body), "\n") {
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

// freeAddr picks a free loopback port.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitHTTP waits until url answers 200, or p exits.
func waitHTTP(ctx context.Context, url string, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if p.exited() {
			return fmt.Errorf("exited before answering: %v", p.err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("did not answer within " + timeout.String())
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

// moduleRoot finds the directory holding go.mod, from the working
// directory upward.
func moduleRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
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
