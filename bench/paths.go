package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/engine/sim"
	"github.com/svc-dev/svc/internal/harness"
	"github.com/svc-dev/svc/internal/pgtest"
)

// engine is the simulator's OpenAI-compatible HTTP face, in the harness
// process (on the load core). It notes when each request's context ends,
// which is when a cancel reached it.
type engine struct {
	srv    *http.Server
	url    string
	served chan struct{}

	mu    sync.Mutex
	ended []time.Time
}

func startEngine(opts string) (*engine, error) {
	cfg, err := sim.ParseOptions(opts)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &engine{url: "http://" + ln.Addr().String(), served: make(chan struct{})}
	h := sim.NewHandler(cfg)
	e.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.Context().Err() != nil {
			e.mu.Lock()
			e.ended = append(e.ended, time.Now())
			e.mu.Unlock()
		}
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(e.served)
		_ = e.srv.Serve(ln) // ErrServerClosed once closed
	}()
	return e, nil
}

// cancelled returns, and forgets, when cancelled requests ended.
func (e *engine) cancelled() []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.ended
	e.ended = nil
	return out
}

func (e *engine) close() {
	_ = e.srv.Close()
	<-e.served
}

// path is one way to reach the engine: direct, through nginx, through
// svc, or through a cluster of svc replicas.
type path struct {
	name  string
	base  string // where requests go
	key   string // API key, svc only
	procs []*harness.Proc
	group harness.Group     // the processes this path started, to stop
	pprof map[string]string // process name -> profiling address, svc only

	// A cluster's database, whose CPU time is reported apart from the
	// system under test's; closed on stop by the path that owns it.
	db     *pgtest.Server
	ownsDB bool
	// settle, when set, runs after each measured run: what the system
	// under test still does for that run is done before the next.
	settle func()
}

func (p *path) stop() {
	p.group.Stop(stopGrace)
	if p.ownsDB && p.db != nil {
		if err := p.db.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: stop PostgreSQL: %v\n", p.name, err)
		}
	}
}

func (p *path) usage() usage { return total(p.usageEach()) }

// usageEach is each process's usage by its role: the start of its name
// (gateway, worker).
func (p *path) usageEach() map[string]usage {
	out := make(map[string]usage, len(p.procs))
	for _, pr := range p.procs {
		role, _, _ := strings.Cut(pr.Name(), "-")
		u := out[role]
		u.add(procUsage(pr))
		out[role] = u
	}
	return out
}

// cpuPer is each role's CPU time from one reading to the next, in
// microseconds a request over n requests; roles not read validly both
// times are left out.
func cpuPer(from, to map[string]usage, n int) map[string]float64 {
	out := map[string]float64{}
	if n <= 0 {
		return out
	}
	for role, u := range to {
		if b, ok := from[role]; ok && b.valid && u.valid {
			out[role] = float64((u.cpu - b.cpu).Microseconds()) / float64(n)
		}
	}
	return out
}

// total is the usage of every role together.
func total(each map[string]usage) usage {
	var u usage
	for _, x := range each {
		u.add(x)
	}
	return u
}

func directPath(e *engine) *path { return &path{name: "direct", base: e.url} }

// nginxBinary finds nginx, which Debian installs outside a user's PATH;
// "" when it is not installed.
func nginxBinary() string {
	if bin, err := exec.LookPath("nginx"); err == nil {
		return bin
	}
	for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// nginxPath is nginx as a plain reverse proxy with keep-alive on both hops;
// nil when nginx is not installed.
func nginxPath(pl placement, dir string, e *engine) (*path, error) {
	bin := nginxBinary()
	if bin == "" {
		return nil, nil
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	ndir := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(filepath.Join(ndir, "tmp"), 0o755); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 65536; }
http {
  access_log off;
  client_body_temp_path %[1]s/tmp;
  proxy_temp_path %[1]s/tmp;
  fastcgi_temp_path %[1]s/tmp;
  uwsgi_temp_path %[1]s/tmp;
  scgi_temp_path %[1]s/tmp;
  upstream engine { server %[2]s; keepalive 512; }
  server {
    listen %[3]s;
    keepalive_requests 1000000;
    client_max_body_size 32m;
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 3600s;
    }
  }
}
`, ndir, strings.TrimPrefix(e.url, "http://"), addr)
	cf := filepath.Join(ndir, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p := &path{name: "nginx", base: "http://" + addr}
	s := pl.sut(dir, "nginx")
	s.Bin, s.Args, s.Group = bin, []string{"-c", cf, "-p", ndir}, &p.group
	pr, err := harness.Start(s)
	if err != nil {
		return nil, err
	}
	p.procs = []*harness.Proc{pr}
	// The engine has no /health: nginx answers once it relays the 404.
	if err := harness.WaitHTTP(context.Background(), p.base+"/health", pr); err != nil {
		p.stop()
		return nil, fmt.Errorf("nginx: %w", err)
	}
	return p, nil
}

// svcOptions tune the svc path of a scenario.
type svcOptions struct {
	maxConcurrent int
	queueHold     time.Duration
	// maxConnections is the gateway's --max-connections; 0 leaves the
	// default.
	maxConnections int
}

// svcPath is svc serve and one svc worker relaying to the engine with the
// openai adapter, both on the system-under-test core.
func svcPath(pl placement, dir, bin, engineURL string, o svcOptions) (*path, error) {
	ctx := context.Background()
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	data := filepath.Join(dir, "svc-data-"+port)
	_ = os.RemoveAll(data)
	gwProf, _ := harness.FreeAddr()
	wkProf, _ := harness.FreeAddr()
	p := &path{name: "svc", pprof: map[string]string{"gateway": gwProf, "worker": wkProf}}
	gs := pl.sut(dir, "gateway-"+port, "GOMAXPROCS=1")
	gs.Bin, gs.Group = bin, &p.group
	gs.Args = []string{"--log-level", "warn", "--pprof-addr", gwProf}
	if o.queueHold > 0 {
		gs.Args = append(gs.Args, "--queue-hold", o.queueHold.String())
	}
	if o.maxConnections > 0 {
		gs.Args = append(gs.Args, "--max-connections", strconv.Itoa(o.maxConnections))
	}
	gw, err := harness.StartGateway(ctx, harness.GatewaySpec{Spec: gs, Addr: addr, Data: data})
	if err != nil {
		return nil, err
	}
	p.base, p.procs = gw.URL, []*harness.Proc{gw.Proc}
	if p.key, err = gw.AdminKey(); err != nil {
		p.stop()
		return nil, err
	}
	if o.maxConcurrent == 0 {
		o.maxConcurrent = 16384
	}
	ws := pl.sut(dir, "worker-"+port, "GOMAXPROCS=1")
	ws.Group = &p.group
	ws.Args = []string{"--max-concurrent", fmt.Sprint(o.maxConcurrent), "--engine", "openai=" + engineURL,
		"--log-level", "warn", "--pprof-addr", wkProf}
	wk, err := gw.StartWorker(ctx, harness.WorkerSpec{Spec: ws, Worker: "bench"})
	if err != nil {
		p.stop()
		return nil, err
	}
	p.procs = append(p.procs, wk)
	return p, nil
}

// simProcess is `svc sim` in its own process on the load core: an engine
// for scenarios whose sockets would not fit in the harness's open-file
// limit beside the clients' own.
func simProcess(pl placement, dir, bin string) (*harness.Proc, string, error) {
	s := pl.onCPU(loadCPU, dir, "sim", "GOMAXPROCS=1")
	s.Bin = bin
	return harness.StartSim(context.Background(), harness.SimSpec{Spec: s, Options: "tps=0,ttft=0"})
}
