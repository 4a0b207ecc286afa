// Command bench measures what a request pays for going through svc rather
// than straight to the engine, in one run on one machine: the same load
// direct, through nginx as a plain reverse proxy (when installed), and
// through svc serve and svc worker.
//
//	go run ./bench                # the full run (several minutes)
//	go run ./bench -short         # every scenario at small scale
//	go run ./bench -only unary-1000rps,stream-50-chunks
//	go run ./bench -short -cluster   # with the paths through two replicas on PostgreSQL
//	go run ./bench -only overload -overload-for 30s
//
// With two or more cores the harness (load generator and engine) runs on
// CPU 1 and the system under test on CPU 0 with GOMAXPROCS=1, the same for
// every path, so that the paths compete for the same CPU (-placement
// one-core, the default); -placement none leaves them to the scheduler.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
	"github.com/svc-dev/svc/internal/pgtest"
)

// rig holds what every scenario shares.
type rig struct {
	scale  scale
	dir    string
	bin    string
	engine *engine
	paths  []*path
	client *http.Client
	report report
}

func (h *rig) log(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func (h *rig) path(name string) *path {
	for _, p := range h.paths {
		if p.name == name {
			return p
		}
	}
	return nil
}

// report is the JSON the harness writes.
type report struct {
	Machine   machine     `json:"machine"`
	Short     bool        `json:"short"`
	Repeat    int         `json:"repeat"`
	Duration  string      `json:"duration"`
	Skipped   []string    `json:"skipped,omitempty"`
	Scenarios []*scenario `json:"scenarios"`
	Usage     *usageBench `json:"usage,omitempty"`
}

type machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	Kernel    string `json:"kernel"`
	Pinned    bool   `json:"pinned"`
	// SUTCPU is the share of a core the system under test was held to
	// (-sut-cpu); zero when it was not.
	SUTCPU float64 `json:"sut_cpu,omitempty"`
	Time   string  `json:"time"`
}

