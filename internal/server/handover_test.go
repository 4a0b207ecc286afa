//go:build unix

package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/harness"
)

// The server replacing another takes its listening socket: connections
// that arrive once the old one has stopped accepting, and after it has
// closed its copy, queue for the new one instead of being refused.
func TestHandoverKeepsTheSocketOpenForTheNextServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := &keptListener{TCPListener: ln.(*net.TCPListener)}
	addr := old.Addr().String()
	// Unix socket paths are short; t.TempDir's may not be.
	dir, err := os.MkdirTemp("", "ho")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, HandoverFile)

	if got, from, err := takeOver(path, addr); got != nil || from != nil || err != nil {
		t.Fatalf("takeOver with no server = %v, %v, %v; want nothing", got, from, err)
	}
	ho, err := startHandover(path, old.TCPListener, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got, from, err := takeOver(path, "127.0.0.1:1"); got != nil || err != nil || from == nil || from.Addr != addr {
		t.Fatalf("takeOver for another address = %v, %+v, %v; want the other's address and no socket", got, from, err)
	}
	taken, from, err := takeOver(path, addr)
	if err != nil || taken == nil {
		t.Fatalf("takeOver = %v, %v", taken, err)
	}
	defer taken.Close()
	if from.PID != os.Getpid() {
		t.Fatalf("handover from pid %d, want %d", from.PID, os.Getpid())
	}

	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
	}
	early := dialAndSend(t, addr, "early")
	ho.close()
	if !ho.handedOver() {
		t.Fatal("handedOver = false after a server took the socket")
	}
	if _, err := old.release(ho.handedOver()); err != nil {
		t.Fatal(err)
	}
	late := dialAndSend(t, addr, "late")
	for _, want := range []string{"early", "late"} {
		c, err := taken.Accept()
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(want))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
			t.Fatalf("read %q, %v; want %q", buf, err, want)
		}
		c.Close()
	}
	early.Close()
	late.Close()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("handover socket left behind: %v", err)
	}
}

func dialAndSend(t *testing.T, addr, msg string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial while the socket is handed over: %v", err)
	}
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSameAddress(t *testing.T) {
	tests := []struct {
		got  string
		want string
		same bool
	}{
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"127.0.0.1:8080", "localhost:8080", true},
		{"127.0.0.1:8080", "127.0.0.1:8081", false},
		{"127.0.0.1:8080", "127.0.0.1:0", false},
		{"127.0.0.1:8080", ":8080", false},
		{"[::]:8080", ":8080", true},
		{"[::]:8080", "0.0.0.0:8080", true},
		{"[::]:8080", "127.0.0.1:8080", false},
	}
	for _, tt := range tests {
		got, err := net.ResolveTCPAddr("tcp", tt.got)
		if err != nil {
			t.Fatal(err)
		}
		if same := sameAddress(got, tt.want); same != tt.same {
			t.Errorf("sameAddress(%s, %q) = %v, want %v", tt.got, tt.want, same, tt.same)
		}
	}
}

// A client that sends its next request on a kept-alive connection as the
// drain begins gets its answer, which closes the connection; it is not
// cut off by the drain closing the connection under it.
func TestDrainAnswersTheNextRequestOfAKeptAliveConnection(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	s := &Server{log: slog.New(slog.DiscardHandler), metrics: newMetrics(buildinfo.Info{}),
		watch: newClientWatch(time.Second), quiet: time.Hour}
	ok := func(c *call) error {
		writeJSON(c.ctx, http.StatusOK, map[string]bool{"ok": true})
		return nil
	}
	s.public = s.newListener(newMux([]*route{
		{method: "GET", path: "/ok", access: accessPublic, handle: ok},
		{method: "GET", path: "/slow", access: accessPublic, handle: func(c *call) error {
			close(started)
			<-release
			return ok(c)
		}},
	}), false)
	s.console = s.newListener(newMux(nil), true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.ServePublic(ln) })
	defer wg.Wait()

	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		return c, bufio.NewReader(c)
	}
	send := func(c net.Conn, path string) {
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	read := func(r *bufio.Reader) *http.Response {
		t.Helper()
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp
	}
	kept, keptR := dial()
	send(kept, "/ok")
	if resp := read(keptR); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("before the drain: %d, close %v", resp.StatusCode, resp.Close)
	}
	busy, busyR := dial()
	send(busy, "/slow")
	// In flight before the drain begins: a connection still in the
	// listener's queue when the drain closes the listener is reset by the
	// kernel, as any server's is.
	<-started

	drained := make(chan error, 1)
	go func() { drained <- s.Shutdown(context.Background()) }()
	for !s.draining.Load() {
		time.Sleep(time.Millisecond)
	}
	send(kept, "/ok")
	if resp := read(keptR); resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("during the drain: %d, close %v; want 200 closing the connection", resp.StatusCode, resp.Close)
	}
	close(release)
	if resp := read(busyR); resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("in flight: %d, close %v; want 200 closing the connection", resp.StatusCode, resp.Close)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
}

