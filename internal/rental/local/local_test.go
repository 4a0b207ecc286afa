//go:build unix

package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/rental"
)

// svcBinary is the svc binary built once for the tests.
var svcBinary string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "svc-local-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	svcBinary = filepath.Join(tmp, "svc")
	out, err := exec.Command("go", "build", "-o", svcBinary, "github.com/svc-dev/svc/cmd/svc").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build svc: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// testGPUs is one GPU with room for one rental.
func testGPUs() []GPU {
	g := DefaultGPUs()[0]
	g.Capacity = 1
	return []GPU{g}
}

// newProvider is a provider over dir (a new one when empty) whose
// workers are all gone when the test ends.
func newProvider(t *testing.T, dir string) *Provider {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
		t.Cleanup(func() { destroyAll(t, dir) })
	}
	p, err := New(Config{Exe: svcBinary, Dir: dir, GPUs: testGPUs(), BootStep: 40 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// destroyAll ends every worker left in dir, whatever the test did.
func destroyAll(t *testing.T, dir string) {
	p, err := New(Config{Exe: svcBinary, Dir: dir, GPUs: testGPUs()})
	if err != nil {
		t.Error(err)
		return
	}
	defer p.Close()
	insts, _ := p.List(context.Background())
	for _, in := range insts {
		if err := p.Destroy(context.Background(), in.ID); err != nil {
			t.Errorf("clean-up: %v", err)
		}
	}
}

// closedGateway is the URL of a port nothing listens on: the worker
// keeps trying it.
func closedGateway(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func launch(t *testing.T, p *Provider, rentalID, gateway string) rental.Launch {
	t.Helper()
	offers, err := p.Offers(t.Context())
	if err != nil || len(offers) == 0 {
		t.Fatalf("offers: %v %v", offers, err)
	}
	return rental.Launch{RentalID: rentalID, Offer: offers[0], Worker: rental.WorkerSpec{
		Gateway: gateway, Token: "svc_w_secret-" + rentalID, Name: "rent-" + rentalID}}
}

// waitState polls an instance until it reaches state, returning the boot
// phases seen on the way.
func waitState(t *testing.T, p *Provider, id, state string) (rental.Instance, []string) {
	t.Helper()
	var phases []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		in, err := p.Status(t.Context(), id)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if len(phases) == 0 || phases[len(phases)-1] != in.BootPhase {
			phases = append(phases, in.BootPhase)
		}
		if in.State == state {
			return in, phases
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance is %+v, never %s", in, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// alive says whether pid is a process (a zombie counts as gone).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) || !procfs()
	}
	// The state follows the command's closing parenthesis.
	s := string(b)
	return !strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z")
}

func procfs() bool {
	_, err := os.Stat("/proc/self/exe")
	return err == nil
}

func TestDefaultGPUs(t *testing.T) {
	gpus := DefaultGPUs()
	if len(gpus) != 3 {
		t.Fatalf("%d GPUs", len(gpus))
	}
	for _, g := range gpus {
		if !strings.HasPrefix(g.Label, "Simulated ") || !strings.HasPrefix(g.GPUModelID, "sim-") {
			t.Errorf("%s (%s) is not labelled as simulated", g.GPUModelID, g.Label)
		}
		if got := rental.TierFor(g.Country, g.OperatorDomicile); got != g.TierID {
			t.Errorf("%s is offered in tier %s but its claims make it %s", g.GPUModelID, g.TierID, got)
		}
		if g.Capacity < 1 || g.Currency != "GBP" || g.PriceMinor <= 0 || g.Region != "local" || g.GPUCount != 1 {
			t.Errorf("%+v", g)
		}
	}
	if err := checkGPUs(gpus); err != nil {
		t.Fatal(err)
	}
}

func TestBootCapacityAndDestroy(t *testing.T) {
	p := newProvider(t, "")
	l := launch(t, p, "r1", closedGateway(t))
	l.Worker.Models = []rental.Variant{{Variant: api.Variant{VariantID: "qwen3-8b-q4"}}}
	created, err := p.Create(t.Context(), l)
	if err != nil {
		t.Fatal(err)
	}
	if created.State != rental.InstancePending || created.BootPhase != api.BootQueued || created.RentalID != "r1" || created.Region != "local" {
		t.Fatalf("created %+v", created)
	}

	// One rental fills the GPU.
	if _, err := p.Create(t.Context(), launch(t, p, "r2", closedGateway(t))); !errors.Is(err, rental.ErrNoCapacity) {
		t.Fatalf("second create: %v, want no capacity", err)
	}
	if offers, _ := p.Offers(t.Context()); offers[0].Available || offers[0].Ref != "sim-l4" {
		t.Fatalf("full offer %+v", offers[0])
	}

	in, phases := waitState(t, p, created.ID, rental.InstanceRunning)
	want := []string{api.BootQueued, api.BootPullingImage, api.BootRuntimeReady, api.BootWorkerStarted}
	if !slices.Equal(phases, want) || in.Error != "" {
		t.Errorf("phases %q, want %q (%+v)", phases, want, in)
	}

	dir := filepath.Join(p.dir, created.ID)
	pid := readPid(dir)
	if pid == 0 || !alive(pid) {
		t.Fatalf("worker pid %d is not running", pid)
	}
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Errorf("worker's process group %d, %v; want its own", pgid, err)
	}
	for name, mode := range map[string]os.FileMode{"": 0o700, tokenFile: 0o600, pidFile: 0o600, logFile: 0o600, metaFile: 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s/%s: %v, mode %v; want %v", created.ID, name, err, st.Mode().Perm(), mode)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, tokenFile)); string(b) != l.Worker.Token {
		t.Errorf("token file holds %q", b)
	}
	m, err := readMeta(dir)
	if err != nil || m.RentalID != "r1" || m.GPUModelID != "sim-l4" || m.TierID != rental.TierUKSovereign || m.Created.IsZero() {
		t.Errorf("meta %+v, %v", m, err)
	}
	if procfs() {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		wantArgs := append(rental.WorkerArgs(l.Worker, filepath.Join(dir, tokenFile), "sim"), "--log-format", "json")
		if !slices.Equal(args[1:], wantArgs) {
			t.Errorf("worker runs %q, want %q", args[1:], wantArgs)
		}
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe != filepath.Join(dir, binFile) {
			t.Errorf("worker runs %s", exe)
		}
	}
	// The worker logs JSON, and keeps trying its gateway.
	waitLog(t, dir, `"msg":"worker starting"`)

	insts, err := p.List(t.Context())
	if err != nil || len(insts) != 1 || insts[0].ID != created.ID || insts[0].State != rental.InstanceRunning {
		t.Fatalf("list %+v, %v", insts, err)
	}

	if err := p.Destroy(t.Context(), created.ID); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Error("the worker survived its destruction")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("instance directory: %v", err)
	}
	if _, err := p.Status(t.Context(), created.ID); !errors.Is(err, rental.ErrNotFound) {
		t.Errorf("status after destroy: %v", err)
	}
	if err := p.Destroy(t.Context(), created.ID); err != nil {
		t.Errorf("second destroy: %v", err)
	}
	if offers, _ := p.Offers(t.Context()); !offers[0].Available {
		t.Error("the GPU is still full")
	}
}

func waitLog(t *testing.T, dir, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(dir, logFile))
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker never logged %s; its log:\n%s", want, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Workers outlive the gateway: a provider started later over the same
// directory lists them, reports them and destroys them.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { destroyAll(t, dir) })
	p1 := newProvider(t, dir)
	created, err := p1.Create(t.Context(), launch(t, p1, "r1", closedGateway(t)))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, p1, created.ID, rental.InstanceRunning)
	pid := readPid(filepath.Join(dir, created.ID))
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	if !alive(pid) {
		t.Fatal("the worker ended with its provider")
	}
	if _, err := p1.Create(t.Context(), launch(t, p1, "r2", closedGateway(t))); err == nil {
		t.Error("a closed provider created an instance")
	}

	p2 := newProvider(t, dir)
	insts, err := p2.List(t.Context())
	if err != nil || len(insts) != 1 {
		t.Fatalf("list after restart %+v, %v", insts, err)
	}
	if in := insts[0]; in.ID != created.ID || in.RentalID != "r1" || in.State != rental.InstanceRunning || in.BootPhase != api.BootWorkerStarted || in.Region != "local" {
		t.Errorf("after restart %+v", in)
	}
	if st, err := p2.Status(t.Context(), created.ID); err != nil || st.State != rental.InstanceRunning {
		t.Errorf("status after restart %+v, %v", st, err)
	}
	// The adopted worker counts against capacity.
	if _, err := p2.Create(t.Context(), launch(t, p2, "r2", closedGateway(t))); !errors.Is(err, rental.ErrNoCapacity) {
		t.Errorf("create over an adopted worker: %v", err)
	}
	if err := p2.Destroy(t.Context(), created.ID); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Error("the worker survived its destruction")
	}
	if insts, _ := p2.List(t.Context()); len(insts) != 0 {
		t.Errorf("list after destroy %+v", insts)
	}
}

