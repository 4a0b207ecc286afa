package cli

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/iostreams"
)

// fakeGateway answers the public API with fixture files by route and
// records what it was sent, in the manner of gh's httpmock.
type fakeGateway struct {
	*httptest.Server
	t      *testing.T
	routes map[string]fakeReply

	mu    sync.Mutex
	sent  []sentRequest
	calls map[string]int // by route, for fakeReply.seq
}

// fakeReply is one route's answer. body is a file in testdata when it
// names one, else the body itself.
type fakeReply struct {
	status int
	body   string
	header map[string]string
	// key, when set, is the only API key accepted; others get a 401.
	key string
	// seq, when set, are the route's replies in turn, the last repeating:
	// a rental that boots.
	seq []fakeReply
}

type sentRequest struct {
	Method, Path string
	Query        url.Values
	Auth         string
	UserAgent    string
	Body         string
}

// newFakeGateway serves routes keyed "METHOD /path"; a request whose JSON
// body streams is looked up with " stream" appended first.
func newFakeGateway(t *testing.T, routes map[string]fakeReply) *fakeGateway {
	g := &fakeGateway{t: t, routes: routes, calls: map[string]int{}}
	g.Server = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.Close)
	return g
}

func (g *fakeGateway) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.sent = append(g.sent, sentRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(),
		Auth: r.Header.Get("Authorization"), UserAgent: r.Header.Get("User-Agent"), Body: string(body)})
	n := len(g.sent)
	g.mu.Unlock()

	key := r.Method + " " + r.URL.Path
	reply, ok := g.routes[key+" stream"]
	if !ok || !bytes.Contains(body, []byte(`"stream":true`)) {
		reply, ok = g.routes[key]
	}
	if len(reply.seq) > 0 {
		g.mu.Lock()
		i := min(g.calls[key], len(reply.seq)-1)
		g.calls[key]++
		g.mu.Unlock()
		reply = reply.seq[i]
	}
	w.Header().Set("X-Request-Id", fmt.Sprintf("rid-%d", n))
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"detail": "No route for %s"}`, key)
		return
	}
	if reply.key != "" && r.Header.Get("Authorization") != "Bearer "+reply.key {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"detail": "Invalid API key"}`)
		return
	}
	text := reply.body
	if b, err := os.ReadFile(filepath.Join("testdata", reply.body)); err == nil {
		text = string(b)
	}
	w.Header().Set("Content-Type", "application/json")
	if strings.HasSuffix(reply.body, ".txt") {
		w.Header().Set("Content-Type", "text/event-stream")
	}
	for k, v := range reply.header {
		w.Header().Set(k, v)
	}
	status := reply.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, text)
}

// last returns the last request sent to path.
func (g *fakeGateway) last(path string) sentRequest {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.sent) - 1; i >= 0; i-- {
		if g.sent[i].Path == path {
			return g.sent[i]
		}
	}
	g.t.Fatalf("nothing was sent to %s; sent: %+v", path, g.sent)
	return sentRequest{}
}

// cliRun is how a test runs the whole command line.
type cliRun struct {
	env      map[string]string
	stdin    string
	tty      bool // stdout is a colour terminal
	stdinTTY bool
	// out, when set, is stdout in place of the buffer that cliResult
	// reports: a pipe that has closed.
	out io.Writer
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// run executes args through the real root command and error reporting.
// HOME is a fresh directory unless env sets it, so no real config leaks in.
func (c cliRun) run(t *testing.T, args ...string) cliResult {
	t.Helper()
	env := map[string]string{"HOME": t.TempDir()}
	for k, v := range c.env {
		env[k] = v
	}
	ios, in, out, errOut := iostreams.Test()
	in.WriteString(c.stdin)
	ios.SetStdoutTTY(c.tty)
	ios.SetStdinTTY(c.stdinTTY)
	if c.out != nil {
		ios.Out = c.out
	}
	f := &Factory{IO: ios, Build: buildinfo.Info{Version: "v1.2.3", Commit: "abc", Go: "go1.26.0"},
		Getenv: func(k string) string { return env[k] }}
	root := NewCmdRoot(f)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	code := reportError(errOut, cmd, err)
	return cliResult{stdout: out.String(), stderr: errOut.String(), code: code}
}

// gatewayEnv points client commands at g with a key.
func gatewayEnv(g *fakeGateway) map[string]string {
	return map[string]string{"SVC_BASE_URL": g.URL, "SVC_API_KEY": "svc_k_test"}
}

// parseOpts builds a command with a runF that captures its options, runs
// args and returns what the command would have run with.
func parseOpts[T any](t *testing.T, build func(*Factory, func(*T) error) *cobra.Command, c cliRun, args ...string) (*T, error) {
	t.Helper()
	env := map[string]string{"HOME": "/home/u"}
	for k, v := range c.env {
		env[k] = v
	}
	ios, in, _, _ := iostreams.Test()
	in.WriteString(c.stdin)
	ios.SetStdinTTY(c.stdinTTY)
	f := &Factory{IO: ios, Build: buildinfo.Info{Version: "v1.2.3"}, Getenv: func(k string) string { return env[k] }}
	var got *T
	cmd := build(f, func(o *T) error { got = o; return nil })
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	err := run(cmd, args...)
	return got, err
}