// numCPU is the machine's CPU count, as seen before the harness pinned
// itself to one.
func numCPU() int {
	if n, err := strconv.Atoi(os.Getenv("SVC_BENCH_CPUS")); err == nil && n > 0 {
		return n
	}
	return runtime.NumCPU()
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	short := flag.Bool("short", false, "run every scenario at small scale (about a minute)")
	out := flag.String("out", filepath.Join("bench", "results", "latest.json"), "where to write the JSON results")
	only := flag.String("only", "", "comma-separated scenarios to run, each a name's beginning, or a whole name when it ends in $ (default all)")
	repeat := flag.Int("repeat", 0, "runs per path and scenario (default 3, 1 with -short)")
	dur := flag.Duration("duration", 0, "measured time per run (default 10s, 500ms with -short)")
	overFor := flag.Duration("overload-for", 0, "overload scenario: time at 1.5x capacity (default 1m, 1.5s with -short)")
	recoverFor := flag.Duration("recover-for", 0, "overload scenario: time at 0.5x capacity after it (default 20s, 1s with -short)")
	overTimeout := flag.Duration("overload-timeout", 0, "overload scenario: each request's client timeout (default 1s)")
	overHold := flag.Duration("overload-hold", 0, "overload scenario: the gateway's --queue-hold (default 100ms)")
	overLatency := flag.Duration("overload-latency", 0, "overload scenario: how long the engine takes per request, so that its slots, not the CPU, set the capacity (default: as fast as it answers)")
	conns := flag.Int("conns", 0, "connections of the closed-loop scenarios (default 64, 8 with -short)")
	profile := flag.String("profile", "", "also profile the gateway and worker under load and write the profiles to this directory")
	show := flag.String("show", "", "print the table of a results file instead of running")
	cluster := flag.Bool("cluster", true, "also measure svc through a cluster of two replicas on PostgreSQL, when it is installed: requests to the leader (svc-leader) and to the standby, which forwards them (svc-forwarded); -short leaves them out unless this is given")
	svcSource := flag.String("svc-source", "", "build the svc under test from this module (a checkout of another commit, for a before and after) instead of this one")
	place := flag.String("placement", placeOneCore, "where the programs run: "+placeOneCore+
		" (nginx, or svc's gateway and worker with GOMAXPROCS=1 each, on CPU 0; engine and load on CPU 1) or "+placeNone)
	sutCPU := flag.Float64("sut-cpu", 0, "hold the system under test (nginx, or svc's gateway and worker together) to this share of one core, through a CPU cgroup, so that the load generator can outpace it: CPU-bound overload on a machine of two cores (default: no limit)")
	flag.Parse()
	if *show != "" {
		return showResults(*show, os.Stdout)
	}
	pl, err := newPlacement(*place)
	if err != nil {
		return err
	}
	if err := pinSelf(pl); err != nil {
		return err
	}
	if *sutCPU > 0 {
		if pl.cap, err = newCPUCap(*sutCPU); err != nil {
			return err
		}
		defer pl.cap.close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	raiseFileLimit()

	sc := fullScale()
	if *short {
		sc = shortScale()
	}
	if *repeat > 0 {
		sc.repeat = *repeat
	}
	if *dur > 0 {
		sc.duration = *dur
	}
	if *conns > 0 {
		sc.conc = *conns
	}
	if *overFor > 0 {
		sc.overloadFor = *overFor
	}
	if *recoverFor > 0 {
		sc.recoverFor = *recoverFor
	}
	if *overTimeout > 0 {
		sc.overloadTimeout = *overTimeout
	}
	sc.overloadLatency = *overLatency
	if *overHold > 0 {
		sc.overloadHold = *overHold
	}
	want := func(name string) bool {
		return *only == "" || slices.ContainsFunc(strings.Split(*only, ","), func(s string) bool { return scenarioMatches(name, s) })
	}
	sc.profile = *profile
	sc.place = pl
	sc.svcSource = *svcSource
	// The cluster's paths double a short run's time: there they are
	// measured only when asked for.
	sc.cluster = *cluster && (!*short || flagGiven("cluster"))
	return bench(ctx, sc, *out, want, os.Stdout)
}

// scenarioMatches reports whether -only's item s picks the scenario name:
// s is the name's beginning, so that "unary" picks every rate, or the
// whole name when it ends in $, so that "max-throughput$" leaves out
// "max-throughput-24kb".
func scenarioMatches(name, s string) bool {
	if whole, ok := strings.CutSuffix(s, "$"); ok {
		return name == whole
	}
	return strings.HasPrefix(name, s)
}

// flagGiven reports whether the command line set the flag called name.
func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// bench runs the scenarios want selects and writes the results.
func bench(ctx context.Context, sc scale, out string, want func(string) bool, w io.Writer) error {
	dir, err := os.MkdirTemp("", "svc-bench-")
	if err != nil {
		return err
	}
	defer func() {
		if os.Getenv("SVC_BENCH_KEEP") == "" {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintln(os.Stderr, "bench: kept", dir)
		}
	}()
	client := newClient()
	h := &rig{scale: sc, dir: dir, client: client}
	h.report = report{Machine: readMachine(sc.place), Short: sc.short, Repeat: sc.repeat, Duration: sc.duration.String()}

	if sc.svcSource != "" {
		h.log("building svc from " + sc.svcSource)
	} else {
		h.log("building svc")
	}
	if h.bin, err = (&harness.Builder{Dir: dir, Root: sc.svcSource, Log: os.Stderr}).Binary(ctx); err != nil {
		return err
	}
	if h.engine, err = startEngine("tps=0,ttft=0,rtf=0"); err != nil {
		return err
	}
	defer h.engine.close()

	h.paths = []*path{directPath(h.engine)}
	if np, err := nginxPath(sc.place, dir, h.engine); err != nil {
		return err
	} else if np == nil {
		h.report.Skipped = append(h.report.Skipped, "nginx: not installed, so the plain-proxy floor is not measured")
		h.log("nginx not installed: skipping the nginx path")
	} else {
		h.paths = append(h.paths, np)
	}
	sp, err := svcPath(sc.place, dir, h.bin, h.engine.url, svcOptions{})
	if err != nil {
		return err
	}
	h.paths = append(h.paths, sp)
	defer func() {
		for _, p := range h.paths {
			p.stop()
		}
	}()
	if sc.cluster {
		if err := h.addCluster(); err != nil {
			return err
		}
	}

	// Results are saved after every scenario, so an interrupted run keeps
	// what it measured.
	add := func(s *scenario) {
		if s != nil {
			h.report.Scenarios = append(h.report.Scenarios, s)
			if err := h.save(out); err != nil {
				h.log("save results: %v", err)
			}
		}
	}
	for _, rate := range sc.rates {
		if name := fmt.Sprintf("unary-%grps", rate); want(name) {
			add(h.unary(ctx, rate))
		}
	}
	if name := fmt.Sprintf("unary-%grps-50ms", sc.slowRate); want(name) {
		add(h.unarySlow(ctx, sc.slowRate))
	}
	if want("max-throughput") {
		add(h.maxThroughput(ctx))
	}
	if want("max-throughput-24kb") {
		add(h.conversation(ctx))
	}
	if want("refusal-cost") {
		add(h.refusalCost(ctx))
	}
	if want("stream-50-chunks") {
		add(h.streaming(ctx))
	}
	if want("cancel-to-engine") {
		add(h.cancels(ctx))
	}
	if want("saturation-429") {
		add(h.saturation(ctx))
	}
	if want("overload") {
		add(h.overload(ctx))
	}
	if want("transcribe-1mb") {
		add(h.transcribe(ctx))
	}
	if want("speech-700kb") {
		add(h.speech(ctx))
	}
	if want("upload-25mb") {
		add(h.uploads(ctx))
	}
	for _, n := range sc.streams {
		if name := fmt.Sprintf("open-streams-%d", n); want(name) {
			add(h.openStreams(ctx, n))
		}
	}
	if sc.profile != "" {
		if err := h.profileSvc(ctx, sc.profile, want("stream-50-chunks")); err != nil {
			return err
		}
	}
	if want("usage") {
		ub, err := benchUsage(dir, sc.usage)
		if err != nil {
			return err
		}
		h.report.Usage = ub
	}
	printTable(w, &h.report)
	if err := h.save(out); err != nil {
		return err
	}
	if out != "" {
		h.log("results written to %s", out)
	}
	return ctx.Err()
}

// addCluster adds the paths through a cluster of two replicas on
// PostgreSQL, or says why they are skipped: PostgreSQL is not installed,
// or the svc under test (another checkout's) cannot run as a cluster.
func (h *rig) addCluster() error {
	if _, err := pgtest.BinDir(); err != nil {
		h.report.Skipped = append(h.report.Skipped, pathLeader+", "+pathForwarded+": PostgreSQL is not installed, so forwarding through a standby replica is not measured")
		h.log("PostgreSQL not installed: skipping the %s and %s paths", pathLeader, pathForwarded)
		return nil
	}
	h.log("starting a cluster of two replicas on PostgreSQL")
	lp, fp, err := clusterPaths(h.scale.place, h.dir, h.bin, h.engine.url)
	switch {
	case err != nil && h.scale.svcSource != "":
		h.report.Skipped = append(h.report.Skipped, pathLeader+", "+pathForwarded+": the svc of "+h.scale.svcSource+" did not run as a cluster: "+err.Error())
		h.log("skipping the cluster paths: %v", err)
		return nil
	case err != nil:
		return fmt.Errorf("cluster: %w", err)
	}
	h.paths = append(h.paths, lp, fp)
	return nil
}

// showResults prints the table of a results file.
func showResults(file string, w io.Writer) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	printTable(w, &r)
	return nil
}

// save writes the results so far to out, when set.
func (h *rig) save(out string) error {
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(h.report, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}

func readMachine(pl placement) machine {
	m := machine{CPUs: numCPU(), GoVersion: runtime.Version(), Pinned: pl.pin, Time: time.Now().UTC().Format(time.RFC3339)}
	if pl.cap != nil {
		m.SUTCPU = pl.cap.share
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// raiseFileLimit lifts the open-file limit as far as it goes: thousands of
// streams need as many sockets, in the harness and its children. The hard
// limit itself can be raised with the privilege to, up to the kernel's
// nr_open.
func raiseFileLimit() {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > r.Max {
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}) == nil {
				return
			}
		}
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	}
}

// fileLimit is the open-file limit in force.
func fileLimit() uint64 {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return 0
	}
	return r.Cur
}