// cutShort creates an instance in dir whose boot a provider's stop cuts
// short.
func cutShort(t *testing.T, dir string) rental.Instance {
	t.Helper()
	p, err := New(Config{Exe: svcBinary, Dir: dir, GPUs: testGPUs(), BootStep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	created, err := p.Create(t.Context(), launch(t, p, "r1", closedGateway(t)))
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Close()
	return created
}

// A boot the gateway's stop cut short is resumed by the next provider over
// the directory, as the gateway restarts: the rental it accepted gets its
// worker.
func TestBootCutShortIsResumed(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { destroyAll(t, dir) })
	created := cutShort(t, dir)
	p2 := newProvider(t, dir)
	if in, err := p2.Status(t.Context(), created.ID); err != nil || in.State != rental.InstancePending {
		t.Fatalf("status after the restart %+v, %v", in, err)
	}
	if offers, _ := p2.Offers(t.Context()); offers[0].Available {
		t.Error("a resumed boot does not hold its GPU")
	}
	in, _ := waitState(t, p2, created.ID, rental.InstanceRunning)
	if in.BootPhase != api.BootWorkerStarted || in.RentalID != "r1" {
		t.Fatalf("resumed %+v", in)
	}
	if pid := readPid(filepath.Join(dir, created.ID)); pid == 0 || !alive(pid) {
		t.Fatalf("no worker after the resumed boot (pid %d)", pid)
	}
	if err := p2.Destroy(t.Context(), created.ID); err != nil {
		t.Fatal(err)
	}
}

// A provider already running when another's boot is cut short resumes it
// when asked about it: a cluster's replica that becomes a rental's home
// after its first home died carries on the boot the dead one began.
func TestBootCutShortIsResumedByTheNewHome(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { destroyAll(t, dir) })
	p2 := newProvider(t, dir)
	created := cutShort(t, dir)
	if in, err := p2.Status(t.Context(), created.ID); err != nil || in.State != rental.InstancePending {
		t.Fatalf("status at the new home %+v, %v", in, err)
	}
	in, _ := waitState(t, p2, created.ID, rental.InstanceRunning)
	if pid := readPid(filepath.Join(dir, created.ID)); in.BootPhase != api.BootWorkerStarted || pid == 0 || !alive(pid) {
		t.Fatalf("resumed %+v, worker %d", in, pid)
	}
	if err := p2.Destroy(t.Context(), created.ID); err != nil {
		t.Fatal(err)
	}
}

