// Package e2e drives the real svc binary as its users do: processes on
// loopback with random ports and temporary data directories, spoken to over
// HTTP and the admin socket.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/cli"
	"github.com/svc-dev/svc/internal/harness"
)

// TestMain lets this test binary run as `svc`: testscript.Main puts a link
// named svc on PATH, and the Go tests below start it through the harness.
// The children are race-instrumented like the tests themselves.
func TestMain(m *testing.M) {
	// Under -race every child process would sleep a second at exit waiting
	// for late reports; the detector itself stays on in the children.
	_ = os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	testscript.Main(m, map[string]func(){
		"svc": func() { os.Exit(cli.Main(buildinfo.Read("", ""))) },
	})
}

// child is a running svc process whose log the test reads.
type child struct {
	*harness.Proc
	t testing.TB
}

// adopt makes p the test's: it is killed, and its log checked for races
// and panics, when the test ends.
func adopt(t testing.TB, p *harness.Proc) *child {
	t.Cleanup(func() {
		_ = p.Kill()
		if c := p.Crashed(); c != "" {
			t.Errorf("%s crashed:\n%s", p.Name(), c[:min(len(c), 6000)])
		}
	})
	return &child{Proc: p, t: t}
}

// stop sends sig and waits for the process to exit, returning its exit
// status.
func (c *child) stop(sig syscall.Signal) error {
	var stuck *harness.StuckError
	if err := c.Stop(sig, 20*time.Second); errors.As(err, &stuck) {
		c.t.Errorf("%v", err)
	}
	return c.Err()
}

// wait blocks until the process exits or timeout passes.
func (c *child) wait(timeout time.Duration) (exited bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.Done():
		return true
	case <-t.C:
		return false
	}
}

// waitLog returns the first JSON log record whose msg starts with prefix.
func (c *child) waitLog(prefix string, timeout time.Duration) map[string]any {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rec, err := c.Log().WaitMsg(ctx, prefix)
	if err != nil {
		c.t.Fatalf("%s: %v; output:\n%s", c.Name(), err, c.Log())
	}
	return rec
}

// server is a running `svc serve`.
type server struct {
	*child
	gw   *harness.Gateway
	URL  string
	Data string
}

// startServer runs `svc serve` on a random loopback port with data dir dir
// (a fresh temp dir when empty) and waits until it listens.
func startServer(t testing.TB, dir string, args ...string) *server {
	t.Helper()
	return startServerEnv(t, dir, nil, args...)
}

// startServerEnv is startServer with env added to the server's.
func startServerEnv(t testing.TB, dir string, env []string, args ...string) *server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	g, err := harness.StartGateway(ctx, harness.GatewaySpec{
		Spec: harness.Spec{Name: "svc serve", Bin: "svc", Args: args, Env: append([]string{"NO_COLOR=1"}, env...), KeepLog: true},
		// The gateway picks its port, which no other process can take
		// first; the URL is read from its log.
		Addr: "127.0.0.1:0",
		Data: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &server{child: adopt(t, g.Proc), gw: g, URL: g.URL, Data: dir}
}

func (s *server) adminKey() string {
	s.t.Helper()
	key, err := s.gw.AdminKey()
	if err != nil {
		s.t.Fatal(err)
	}
	return key
}

func (s *server) tokenFile() string { return s.gw.TokenFile() }

// workerProc is a running `svc worker`.
type workerProc struct {
	*child
	Worker string
}

// startWorker runs `svc worker` against gateway with the token in
// tokenFile, and waits until it has connected.
func startWorker(t testing.TB, gateway, tokenFile, name string, args ...string) *workerProc {
	t.Helper()
	wp := launchWorker(t, gateway, tokenFile, name, args...)
	wp.waitLog("connected to the gateway", 15*time.Second)
	return wp
}

// launchWorker runs `svc worker` and does not wait for it to connect.
func launchWorker(t testing.TB, gateway, tokenFile, name string, args ...string) *workerProc {
	t.Helper()
	p, err := harness.StartWorker(harness.WorkerSpec{
		Spec:   harness.Spec{Bin: "svc", Args: args, KeepLog: true},
		Worker: name, Gateway: gateway, TokenFile: tokenFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &workerProc{child: adopt(t, p), Worker: name}
}

// startSim runs `svc sim` on a random port and returns its URL.
func startSim(t testing.TB, options string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	p, url, err := harness.StartSim(ctx, harness.SimSpec{Spec: harness.Spec{Bin: "svc"}, Options: options})
	if err != nil {
		t.Fatal(err)
	}
	adopt(t, p)
	return url
}

// svc runs the binary to completion and returns its output and exit code.
func svc(t testing.TB, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command("svc", args...)
	cmd.SysProcAttr = harness.SysProcAttr()
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

// secondOrg makes the organisation acme with an owner's key and a worker
// token, on s's console.
func secondOrg(t *testing.T, s *server) (key, tokenFile string) {
	t.Helper()
	for _, step := range []struct{ method, path, body string }{
		{"POST", "/api/v1/console/orgs", `{"name":"acme","plan":"pro"}`},
		{"POST", "/api/v1/console/users", `{"name":"ann"}`},
		{"PUT", "/api/v1/console/orgs/acme/members/ann", `{"role":"owner"}`},
	} {
		if r := s.console(step.method, step.path, step.body); r.Status >= 300 {
			t.Fatalf("%s %s: %d %s", step.method, step.path, r.Status, r.Body)
		}
	}
	key = s.console("POST", "/api/v1/console/orgs/acme/keys", `{"user":"ann","name":"k"}`).JSON(t)["secret"].(string)
	tok := s.console("POST", "/api/v1/console/orgs/acme/worker-tokens", `{"name":"t"}`).JSON(t)["secret"].(string)
	tokenFile = filepath.Join(t.TempDir(), "acme.token")
	if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	return key, tokenFile
}
