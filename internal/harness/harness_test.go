package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for a process under test, so the
// process handling is tested without svc.
func TestMain(m *testing.M) {
	switch os.Getenv("HARNESS_TEST_CHILD") {
	case "":
		os.Exit(m.Run())
	case "log":
		fmt.Fprintln(os.Stdout, "for a person")
		fmt.Fprintln(os.Stderr, `{"msg":"listening","url":"http://127.0.0.1:1"}`)
		fmt.Fprint(os.Stderr, "panic: the last line has no newline")
		os.Exit(3)
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		fmt.Fprintln(os.Stderr, `{"msg":"ready"}`)
		time.Sleep(time.Minute) // until killed
	}
}

func child(mode string) Spec {
	return Spec{Name: mode, Bin: os.Args[0], Env: []string{"HARNESS_TEST_CHILD=" + mode}}
}

func TestLogAndExit(t *testing.T) {
	s := child("log")
	s.KeepLog = true
	s.LogFile = filepath.Join(t.TempDir(), "log")
	p, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := p.Log().WaitMsg(ctx, "listen")
	if err != nil || rec["url"] != "http://127.0.0.1:1" {
		t.Fatalf("WaitMsg = %v, %v", rec, err)
	}
	if _, err := p.Log().WaitMsg(ctx, "never"); err == nil || !strings.Contains(err.Error(), "exited before") {
		t.Fatalf("a record never logged: %v", err)
	}
	<-p.Done()
	var ee interface{ ExitCode() int }
	if !errors.As(p.Err(), &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit status %v", p.Err())
	}
	// The log file has stdout too; the kept log only stderr, its last line
	// whole although it had no newline.
	if out := p.Output(); !strings.Contains(out, "for a person") || !strings.HasSuffix(out, "no newline") {
		t.Fatalf("output %q", out)
	}
	if l := p.Log().String(); strings.Contains(l, "for a person") {
		t.Fatalf("kept log %q", l)
	}
	if c := p.Crashed(); !strings.HasPrefix(c, "panic: the last line") {
		t.Fatalf("Crashed = %q", c)
	}
	if err := p.Stop(syscall.SIGTERM, time.Second); err != p.Err() {
		t.Fatalf("Stop after exit = %v", err)
	}
}

func TestStopKillsAStubbornProcess(t *testing.T) {
	s := child("stubborn")
	s.KeepLog = true
	var g Group
	s.Group = &g
	p, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Log().WaitMsg(ctx, "ready"); err != nil {
		t.Fatal(err)
	}
	var stuck *StuckError
	if err := p.Stop(syscall.SIGTERM, 100*time.Millisecond); !errors.As(err, &stuck) || !p.Exited() {
		t.Fatalf("Stop = %v", err)
	}

	// A group stops what is left of it the same way.
	q, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Log().WaitMsg(ctx, "ready"); err != nil {
		t.Fatal(err)
	}
	g.Stop(100 * time.Millisecond)
	if !q.Exited() {
		t.Fatal("the group left a process running")
	}
}

func TestPoll(t *testing.T) {
	n := 0
	if !Eventually(time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Eventually after %d calls", n)
	}
	start := time.Now()
	if Eventually(100*time.Millisecond, func() bool { return false }) {
		t.Fatal("Eventually of a condition that never holds")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Eventually overran its timeout: %v", d)
	}
}

func TestWaitAccepted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := os.Stat("/proc/net/tcp"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := WaitAccepted(ctx, c); err == nil {
			t.Fatal("a queued connection counts as accepted")
		}
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := WaitAccepted(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// TestSvc builds svc and runs a gateway, a worker and the simulator: a
// kill -9 and a restart on the same data directory, the worker back, a
// gateway on a port of its own choosing, and clean stops.
func TestSvc(t *testing.T) {
	if testing.Short() {
		t.Skip("builds svc")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	b := &Builder{Dir: dir}
	bin, err := b.Binary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := b.Binary(ctx); again != bin || err != nil {
		t.Fatalf("second Binary = %s, %v", again, err)
	}
	var procs Group
	defer procs.Stop(10 * time.Second)
	spec := func(name string) Spec {
		return Spec{Name: name, Bin: bin, LogFile: filepath.Join(dir, name+".log"), Env: []string{"NO_COLOR=1"}, Group: &procs}
	}

	g, err := StartGateway(ctx, GatewaySpec{Spec: spec("gateway"), Data: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	key, err := g.AdminKey()
	if err != nil || !strings.HasPrefix(key, "svc_k_") {
		t.Fatalf("admin key %q, %v", key, err)
	}
	w := spec("worker")
	w.Args = []string{"--engine", "sim=tps=0,ttft=0", "--power", "off"}
	wp, err := g.StartWorker(ctx, WorkerSpec{Spec: w, Worker: "box"})
	if err != nil {
		t.Fatal(err)
	}

	addr := g.Addr
	if err := g.Kill(); err == nil {
		t.Fatal("a killed gateway exited cleanly")
	}
	if err := g.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if g.Addr != addr {
		t.Fatalf("restarted on %s, was %s", g.Addr, addr)
	}
	if again, _ := g.AdminKey(); again != key {
		t.Fatal("the restart wrote another admin key")
	}
	wctx, wcancel := context.WithTimeout(ctx, StartTimeout)
	defer wcancel()
	if err := g.WaitWorker(wctx, key, "box", wp); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.Output(), `"msg":"listening"`) || strings.Count(g.Output(), `"msg":"listening"`) != 2 {
		t.Fatalf("the log file does not hold both runs:\n%s", g.Output())
	}

	// Port 0: the gateway's own pick, read from its log.
	picked := spec("picked")
	picked.LogFile = ""
	p0, err := StartGateway(ctx, GatewaySpec{Spec: picked, Addr: "127.0.0.1:0", Data: filepath.Join(dir, "picked")})
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(p0.Addr, ":0") || p0.URL != "http://"+p0.Addr || p0.Log() == nil {
		t.Fatalf("port 0 gave %s, %s", p0.Addr, p0.URL)
	}

	sim, url, err := StartSim(ctx, SimSpec{Spec: spec("sim"), Options: "tps=0,ttft=0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitHTTP(ctx, url+"/v1/models", sim); err != nil {
		t.Fatal(err)
	}

	for _, p := range []*Proc{sim, wp, p0.Proc, g.Proc} {
		if err := p.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Errorf("%s: stop: %v", p.Name(), err)
		}
		if c := p.Crashed(); c != "" {
			t.Errorf("%s crashed: %s", p.Name(), c)
		}
	}
}