// A provider started while another still boots an instance (a handover:
// the new gateway starts before the old one stops) does not start a
// second worker: whichever takes the boot first boots, and the other
// waits for it and watches the worker it started.
func TestResumeWaitsForABootStillGoing(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { destroyAll(t, dir) })
	p1, err := New(Config{Exe: svcBinary, Dir: dir, GPUs: testGPUs(), BootStep: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	created, err := p1.Create(t.Context(), launch(t, p1, "r1", closedGateway(t)))
	if err != nil {
		t.Fatal(err)
	}
	p2 := newProvider(t, dir)
	if in, err := p2.Status(t.Context(), created.ID); err != nil || in.State != rental.InstancePending {
		t.Fatalf("status beside the boot %+v, %v", in, err)
	}
	waitState(t, p1, created.ID, rental.InstanceRunning)
	p1.mu.Lock()
	started := p1.insts[created.ID].pid
	p1.mu.Unlock()
	waitState(t, p2, created.ID, rental.InstanceRunning)
	p2.mu.Lock()
	watched := p2.insts[created.ID].pid
	p2.mu.Unlock()
	if watched != started || readPid(filepath.Join(dir, created.ID)) != started {
		t.Fatalf("the first boot started worker %d; the second provider watches %d, the pid file says %d",
			started, watched, readPid(filepath.Join(dir, created.ID)))
	}
	p1.Close()
	if err := p2.Destroy(t.Context(), created.ID); err != nil {
		t.Fatal(err)
	}
	if alive(started) {
		t.Error("the worker survived its destruction")
	}
}

// An instance from before the launch was kept cannot be resumed: its boot
// cut short is a failed instance, which the next provider can destroy.
func TestBootCutShortWithoutItsLaunchFails(t *testing.T) {
	dir := t.TempDir()
	created := cutShort(t, dir)
	m, err := readMeta(filepath.Join(dir, created.ID))
	if err != nil {
		t.Fatal(err)
	}
	m.Gateway, m.Models = "", nil
	if err := writeJSON(filepath.Join(dir, created.ID, metaFile), m); err != nil {
		t.Fatal(err)
	}
	p2 := newProvider(t, dir)
	in, err := p2.Status(t.Context(), created.ID)
	if err != nil || in.State != rental.InstanceFailed || !strings.Contains(in.Error, "cut short") {
		t.Fatalf("status %+v, %v", in, err)
	}
	if offers, _ := p2.Offers(t.Context()); !offers[0].Available {
		t.Error("a failed instance holds the GPU")
	}
	if err := p2.Destroy(t.Context(), created.ID); err != nil {
		t.Fatal(err)
	}
}

// A worker that exits by itself fails its instance with what it said.
func TestWorkerExits(t *testing.T) {
	dir := t.TempDir()
	p := newProvider(t, dir)
	created, err := p.Create(t.Context(), launch(t, p, "r1", "not a url"))
	if err != nil {
		t.Fatal(err)
	}
	in, _ := waitState(t, p, created.ID, rental.InstanceFailed)
	if !strings.Contains(in.Error, "exit status 2") || !strings.Contains(in.Error, `gateway URL "not a url"`) {
		t.Errorf("error %q", in.Error)
	}
	if offers, _ := p.Offers(t.Context()); !offers[0].Available {
		t.Error("a failed instance holds the GPU")
	}
	p.Close()
	// The reason survives a restart.
	p2 := newProvider(t, dir)
	again, err := p2.Status(t.Context(), created.ID)
	if err != nil || again.State != rental.InstanceFailed || again.Error != in.Error {
		t.Errorf("after restart %+v, %v; want the error %q", again, err, in.Error)
	}
	if err := p2.Destroy(t.Context(), created.ID); err != nil {
		t.Fatal(err)
	}
}

// A worker past the rental's maximum runtime is stopped, gateway or not.
func TestMaxRuntime(t *testing.T) {
	p := newProvider(t, "")
	l := launch(t, p, "r1", closedGateway(t))
	l.Worker.MaxRuntime = 500 * time.Millisecond
	created, err := p.Create(t.Context(), l)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, p, created.ID, rental.InstanceRunning)
	pid := readPid(filepath.Join(p.dir, created.ID))
	in, _ := waitState(t, p, created.ID, rental.InstanceTerminated)
	if !strings.Contains(in.Error, "maximum runtime") || alive(pid) {
		t.Errorf("%+v, worker alive %v", in, alive(pid))
	}
}

