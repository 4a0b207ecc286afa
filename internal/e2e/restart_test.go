package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// activatedServe runs `svc serve` as systemd's socket activation would:
// the listening socket f is its descriptor 3, named by LISTEN_FDS and
// LISTEN_PID. --addr names another port, which the server must not use.
func activatedServe(t *testing.T, f *os.File, data string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `export LISTEN_PID=$$ LISTEN_FDS=1; exec svc "$@"`, "sh",
		"serve", "--addr", "127.0.0.1:0", "--data", data, "--log-format", "json", "--rental-providers", "none")
	cmd.ExtraFiles = []*os.File{f}
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, out
}

// Under socket activation the socket outlives the server: a restart by
// systemd refuses no connection, and one made between the two servers is
// answered by the second.
func TestSocketActivationRestartRefusesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := ln.Addr().String()
	data := t.TempDir()

	first, out := activatedServe(t, f, data)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := harness.WaitHTTP(ctx, "http://"+addr+"/healthz", nil); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "the socket systemd passed") {
		t.Fatalf("the server does not say it uses the socket it was passed:\n%s", out)
	}
	_ = first.Process.Signal(syscall.SIGTERM)
	if err := first.Wait(); err != nil {
		t.Fatalf("first server: %v\n%s", err, out)
	}

	// Between the two servers the kernel still queues connections.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial between the two servers: %v", err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")

	second, out2 := activatedServe(t, f, data)
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the connection made between the two servers: %v\n%s", err, out2)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz = %d", resp.StatusCode)
	}
	_ = second.Process.Signal(syscall.SIGTERM)
	if err := second.Wait(); err != nil {
		t.Fatalf("second server: %v\n%s", err, out2)
	}
}

// A gateway restarted on its data directory lists the workers the old one
// listed: offline (one that was connected, since the stop), until each
// reconnects, as the README says offline workers stay listed for 24 h.
func TestOfflineWorkersStayListedAcrossARestart(t *testing.T) {
	s := startServer(t, "", "--start-grace", "0")
	key := s.adminKey()
	gone := startWorker(t, s.URL, s.tokenFile(), "gone", "--engine", "sim=tps=0,ttft=0")
	startWorker(t, s.URL, s.tokenFile(), "away", "--engine", "sim=tps=0,ttft=0")
	if err := gone.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wentAt := s.workerNamed(key, "gone", statusIs("offline"))["offline_since"]
	if err := s.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// On another port: the worker still running cannot find it.
	s = startServer(t, s.Data, "--start-grace", "0")
	listed := map[string]map[string]any{}
	for _, w := range s.workers(key) {
		listed[w["worker_name"].(string)] = w
	}
	if len(listed) != 2 || listed["gone"]["status"] != "offline" || listed["gone"]["offline_since"] != wentAt ||
		listed["away"]["status"] != "offline" || listed["away"]["offline_since"] == nil {
		t.Fatalf("after the restart: %v", listed)
	}
	if ms, _ := listed["away"]["models"].([]any); len(ms) == 0 {
		t.Errorf("a remembered worker lists no models: %v", listed["away"])
	}
	startWorker(t, s.URL, s.tokenFile(), "gone", "--engine", "sim=tps=0,ttft=0")
	s.workerNamed(key, "gone", statusIs("healthy"))
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key)); r.Status != 200 || r.Header.Get("X-Worker-Name") != "gone" {
		t.Fatalf("served by %q: %d %s", r.Header.Get("X-Worker-Name"), r.Status, r.Body)
	}
}

// A worker's events pair every connect with a disconnect, also across
// its gateway's crash and its gateway's restart, which nobody could
// record as they happened: the restarted gateway records each when the
// worker reconnects, before the connect, dated when the link ended, or
// for a worker that does not come back, when its start grace ends. Such
// a worker is listed offline after a crash as after a stop.
func TestWorkerEventsCoverGatewayRestarts(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	addr := strings.TrimPrefix(s.URL, "http://")
	startWorker(t, s.URL, s.tokenFile(), "steady", "--engine", "sim=tps=0,ttft=0")
	gone := startWorker(t, s.URL, s.tokenFile(), "gone", "--engine", "sim=tps=0,ttft=0")
	query := "?worker_id=" + s.workerNamed(key, "steady", statusIs("healthy"))["worker_id"].(string)
	goneQuery := "?worker_id=" + s.workerNamed(key, "gone", statusIs("healthy"))["worker_id"].(string)
	// Listed is written, and survives the kill.
	s.waitEvent(key, query, func(e map[string]any) bool { return e["event_type"] == "connected" })
	s.waitEvent(key, goneQuery, func(e map[string]any) bool { return e["event_type"] == "connected" })
	// The gateway records its fleet within 5 s of a change, for a start
	// after a crash.
	time.Sleep(8 * time.Second)
	// The events are written a moment after they happen.
	eventsAre := func(what, want string) []map[string]any {
		t.Helper()
		var evs []map[string]any
		if !harness.Eventually(10*time.Second, func() bool {
			evs = s.events(key, query)
			return linkEvents(evs) == want
		}) {
			t.Fatalf("%s, events %s, want %s:\n%v", what, linkEvents(evs), want, evs)
		}
		return evs
	}

	// One worker goes with the gateway, and does not come back.
	if err := gone.stop(syscall.SIGKILL); err == nil {
		t.Fatal("the worker was not killed")
	}
	if err := s.stop(syscall.SIGKILL); err == nil {
		t.Fatal("the gateway was not killed")
	}
	killed := time.Now()
	time.Sleep(500 * time.Millisecond)
	s = startServer(t, s.Data, "--addr", addr, "--start-grace", "2s")
	s.workerNamed(key, "steady", statusIs("healthy"))
	// The worker that did not come back is listed offline, since about
	// the crash, and gets its disconnect when the start grace ends.
	if w := s.workerNamed(key, "gone", statusIs("offline")); w["offline_since"] == nil {
		t.Fatalf("the worker gone with the gateway: %v", w)
	}
	goneEvs := []map[string]any{}
	if !harness.Eventually(10*time.Second, func() bool {
		goneEvs = s.events(key, goneQuery)
		return linkEvents(goneEvs) == "disconnected connected"
	}) {
		t.Fatalf("the events of the worker gone with the gateway: %v", goneEvs)
	}
	if d, _ := goneEvs[0]["detail"].(string); !strings.Contains(d, "went down without stopping") || !strings.Contains(d, "has not reconnected") {
		t.Fatalf("the disconnect of the worker gone with the gateway: %v", goneEvs[0])
	}
	evs := eventsAre("after the crash", "connected disconnected connected")
	crash := evs[1]
	at, _ := time.Parse(time.RFC3339Nano, crash["created_at"].(string))
	if d, _ := crash["detail"].(string); d != "the link ended when the gateway it was on went down without stopping (a crash, or a kill)" ||
		crash["transient"] == true || at.Before(killed.Add(-time.Second)) || at.After(killed.Add(time.Second)) {
		t.Fatalf("the crash's disconnect %v, want one dated about %v", crash, killed.UTC())
	}

	if err := s.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s = startServer(t, s.Data, "--addr", addr, "--start-grace", "2s")
	s.workerNamed(key, "steady", statusIs("healthy"))
	evs = eventsAre("after the restart", "connected disconnected connected disconnected connected")
	if d, _ := evs[1]["detail"].(string); d != "the link ended when the gateway it was on stopped" {
		t.Fatalf("the restart's disconnect %v", evs[1])
	}
}
