package e2e

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
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

func TestBootstrapAndRestart(t *testing.T) {
	s := startServer(t, "")
	first := s.waitLog("first start", time.Second)
	key := s.adminKey()
	if first["admin_key_file"] != filepath.Join(s.Data, "admin.key") {
		t.Fatalf("first start names key file %v, want %s", first["admin_key_file"], filepath.Join(s.Data, "admin.key"))
	}
	// Logs travel further than the 0600 file: the key stays out of them.
	if strings.Contains(s.Log().String(), key) {
		t.Fatalf("the log holds the admin key:\n%s", s.Log())
	}
	for _, f := range []string{"admin.key", "worker.token", "admin.sock"} {
		fi, err := os.Stat(filepath.Join(s.Data, f))
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %o, want 600", f, perm)
		}
	}
	token, _ := os.ReadFile(filepath.Join(s.Data, "worker.token"))
	if !strings.HasPrefix(string(token), "svc_w_") {
		t.Fatalf("worker.token = %q", token)
	}

	if r := s.do("GET", "/healthz", ""); r.Status != 200 || r.JSON(t)["status"] != "ok" {
		t.Fatalf("healthz = %d %s", r.Status, r.Body)
	}
	if r := s.do("GET", "/api/v1/workers/latest-version", "", bearer(key)); r.Status != 200 {
		t.Fatalf("latest-version with admin key = %d %s", r.Status, r.Body)
	}
	orgs := s.console("GET", "/api/v1/console/orgs", "").JSON(t)["orgs"].([]any)
	if len(orgs) != 1 || orgs[0].(map[string]any)["plan"] != "pro" || orgs[0].(map[string]any)["name"] != "default" {
		t.Fatalf("orgs = %v", orgs)
	}

	if err := s.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, s.Log())
	}
	if _, err := os.Stat(filepath.Join(s.Data, "admin.sock")); !os.IsNotExist(err) {
		t.Errorf("admin socket left behind: %v", err)
	}
	// A key file loosened meanwhile is made private again at the start.
	if err := os.Chmod(filepath.Join(s.Data, "admin.key"), 0o644); err != nil {
		t.Fatal(err)
	}

	s2 := startServer(t, s.Data)
	if fi, err := os.Stat(filepath.Join(s.Data, "admin.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a loosened admin.key after the restart: %v, %v", fi.Mode(), err)
	}
	s2.waitLog("a secret file others could read is private again", time.Second)
	if strings.Contains(s2.Log().String(), "first start") || strings.Contains(s2.Log().String(), key) {
		t.Fatalf("restart bootstrapped again or printed the key:\n%s", s2.Log())
	}
	if s2.adminKey() != key {
		t.Fatal("admin.key changed on restart")
	}
	if r := s2.do("GET", "/api/v1/workers/latest-version", "", bearer(key)); r.Status != 200 {
		t.Fatalf("admin key after restart = %d %s", r.Status, r.Body)
	}
	orgs = s2.console("GET", "/api/v1/console/orgs", "").JSON(t)["orgs"].([]any)
	if len(orgs) != 1 {
		t.Fatalf("restart created another organisation: %v", orgs)
	}
}

func TestSecondServerOnSameDataDirFails(t *testing.T) {
	s := startServer(t, "")
	start := time.Now()
	_, stderr, code := svc(t, nil, "serve", "--addr", "127.0.0.1:0", "--data", s.Data, "--log-format", "json", "--store-wait", "1s")
	if code == 0 {
		t.Fatal("second server on the same data dir exited 0")
	}
	if !strings.Contains(stderr, "another svc serve") || !strings.Contains(stderr, "waiting for the store") {
		t.Fatalf("second server's error does not say why:\n%s", stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("second server took %v to give up", d)
	}
	// The first server is untouched: its socket and port still answer.
	if r := s.console("GET", "/api/v1/console/orgs", ""); r.Status != 200 {
		t.Fatalf("first server's admin socket after the failed start = %d", r.Status)
	}
	if r := s.do("GET", "/healthz", ""); r.Status != 200 {
		t.Fatalf("first server after the failed start = %d", r.Status)
	}
}

// halfRequest opens a connection and sends a request whose body is not
// finished, so the server holds it in flight. It returns once the server
// has accepted the connection: one still queued would be dropped, not
// drained, by a shutdown.
func halfRequest(t *testing.T, base, key string) (net.Conn, string) {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, key, len(body), body[:5])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := harness.WaitAccepted(ctx, conn); err != nil {
		t.Fatal(err)
	}
	return conn, body[5:]
}