// Concurrent creates never place more than the capacity.
func TestConcurrentCreates(t *testing.T) {
	p := newProvider(t, "")
	gw := closedGateway(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		l := launch(t, p, fmt.Sprintf("r%d", i), gw)
		wg.Go(func() {
			_, errs[i] = p.Create(t.Context(), l)
		})
	}
	wg.Wait()
	placed := 0
	for _, err := range errs {
		switch {
		case err == nil:
			placed++
		case !errors.Is(err, rental.ErrNoCapacity):
			t.Error(err)
		}
	}
	if placed != 1 {
		t.Errorf("%d placed on a GPU with room for 1", placed)
	}
}

func TestIDsStayInTheDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "instances")
	victim := filepath.Join(root, "loc-00")
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, dir)
	for _, id := range []string{"../loc-00", "..", "", "loc-", "loc-zz", "/tmp"} {
		if _, err := p.Status(t.Context(), id); !errors.Is(err, rental.ErrNotFound) {
			t.Errorf("status %q: %v", id, err)
		}
		if err := p.Destroy(t.Context(), id); err != nil {
			t.Errorf("destroy %q: %v", id, err)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("a destroy reached outside the directory: %v", err)
	}
}

func TestCreateRefusesOtherOffers(t *testing.T) {
	p := newProvider(t, "")
	l := launch(t, p, "r1", closedGateway(t))
	l.Offer.TierID = rental.TierGlobal
	if _, err := p.Create(t.Context(), l); err == nil || errors.Is(err, rental.ErrNoCapacity) {
		t.Errorf("create of an offer not made: %v", err)
	}
}

