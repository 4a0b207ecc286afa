// Command reliability runs svc under faults, load and hostile input and
// checks that it loses no accounted request, serves every stream exactly,
// answers bad input with the spec's status and keeps its secrets: real
// `svc serve` and `svc worker` processes on loopback, killed, cut off and
// attacked the way production would.
//
//	go run ./reliability                 # the full run (about 20 minutes)
//	go run ./reliability -short          # every check at small scale
//	go run ./reliability -only crash,hostile
//	go run ./reliability -show reliability/results/latest.json
//
// Each check reports its figures and the properties it found violated;
// the command exits 1 when any was. docs/reliability.md has a full run's
// table.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reliability:", err)
		os.Exit(1)
	}
}

func run() error {
	short := flag.Bool("short", false, "run every check at small scale (a minute or two)")
	out := flag.String("out", filepath.Join("reliability", "results", "latest.json"), "where to write the JSON results")
	only := flag.String("only", "", "comma-separated check names to run (default all): "+strings.Join(checkNames(), ","))
	show := flag.String("show", "", "print the table of a results file instead of running")
	flag.Parse()
	if *show != "" {
		b, err := os.ReadFile(*show)
		if err != nil {
			return err
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("read %s: %w", *show, err)
		}
		printTable(os.Stdout, &r)
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	want := func(name string) bool {
		return *only == "" || slices.Contains(strings.Split(*only, ","), name)
	}
	r, err := suite(ctx, *short, want, *out, os.Stderr)
	if err != nil {
		return err
	}
	printTable(os.Stdout, r)
	if n := r.failures(); n > 0 {
		return fmt.Errorf("%d properties violated", n)
	}
	return nil
}

// check is one part of the suite.
type check struct {
	name string
	run  func(ctx context.Context, h *rig, r *result) error
}

// checks is the suite, in the order it runs.
func checks() []check {
	return []check{
		{"crash", crashGateway},
		{"worker-kill", crashWorker},
		{"restart", restartGateway},
		{"link-faults", linkFaults},
		{"hostile", hostileInput},
		{"secrets", secrets},
		{"soak", soak},
		{"hung-engine", hungEngine},
		{"frozen-worker", frozenWorker},
		{"clock-step", clockStep},
		{"full-disk", fullDisk},
		{"stalled-clients", stalledClients},
		{"big-fleet", bigFleet},
		{"cluster-crash", clusterCrash},
		{"cluster-db", clusterDB},
		{"cluster-rental", clusterRental},
		{"cluster-hostile", clusterHostile},
		{"cluster-links", clusterLinks},
	}
}

func checkNames() []string {
	var names []string
	for _, c := range checks() {
		names = append(names, c.name)
	}
	return names
}

// newHarness builds svc into a fresh working directory; close stops
// whatever the checks left running and removes the directory (unless
// SVC_RELIABILITY_KEEP is set, for reading the logs).
func newHarness(ctx context.Context, short bool, logw io.Writer) (h *rig, close func(), err error) {
	raiseFileLimit()
	dir, err := os.MkdirTemp("", "svc-reliability-")
	if err != nil {
		return nil, nil, err
	}
	h = &rig{short: short, dir: dir, logw: logw}
	close = func() {
		h.procs.Stop(stopGrace)
		if os.Getenv("SVC_RELIABILITY_KEEP") == "" {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintln(logw, "reliability: kept", dir)
		}
	}
	h.logf("building svc")
	if h.bin, err = (&harness.Builder{Dir: dir, Log: logw}).Binary(ctx); err != nil {
		close()
		return nil, nil, err
	}
	return h, close, nil
}

// suite runs the checks want selects and saves the report after each, so
// an interrupted run keeps what it found.
func suite(ctx context.Context, short bool, want func(string) bool, out string, logw io.Writer) (*report, error) {
	h, done, err := newHarness(ctx, short, logw)
	if err != nil {
		return nil, err
	}
	defer done()
	r := &report{Machine: readMachine(), Short: short}
	for _, c := range checks() {
		if !want(c.name) || ctx.Err() != nil {
			continue
		}
		r.Checks = append(r.Checks, h.runCheck(ctx, c))
		if err := r.save(out); err != nil {
			h.logf("save results: %v", err)
		}
	}
	return r, ctx.Err()
}

// runCheck runs one check and times it. A check that could not run is a
// failure, not a pass: its error is recorded as one.
func (h *rig) runCheck(ctx context.Context, c check) *result {
	h.logf("%s: starting", c.name)
	res := &result{Name: c.name}
	start := time.Now()
	if err := c.run(ctx, h, res); err != nil {
		res.fail("did not complete: %v", err)
	}
	res.Seconds = time.Since(start).Round(100 * time.Millisecond).Seconds()
	h.logf("%s: %d failures in %.1fs", c.name, res.failed(), res.Seconds)
	return res
}