func TestGracefulShutdownDrainsInFlight(t *testing.T) {
	s := startServer(t, "")
	conn, rest := halfRequest(t, s.URL, s.adminKey())
	defer conn.Close()

	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.waitLog("stopped accepting", 5*time.Second)
	// A connection made during the drain is not served by the draining
	// server: it waits in the socket's queue for a server taking over, and
	// with none is answered, when this one exits, with a 503 asking its
	// client to retry rather than reset with its request unanswered.
	late, err := net.DialTimeout("tcp", strings.TrimPrefix(s.URL, "http://"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	fmt.Fprintf(late, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	if s.wait(300 * time.Millisecond) {
		t.Fatal("server exited with a request in flight")
	}

	if _, err := conn.Write([]byte(rest)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("in-flight request got no answer: %v", err)
	}
	resp.Body.Close()
	// No worker is connected, so the answer is a 503; what matters is
	// that it came, and with Connection: close.
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Fatalf("in-flight answer = %d close=%v, want 503 with Connection: close", resp.StatusCode, resp.Close)
	}
	if !s.wait(10 * time.Second) {
		t.Fatal("server did not exit after draining")
	}
	if s.Err() != nil {
		t.Fatalf("exit status %v\n%s", s.Err(), s.Log())
	}
	s.waitLog("stopped", time.Second)
	if rec := s.waitLog("answered the connections made during the drain", time.Second); rec["connections"] != float64(1) {
		t.Fatalf("the log counts %v connections answered at the exit, want 1", rec["connections"])
	}
	_ = late.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(late), nil)
	if err != nil {
		t.Fatalf("a connection made during the drain got no answer: %v\n%s", err, s.Log())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Fatalf("a connection made during the drain: %d, Retry-After %q, close %v; want a 503 to retry",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close)
	}

	// The store was closed cleanly: a new server opens it at once.
	s2 := startServer(t, s.Data, "--drain-timeout", "1s")
	if r := s2.do("GET", "/healthz", ""); r.Status != 200 {
		t.Fatalf("restart after drain = %d", r.Status)
	}
}

func TestDrainIsBounded(t *testing.T) {
	s := startServer(t, "", "--drain-timeout", "500ms")
	conn, _ := halfRequest(t, s.URL, s.adminKey())
	defer conn.Close()
	start := time.Now()
	if err := s.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if !s.wait(10 * time.Second) {
		t.Fatal("server did not give up draining")
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("server exited after %v, before the drain timeout", d)
	}
	if !strings.Contains(s.Log().String(), "drain timed out") {
		t.Fatalf("log does not say the drain timed out:\n%s", s.Log())
	}
	if s.Err() != nil {
		t.Fatalf("exit status %v", s.Err())
	}
}

func TestMetrics(t *testing.T) {
	s := startServer(t, "")
	s.do("GET", "/healthz", "")
	s.do("GET", "/v1/chat/completions", "")
	s.do("GET", "/no/such/path", "")
	r := s.do("GET", "/metrics", "")
	if r.Status != 200 {
		t.Fatalf("metrics = %d", r.Status)
	}
	for _, want := range []string{
		`svc_http_requests_total{method="GET",route="/healthz",status="200"} 1`,
		`svc_http_requests_total{method="GET",route="/v1/chat/completions",status="405"} 1`,
		`svc_http_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`svc_http_request_duration_seconds_bucket{route="/healthz",status="200",le="0.0005"}`,
		`svc_build_info{`,
		"svc_clock_steps_total 0\n",
		`go_goroutines `,
		`process_resident_memory_bytes `,
	} {
		if !strings.Contains(string(r.Body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// With --metrics-token-file the metrics, whose labels name every
// organisation's workers and models, go to the bearer of the token alone;
// health stays open to the load balancer, and a file without a token is
// refused at start rather than leaving the metrics open.
func TestMetricsToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "metrics.token")
	if err := os.WriteFile(file, []byte("s3cret-scrape\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--metrics-token-file", file)
	for _, tc := range []struct {
		name      string
		headers   []header
		status    int
		challenge string
	}{
		{"no token", nil, 401, `Bearer realm="svc"`},
		{"another token", []header{bearer("guess")}, 401, `Bearer realm="svc", error="invalid_token"`},
		{"an API key", []header{bearer(s.adminKey())}, 401, `Bearer realm="svc", error="invalid_token"`},
		{"the token", []header{bearer("s3cret-scrape")}, 200, ""},
	} {
		r := s.do("GET", "/metrics", "", tc.headers...)
		if r.Status != tc.status || r.Header.Get("WWW-Authenticate") != tc.challenge ||
			tc.status == 200 && !strings.Contains(string(r.Body), "svc_build_info{") ||
			tc.status != 200 && strings.Contains(string(r.Body), "svc_") {
			t.Errorf("%s: %d %q %.200s", tc.name, r.Status, r.Header.Get("WWW-Authenticate"), r.Body)
		}
	}
	if r := s.do("GET", "/healthz", ""); r.Status != 200 {
		t.Errorf("healthz = %d", r.Status)
	}

	empty := filepath.Join(dir, "empty.token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := svc(t, []string{"HOME=" + dir}, "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "d2"),
		"--metrics-token-file", empty); code != 2 || !strings.Contains(errOut, "one token") {
		t.Errorf("an empty token file: exit %d, %s", code, errOut)
	}
	// A missing one is the same mistake, with the same exit status.
	if _, errOut, code := svc(t, []string{"HOME=" + dir}, "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "d3"),
		"--metrics-token-file", filepath.Join(dir, "none.token")); code != 2 || !strings.Contains(errOut, "none.token") {
		t.Errorf("a missing token file: exit %d, %s", code, errOut)
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestRequestIDOnEveryAnswer(t *testing.T) {
	s := startServer(t, "")
	seen := map[string]bool{}
	for _, r := range []reply{
		s.do("POST", "/v1/chat/completions", `{}`),
		s.do("POST", "/v1/chat/completions", `{}`, bearer(s.adminKey())),
		s.do("GET", "/api/v1/usage/logs", "", bearer(s.adminKey())),
		s.do("GET", "/nope", ""),
		s.do("GET", "/healthz", ""),
	} {
		id := r.Header.Get("X-Request-Id")
		if !uuidRE.MatchString(id) || seen[id] {
			t.Fatalf("X-Request-Id %q is not a fresh UUID (status %d)", id, r.Status)
		}
		seen[id] = true
	}
}

func TestCLIExitCodes(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"unknown command", []string{"bogus"}, 2, `unknown command "bogus"`},
		{"unknown flag", []string{"serve", "--colour"}, 2, "unknown flag: --colour"},
		{"stray argument", []string{"version", "x"}, 2, "takes no arguments"},
		{"bad env", []string{"serve", "--data", dir}, 2, "invalid $SVC_DRAIN_TIMEOUT"},
		{"no server", []string{"admin", "orgs", "list", "--data", dir}, 1, "Is svc serve running"},
		{"version", []string{"version"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := svc(t, []string{"SVC_DRAIN_TIMEOUT=later"}, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			if code == 2 && !strings.Contains(stderr, "--help") {
				t.Fatalf("usage error without a help hint:\n%s", stderr)
			}
		})
	}
}

// A worker with no token is a usage error (2), so that systemd's unit,
// which does not restart on 2, waits for the token to be set instead of
// restarting in a loop.
func TestWorkerWithoutATokenIsAUsageError(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := svc(t, []string{"HOME=" + dir, "SVC_DATA=" + dir, "SVC_WORKER_TOKEN="}, "worker", "--gateway", "http://127.0.0.1:1", "--engine", "sim")
	if code != 2 || !strings.Contains(stderr, "no worker token") {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
}

// A model id no request could name, to install or to offer under, is a
// usage error at the worker's start, not a model installed and then left
// out of the gateway's list.
func TestWorkerRefusesModelIDsNoRequestCouldName(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("m", 257)
	for _, args := range [][]string{{"--pull", long}, {"--pull", ""}, {"--pull", "a\tb"}, {"--model-alias", long + "=sim-chat"}} {
		_, stderr, code := svc(t, []string{"HOME=" + dir, "SVC_DATA=" + dir, "SVC_WORKER_TOKEN=svc_w_x"},
			append([]string{"worker", "--gateway", "http://127.0.0.1:1", "--engine", "sim"}, args...)...)
		if code != 2 || !strings.Contains(stderr, "at most 256 bytes") {
			t.Errorf("%q: exit %d; stderr:\n%s", args, code, stderr)
		}
	}
}

func TestHeadIsGetWithoutBody(t *testing.T) {
	s := startServer(t, "")
	r := s.do("HEAD", "/healthz", "")
	if r.Status != 200 || len(r.Body) != 0 || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("HEAD /healthz = %d %q %q", r.Status, r.Body, r.Header.Get("Content-Type"))
	}
}

// TestDrainTimeoutAnswersWhatIsRunning: requests still running when the
// drain runs out of time are answered 503 to retry, a stream with its
// error event and [DONE], before their connections close; their rows say
// so, not that the client left; and the server exits soon after the
// timeout, not when its worker would have finished.
func TestDrainTimeoutAnswersWhatIsRunning(t *testing.T) {
	s := startServer(t, "", "--drain-timeout", "1s")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "sim-box", "--engine", "sim=ttft=0", "--max-concurrent", "2")
	slow := "go on\nsim: tokens=400 tps=20"

	_, events := openStream(t, s, key, slow)
	unary := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(chatBody("sim-chat", slow, false)))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			unary <- reply{Body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		unary <- reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}()
	s.workerNamed(key, "sim-box", func(w map[string]any) bool { return w["active_tasks"].(float64) == 2 })

	start := time.Now()
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	endsWith503(t, events, "the stream ended without its error event")
	u := <-unary
	if u.Status != 503 || u.Header.Get("Retry-After") == "" {
		t.Fatalf("the request waiting on its answer = %d %s, want a 503 to retry", u.Status, u.Body)
	}
	if !s.wait(10 * time.Second) {
		t.Fatal("the server did not exit")
	}
	// The drain's second, then a second at most for the answers and
	// the store's close: not the twenty the requests had left to run.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the server exited %v after SIGTERM with a 1s drain timeout", d)
	}

	s2 := startServer(t, s.Data)
	var rows []map[string]any
	_ = json.Unmarshal(s2.do("GET", "/api/v1/usage/logs?limit=10", "", bearer(key)).Body, &rows)
	ended := 0
	for _, row := range rows {
		if row["request_type"] == "chat" {
			ended++
			if row["status_code"] != 503.0 {
				t.Errorf("a request ended by the drain has row %v, want status 503", row)
			}
		}
	}
	if ended != 2 {
		t.Fatalf("%d chat rows after the restart, want 2: %v", ended, rows)
	}
}

// SIGHUP, which a closed terminal sends, drains as SIGTERM does; a second
// interrupt during a drain ends it at once, as its timeout would (what is
// running is answered and its usage rows written), and the server exits
// with the status a shell gives a process the signal killed, where a
// repeated SIGTERM changes nothing.
func TestStopSignals(t *testing.T) {
	s := startServer(t, "")
	conn, rest := halfRequest(t, s.URL, s.adminKey())
	defer conn.Close()
	hangup := os.Signal(syscall.SIGHUP)
	if signal.Ignored(syscall.SIGHUP) {
		// Started under nohup, the server inherits SIGHUP ignored and
		// rightly keeps ignoring it: a drain is then asked for as a
		// process manager asks.
		t.Log("SIGHUP is ignored here, as the servers started from here ignore it: draining on SIGTERM")
		hangup = syscall.SIGTERM
	}
	if err := s.Signal(hangup); err != nil {
		t.Fatal(err)
	}
	s.waitLog("stopped accepting", 5*time.Second)
	if _, err := conn.Write([]byte(rest)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the request in flight at the SIGHUP got no answer: %v", err)
	}
	resp.Body.Close()
	if !s.wait(10*time.Second) || s.Err() != nil {
		t.Fatalf("after a SIGHUP's drain: exit %v\n%s", s.Err(), s.Log())
	}

	s = startServer(t, "", "--drain-timeout", "1m")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "sim-box", "--engine", "sim=ttft=0")
	stream, events := openStream(t, s, key, "go on\nsim: tokens=400 tps=20")
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.waitLog("stopped accepting", 5*time.Second)
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if s.wait(500 * time.Millisecond) {
		t.Fatalf("a repeated SIGTERM ended the drain: %v", s.Err())
	}
	if err := s.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	endsWith503(t, events, "the stream cut by the second interrupt ended without its error event")
	if !s.wait(5 * time.Second) {
		t.Fatal("a second interrupt did not end the drain")
	}
	var ee *exec.ExitError
	if !errors.As(s.Err(), &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) || !strings.Contains(s.Log().String(), "second interrupt") {
		t.Fatalf("exit %v, want status %d and a word why\n%s", s.Err(), 128+int(syscall.SIGINT), s.Log())
	}
	s2 := startServer(t, s.Data)
	if row := s2.usageRow(key, stream.Header.Get("X-Request-Id")); row["status_code"] != 503.0 {
		t.Fatalf("the stream cut by the second interrupt has row %v, want status 503", row)
	}
}

// A data directory that cannot be made is reported as such, whatever
// else the server would have put in it first.
func TestUnusableDataDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := svc(t, nil, "serve", "--data", filepath.Join(file, "svc"), "--addr", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "create data directory") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// A server that cannot listen on its address leaves no organisation, key
// or token behind, nor a log saying it started.
func TestAddressInUseCreatesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := t.TempDir()
	_, stderr, code := svc(t, nil, "serve", "--data", data, "--addr", ln.Addr().String(), "--log-format", "json")
	if code != 1 || !strings.Contains(stderr, "address already in use") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(stderr, "first start") {
		t.Errorf("the failed start logged a first start:\n%s", stderr)
	}
	for _, f := range []string{"admin.key", "worker.token"} {
		if _, err := os.Stat(filepath.Join(data, f)); !os.IsNotExist(err) {
			t.Errorf("%s written by a server that never listened: %v", f, err)
		}
	}
	// The next start on a free address is the first.
	s := startServer(t, data)
	s.waitLog("first start", time.Second)
}

// A second interrupt to a draining worker abandons what it runs at once,
// saying so to the gateway, which ends those requests then rather than
// after waiting for a reconnect; the worker exits as a shell reports an
// interrupt.
func TestWorkerSecondInterrupt(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	w := startWorker(t, s.URL, s.tokenFile(), "sim-box", "--engine", "sim=ttft=0", "--drain-timeout", "1m")
	_, events := openStream(t, s, key, "go on\nsim: tokens=400 tps=20")
	if err := w.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	w.waitLog("draining: finishing running requests", 5*time.Second)
	start := time.Now()
	if err := w.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	endsWith503(t, events, "the stream the worker abandoned ended without its error event")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the stream ended %v after the second interrupt, want at once", d)
	}
	if !w.wait(5 * time.Second) {
		t.Fatal("a second interrupt did not end the worker")
	}
	var ee *exec.ExitError
	if !errors.As(w.Err(), &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) {
		t.Fatalf("worker exit %v, want status %d\n%s", w.Err(), 128+int(syscall.SIGINT), w.Log())
	}
}

// openStream starts a streamed chat of content and reads its first line.
func openStream(t *testing.T, s *server, key, content string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(streamBody("sim-chat", content, nil)))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Body.Close() })
	events := bufio.NewReader(stream.Body)
	if line, err := events.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("the stream's first line %q: %v", line, err)
	}
	return stream, events
}

// endsWith503 reads the rest of a stream, which must end with a 503
// error event and [DONE]; what says fails the test otherwise.
func endsWith503(t *testing.T, events io.Reader, what string) {
	t.Helper()
	rest, _ := io.ReadAll(events)
	if tail := string(rest); !strings.Contains(tail, `"status":503`) || !strings.HasSuffix(strings.TrimSpace(tail), "data: [DONE]") {
		t.Fatalf("%s: ...%s", what, tail[max(0, len(tail)-400):])
	}
}

// A request line of another HTTP major version gets its 505 also while the
// client is still sending a large body, rather than a reset; and a body the
// handler never read that ends short of its length closes the connection,
// saying so.
func TestBodiesLeftUnread(t *testing.T) {
	s := startServer(t, "")
	host := strings.TrimPrefix(s.URL, "http://")
	send := func(head string, body []byte, halfClose bool) *http.Response {
		t.Helper()
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		go func() {
			if _, err := io.WriteString(c, head); err != nil {
				return
			}
			_, _ = c.Write(body)
			if halfClose {
				_ = c.(*net.TCPConn).CloseWrite()
			}
		}()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: %v", strings.SplitN(head, "\r\n", 2)[0], err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	big := bytes.Repeat([]byte("x"), 4<<20)
	if r := send(fmt.Sprintf("POST /v1/chat/completions HTTP/2.0\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(big)), big, false); r.StatusCode != 505 || !r.Close {
		t.Errorf("HTTP/2.0 with a 4 MB body: %d, close %v", r.StatusCode, r.Close)
	}
	short := bytes.Repeat([]byte("x"), 64<<10)
	if r := send(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 4*len(short)), short, true); r.StatusCode != 401 || !r.Close {
		t.Errorf("a body cut short, unread: %d, close %v", r.StatusCode, r.Close)
	}
}