func TestWorkerEnv(t *testing.T) {
	got := workerEnv([]string{"HOME=/root", "SVC_WORKER_TOKEN=secret", "SVC_GATEWAY=http://x", "PATH=/bin"})
	if !slices.Equal(got, []string{"HOME=/root", "PATH=/bin"}) {
		t.Errorf("worker env %q", got)
	}
}

// A symlinked binary is linked at its target: a link to the symlink
// would run a binary the provider does not know as the worker's.
func TestSymlinkedExe(t *testing.T) {
	link := filepath.Join(t.TempDir(), "svc-link")
	if err := os.Symlink(svcBinary, link); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Cleanup(func() { destroyAll(t, dir) })
	p, err := New(Config{Exe: link, Dir: dir, GPUs: testGPUs(), BootStep: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	created, err := p.Create(t.Context(), launch(t, p, "r1", closedGateway(t)))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, p, created.ID, rental.InstanceRunning)
	exe := filepath.Join(dir, created.ID, binFile)
	if st, err := os.Lstat(exe); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("instance binary: %v %v", st.Mode(), err)
	}
	// A provider started later, not the worker's parent, knows it by the
	// binary it runs.
	if pid := readPid(filepath.Join(dir, created.ID)); !runs(pid, exe) {
		t.Fatalf("worker %d does not run %s", pid, exe)
	}
}

func TestCopyFile(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "svc")
	if err := copyFile(svcBinary, dst); err != nil {
		t.Fatal(err)
	}
	if err := checkBinary(t.Context(), dst); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(svcBinary, dst); err == nil {
		t.Error("copied over an existing file")
	}
}

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	lines := []string{
		`{"time":"t","level":"INFO","msg":"worker starting"}`,
		`{"time":"t","level":"WARN","msg":"gateway link down; reconnecting","err":"connection refused"}`,
		`Error: unknown flag: --bogus`,
		`Run 'svc worker --help' for usage.`,
	}
	if err := os.WriteFile(filepath.Join(dir, logFile), []byte(strings.Join(lines, "\n")+"\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := exitError(dir, "exit status 2")
	want := "the worker exited (exit status 2): gateway link down; reconnecting: connection refused; Error: unknown flag: --bogus; Run 'svc worker --help' for usage."
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	b, _ := json.Marshal(exit{State: rental.InstanceFailed, Error: got})
	if !json.Valid(b) {
		t.Fatal("exit record")
	}
}

// A worker's end reads as its exit status or the signal's name.
func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		ws   syscall.WaitStatus
		want string
	}{
		{syscall.WaitStatus(3 << 8), "exit status 3"},
		{syscall.WaitStatus(syscall.SIGKILL), "killed by SIGKILL"},
		{syscall.WaitStatus(syscall.SIGTERM), "killed by SIGTERM"},
	} {
		if got := describe(tc.ws); got != tc.want {
			t.Errorf("describe(%#x) = %q, want %q", uint32(tc.ws), got, tc.want)
		}
	}
}
