package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// proc is a child process of the harness: the system under test.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
}

// sutCPU is where the system under test runs; the harness (load generator
// and engine) runs on loadCPU.
const (
	sutCPU  = "0"
	loadCPU = "1"
)

// start runs a program of the system under test, with its output in
// dir/name.log.
func start(dir, name string, argv []string, env ...string) (*proc, error) {
	return startOn(sutCPU, dir, name, argv, env...)
}

// startOn runs a program pinned to cpu.
func startOn(cpu, dir, name string, argv []string, env ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("taskset"); err == nil && pinning() {
		argv = append([]string{"taskset", "-c", cpu}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return &proc{name: name, cmd: cmd, log: logf}, nil
}

// stop ends the process gracefully, then for good.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.log.Close()
}

// usage is a process's CPU time and memory as /proc reports them.
type usage struct {
	cpu   time.Duration // user + system
	rss   int64         // bytes now
	hwm   int64         // peak resident bytes
	valid bool
}

// usage is the process's, with its descendants': nginx serves from a
// worker process its master forks.
func (p *proc) usage() usage {
	if p == nil || p.cmd.Process == nil {
		return usage{}
	}
	var u usage
	for _, pid := range withDescendants(p.cmd.Process.Pid) {
		u.add(readUsage(pid))
	}
	return u
}

// add counts x's figures in u: several processes together.
func (u *usage) add(x usage) {
	u.cpu += x.cpu
	u.rss += x.rss
	u.hwm += x.hwm
	u.valid = u.valid || x.valid
}

// withDescendants is pid and every process below it, as
// /proc/PID/task/TID/children lists them.
func withDescendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

func readUsage(pid int) usage {
	var u usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u
	}
	// Fields after the parenthesised command name; utime and stime are the
	// 14th and 15th fields, in clock ticks (100 per second on Linux).
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) > 13 {
		ut, _ := strconv.ParseInt(fields[11], 10, 64)
		st, _ := strconv.ParseInt(fields[12], 10, 64)
		u.cpu = time.Duration(ut+st) * 10 * time.Millisecond
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			u.rss = kb << 10
		case "VmHWM":
			u.hwm = kb << 10
		}
	}
	u.valid = true
	return u
}

// pinning reports whether the harness separates the system under test
// from itself: only with two or more cores. After the harness pinned
// itself it sees one CPU, so the decision travels in the environment.
func pinning() bool { return os.Getenv("SVC_BENCH_PINNED") != "" || numCPU() >= 2 }

// pinSelf re-runs the harness on the load core when it is not there yet.
func pinSelf() error {
	if !pinning() || os.Getenv("SVC_BENCH_PINNED") != "" {
		return nil
	}
	ts, err := exec.LookPath("taskset")
	if err != nil {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	argv := append([]string{ts, "-c", loadCPU, self}, os.Args[1:]...)
	env := append(os.Environ(), "SVC_BENCH_PINNED=1", "SVC_BENCH_CPUS="+strconv.Itoa(numCPU()), "GOMAXPROCS=1")
	return syscall.Exec(ts, argv, env)
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

// waitHTTP waits until url answers.
func waitHTTP(ctx context.Context, url string) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode < 500 {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer", url)
}

// waitWorker waits until the gateway lists a healthy worker.
func waitWorker(ctx context.Context, base, key string) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/workers", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			var out struct {
				Workers []struct {
					Status string `json:"status"`
				} `json:"workers"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			for _, w := range out.Workers {
				if w.Status == "healthy" {
					return nil
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("the worker did not connect")
}
