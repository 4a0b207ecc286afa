package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// sutCPU is where the system under test runs; the harness (load generator
// and engine) runs on loadCPU.
const (
	sutCPU  = "0"
	loadCPU = "1"
)

// stopGrace is how long a program of the system under test has to exit
// after SIGTERM before it is killed.
const stopGrace = 10 * time.Second

// placement is where the harness puts the programs it starts.
type placement struct {
	// pin puts the system under test (nginx, or gateway and worker) on
	// sutCPU and the harness's own programs on loadCPU.
	pin bool
	// cap, when set, holds the system under test to a share of a core.
	cap *cpuCap
}

// placements are the -placement flag's values.
const (
	placeOneCore = "one-core" // the system under test on one core, the harness on another
	placeNone    = "none"     // wherever the scheduler puts them
)

// newPlacement is the placement the -placement flag names, given what
// the machine allows: pinning needs two cores and taskset.
func newPlacement(name string) (placement, error) {
	switch name {
	case placeOneCore:
		_, err := exec.LookPath("taskset")
		return placement{pin: err == nil && pinning()}, nil
	case placeNone:
		return placement{}, nil
	}
	return placement{}, fmt.Errorf("-placement %q: want %s or %s", name, placeOneCore, placeNone)
}

// onCPU is how a program runs pinned to cpu, with its output in
// dir/name.log.
func (pl placement) onCPU(cpu, dir, name string, env ...string) harness.Spec {
	s := harness.Spec{Name: name, Env: env, LogFile: filepath.Join(dir, name+".log")}
	if pl.pin {
		s.Prefix = []string{"taskset", "-c", cpu}
	}
	return s
}

// sut is how a program of the system under test runs.
func (pl placement) sut(dir, name string, env ...string) harness.Spec {
	s := pl.onCPU(sutCPU, dir, name, env...)
	if pl.cap != nil {
		s.Prefix = append(s.Prefix, pl.cap.prefix()...)
	}
	return s
}

// usage is a process's CPU time and memory as /proc reports them.
type usage struct {
	cpu   time.Duration // user + system
	rss   int64         // bytes now
	hwm   int64         // peak resident bytes
	valid bool
}

// procUsage is the process's, with its descendants': nginx serves from a
// worker process its master forks.
func procUsage(p *harness.Proc) usage { return procUsageOf(p.Pid()) }

// procUsageOf is pid's usage with its descendants'.
func procUsageOf(pid int) usage {
	var u usage
	for _, pid := range withDescendants(pid) {
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
func pinSelf(pl placement) error {
	if !pl.pin || os.Getenv("SVC_BENCH_PINNED") != "" {
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
