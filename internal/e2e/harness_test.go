// Package e2e drives the real svc binary as its users do: processes on
// loopback with random ports and temporary data directories, spoken to over
// HTTP and the admin socket.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/cli"
)

// TestMain lets this test binary run as `svc`: testscript.Main puts a link
// named svc on PATH, and the Go tests below start it with os/exec too.
func TestMain(m *testing.M) {
	// Under -race every child process would sleep a second at exit waiting
	// for late reports; the detector itself stays on in the children.
	_ = os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	testscript.Main(m, map[string]func(){
		"svc": func() { os.Exit(cli.Main(buildinfo.Read("", ""))) },
	})
}

// logBuffer collects a process's stderr and lets tests wait for a line.
type logBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines []map[string]any
	cond  *sync.Cond
}

func newLogBuffer() *logBuffer {
	l := &logBuffer{}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *logBuffer) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l.mu.Lock()
		l.buf.Write(sc.Bytes())
		l.buf.WriteByte('\n')
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			l.lines = append(l.lines, rec)
		}
		l.cond.Broadcast()
		l.mu.Unlock()
	}
	l.mu.Lock()
	l.lines = append(l.lines, map[string]any{"msg": "<eof>"})
	l.cond.Broadcast()
	l.mu.Unlock()
}

// wait returns the first JSON log record whose msg starts with prefix.
func (l *logBuffer) wait(t testing.TB, prefix string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.AfterFunc(timeout, func() {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer deadline.Stop()
	start := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		for _, rec := range l.lines {
			msg, _ := rec["msg"].(string)
			if strings.HasPrefix(msg, prefix) {
				return rec
			}
			if msg == "<eof>" {
				t.Fatalf("process exited before logging %q; output:\n%s", prefix, l.buf.String())
			}
		}
		if time.Since(start) > timeout {
			t.Fatalf("no %q log line within %v; output:\n%s", prefix, timeout, l.buf.String())
		}
		l.cond.Wait()
	}
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// checkCrash fails the test when a child process reported a data race or
// a panic: they run race-instrumented, and would otherwise die quietly.
func checkCrash(t testing.TB, what string, l *logBuffer) {
	out := l.String()
	for _, sign := range []string{"WARNING: DATA RACE", "panic: ", "fatal error: "} {
		if i := strings.Index(out, sign); i >= 0 {
			t.Errorf("%s reported %q:\n%s", what, sign, out[i:min(len(out), i+6000)])
			return
		}
	}
}

// child is a running svc process whose log the test reads.
type child struct {
	t    testing.TB
	what string // "svc serve", "svc worker NAME": for messages
	cmd  *exec.Cmd
	Log  *logBuffer
	done chan struct{}
	err  error // exit status, once done is closed
}

// startChild runs svc with argv and extra environment. It is killed, and
// its log checked for races and panics, when the test ends.
func startChild(t testing.TB, what string, argv []string, env ...string) *child {
	t.Helper()
	c := &child{t: t, what: what, Log: newLogBuffer(), done: make(chan struct{})}
	c.cmd = exec.Command("svc", argv...)
	c.cmd.SysProcAttr = childAttr()
	c.cmd.Env = append(os.Environ(), env...)
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.Log.consume(stderr)
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.stop(syscall.SIGKILL)
		checkCrash(t, what, c.Log)
	})
	return c
}

// stop sends sig and waits for the process to exit, returning its error.
func (c *child) stop(sig syscall.Signal) error {
	select {
	case <-c.done:
		return c.err
	default:
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		c.t.Errorf("%s did not exit within 20s of %v", c.what, sig)
	}
	return c.err
}

// server is a running `svc serve`.
type server struct {
	*child
	URL  string
	Data string
}

// startServer runs `svc serve` on a random loopback port with data dir dir
// (a fresh temp dir when empty) and waits until it listens.
func startServer(t testing.TB, dir string, args ...string) *server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	argv := append([]string{"serve", "--addr", "127.0.0.1:0", "--data", dir, "--log-format", "json"}, args...)
	s := &server{child: startChild(t, "svc serve", argv, "NO_COLOR=1"), Data: dir}
	rec := s.Log.wait(t, "listening", 15*time.Second)
	s.URL = rec["url"].(string)
	return s
}

// wait blocks until the process exits or timeout passes.
func (s *server) wait(timeout time.Duration) (exited bool) {
	select {
	case <-s.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

func (s *server) adminKey() string {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Data, "admin.key"))
	if err != nil {
		s.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// reply is an HTTP answer with its body read.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as an object.
func (r reply) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.Body)
	}
	return m
}

type header struct{ k, v string }

func bearer(key string) header { return header{"Authorization", "Bearer " + key} }

// request sends one request with hc to base+path.
func request(t testing.TB, hc *http.Client, method, url, body string, hs ...header) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range hs {
		req.Header.Set(h.k, h.v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// async sends a request from another goroutine; failures come back as a
// reply with Status -1 and the error as Body, since t.Fatal may not be
// called off the test's goroutine.
func (s *server) async(method, path, body string, hs ...header) <-chan reply {
	out := make(chan reply, 1)
	go func() {
		req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
		if err != nil {
			out <- reply{Status: -1, Body: []byte(err.Error())}
			return
		}
		for _, h := range hs {
			req.Header.Set(h.k, h.v)
		}
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			out <- reply{Status: -1, Body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			out <- reply{Status: -1, Body: []byte(err.Error())}
			return
		}
		out <- reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}()
	return out
}

// do calls the public API.
func (s *server) do(method, path, body string, hs ...header) reply {
	s.t.Helper()
	return request(s.t, http.DefaultClient, method, s.URL+path, body, hs...)
}

// console calls the console API over the admin socket.
func (s *server) console(method, path, body string) reply {
	s.t.Helper()
	sock := filepath.Join(s.Data, "admin.sock")
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer hc.CloseIdleConnections()
	return request(s.t, hc, method, "http://svc"+path, body)
}

// svc runs the binary to completion and returns its output and exit code.
func svc(t testing.TB, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command("svc", args...)
	cmd.SysProcAttr = childAttr()
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}