// A cluster's replica that drains answers the connections made meanwhile
// at once with a 503 (its load balancer moves on) instead of leaving them
// queued until it exits; a server that takes the socket over stops that,
// and gets the connections from then on.
func TestDrainingReplicaAnswersNewConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kl := &keptListener{TCPListener: ln.(*net.TCPListener), drainAnswer: errReplicaStopping}
	addr := kl.Addr().String()
	if err := kl.Close(); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	for range 3 {
		resp, err := hc.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "replica is stopping") {
			t.Fatalf("during the drain: %d %v %s", resp.StatusCode, resp.Header, body)
		}
	}

	// Closed, it takes nothing itself, whatever the refuser's deadlines.
	if c, err := kl.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v, %v; want net.ErrClosed", c, err)
	}
	// A client that connects and says nothing holds a refusal open for
	// up to refuseWithin: the handover does not wait for it.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for deadline := time.Now().Add(10 * time.Second); kl.refuser.answered.Load() < 4; {
		if time.Now().After(deadline) {
			t.Fatal("the refuser never took the silent connection")
		}
		time.Sleep(5 * time.Millisecond)
	}

	dir, err := os.MkdirTemp("", "ho")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, HandoverFile)
	ho, err := startHandover(path, kl.TCPListener, kl.stopRefusing, kl.resumeRefusing, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	taken, _, err := takeOver(path, addr)
	if err != nil || taken == nil {
		t.Fatalf("takeOver = %v, %v", taken, err)
	}
	defer taken.Close()
	ho.close()
	after := dialAndSend(t, addr, "after")
	defer after.Close()
	_ = taken.SetDeadline(time.Now().Add(10 * time.Second))
	c, err := taken.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, len("after"))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "after" {
		t.Fatalf("the new server read %q, %v", buf, err)
	}
	c.Close()
	if n, err := kl.release(true); n != 4 || err != nil {
		t.Fatalf("release = %d, %v; want the 4 taken during the drain", n, err)
	}
}

// A handover that stops a draining replica's refusals and then cannot pass
// the socket (the taker went) leaves the socket this replica's alone: the
// connections that arrive are answered with the 503 again, not left
// queued until it exits.
func TestFailedHandoverRefusesAgain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kl := &keptListener{TCPListener: ln.(*net.TCPListener), drainAnswer: errReplicaStopping}
	addr := kl.Addr().String()
	if err := kl.Close(); err != nil {
		t.Fatal(err)
	}
	ho := &handover{sock: kl.TCPListener, log: slog.New(slog.DiscardHandler), beforeGive: kl.stopRefusing, afterFail: kl.resumeRefusing}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fds[1]) // the taker is gone before the socket is passed
	f := os.NewFile(uintptr(fds[0]), "handover")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := ho.give(c); err == nil || ho.handedOver() {
		t.Fatalf("give to a taker that went = %v, handed over %v; want a failure", err, ho.handedOver())
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("after the failed handover: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("after the failed handover: %d %v; want the drain's 503", resp.StatusCode, resp.Header)
	}
	if n, err := kl.release(false); n != 1 || err != nil {
		t.Fatalf("release = %d, %v; want the one refused", n, err)
	}
}

// TestTakerProcess is the process of TestTakerThatExits that takes the
// socket over and exits, as a server whose start fails after the
// takeover does.
func TestTakerProcess(t *testing.T) {
	path := os.Getenv("SVC_TEST_TAKE_OVER")
	if path == "" {
		t.Skip("run by TestTakerThatExits")
	}
	ln, _, err := takeOver(path, os.Getenv("SVC_TEST_TAKE_ADDR"))
	if err != nil || ln == nil {
		t.Fatalf("takeOver = %v, %v", ln, err)
	}
}

// A server that took the socket over and exited leaves it to this one
// again: it refuses the connections of its drain and, at its stop, takes
// the queue, instead of leaving them to be reset with the socket.
func TestTakerThatExits(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a unix socket's peer pid is read on Linux only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kl := &keptListener{TCPListener: ln.(*net.TCPListener), drainAnswer: errReplicaStopping}
	addr := kl.Addr().String()
	dir, err := os.MkdirTemp("", "ho")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, HandoverFile)
	ho, err := startHandover(path, kl.TCPListener, kl.stopRefusing, kl.resumeRefusing, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer ho.close()
	taker := exec.Command(os.Args[0], "-test.run=^TestTakerProcess$")
	taker.Env = append(os.Environ(), "SVC_TEST_TAKE_OVER="+path, "SVC_TEST_TAKE_ADDR="+addr)
	if out, err := taker.CombinedOutput(); err != nil {
		t.Fatalf("the taker: %v\n%s", err, out)
	}
	if !harness.Eventually(5*time.Second, func() bool { return !ho.handedOver() }) {
		t.Fatal("the server that took the socket exited, and this one still counts it as handed over")
	}
	// The drain begins after: its connections are answered.
	if err := kl.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("during the drain: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("during the drain: %d, want the drain's 503", resp.StatusCode)
	}
	if n, err := kl.release(ho.handedOver()); n != 1 || err != nil {
		t.Fatalf("release = %d, %v", n, err)
	}
}

// A taker that exited and was not reaped is a zombie, which kill(pid, 0)
// alone takes for a live process.
func TestProcessAliveSeesAZombie(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a zombie is told by /proc")
	}
	if !processAlive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	child := exec.Command("true")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	if !harness.Eventually(5*time.Second, func() bool { return !processAlive(child.Process.Pid) }) {
		t.Fatal("an exited child not yet reaped counts as alive")
	}
}
