package power

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"
	"time"
)

// t0 is a whole minute, so that windows start on it.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// clock is a settable clock for Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// at is t0 plus seconds.
func at(seconds float64) time.Time {
	return t0.Add(time.Duration(seconds * float64(time.Second)))
}

// fakeNVML is an NVML whose values the test sets directly.
type fakeNVML struct {
	mu   sync.Mutex
	gpus []fakeGPU
}

type fakeGPU struct {
	name     string
	mj       uint64
	mw       uint32
	limitMW  uint32
	noEnergy bool // before Volta
	fail     bool // every call about this device fails
}

var errFake = errors.New("fake NVML: not supported")

func (f *fakeNVML) set(i int, change func(g *fakeGPU)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.gpus[i])
}

func (f *fakeNVML) gpu(i int) (fakeGPU, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.gpus) || f.gpus[i].fail {
		return fakeGPU{}, fmt.Errorf("fake NVML: device %d: %w", i, errFake)
	}
	return f.gpus[i], nil
}

func (f *fakeNVML) DeviceCount() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.gpus), nil
}

func (f *fakeNVML) DeviceName(i int) (string, error) {
	g, err := f.gpu(i)
	return g.name, err
}

func (f *fakeNVML) TotalEnergy(i int) (uint64, error) {
	g, err := f.gpu(i)
	if err == nil && g.noEnergy {
		err = errFake
	}
	return g.mj, err
}

func (f *fakeNVML) PowerUsage(i int) (uint32, error) {
	g, err := f.gpu(i)
	return g.mw, err
}

func (f *fakeNVML) PowerLimit(i int) (uint32, error) {
	g, err := f.gpu(i)
	if err == nil && g.limitMW == 0 {
		err = errFake
	}
	return g.limitMW, err
}

// testDeps has no NVML, no programs on PATH and, unless given, no files.
func testDeps(fsys fs.FS) deps {
	if fsys == nil {
		fsys = fstest.MapFS{}
	}
	return deps{
		fsys:     fsys,
		openNVML: func() (NVML, error) { return nil, errors.New("no NVML in tests") },
		lookPath: func(string) (string, error) { return "", exec.ErrNotFound },
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newTestSampler is a sampler on cfg whose clock is the returned one,
// starting at t0, reading fsys.
func newTestSampler(t *testing.T, cfg Config, fsys fs.FS) (*Sampler, *clock) {
	t.Helper()
	c := newClock(t0)
	if cfg.Now == nil {
		cfg.Now = c.Now
	}
	if cfg.IPMITool == "" {
		cfg.IPMITool = "-"
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Window == 0 {
		cfg.Window = time.Minute // the tests' figures are per minute
	}
	s, err := newSampler(cfg, testDeps(fsys))
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// sampleAt sets the clock to each time in turn and samples there.
func sampleAt(s *Sampler, c *clock, times ...time.Time) {
	for _, t := range times {
		c.Set(t)
		s.Sample(t)
	}
}

// copyTree copies testdata/name into a fresh directory that the test may
// change, and returns that directory.
func copyTree(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("testdata", name))); err != nil {
		t.Fatal(err)
	}
	return dst
}

func writeFile(t *testing.T, root, name, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// denyFS refuses to open the files deny picks, as sysfs does to a user
// who is not root.
type denyFS struct {
	fs.FS
	deny func(name string) bool
}

func (d denyFS) Open(name string) (fs.File, error) {
	if d.deny(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	return d.FS.Open(name)
}

// countHandler counts the log records at warning level and above.
type countHandler struct {
	mu    sync.Mutex
	warns []string
}

func (h *countHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.warns = append(h.warns, r.Message)
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(a), math.Abs(b)) }

func assertNear(t *testing.T, what string, got, want float64) {
	t.Helper()
	if !near(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// mustSub is a testdata tree as a file system.
func mustSub(t *testing.T, dir string) fs.FS {
	t.Helper()
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	return os.DirFS(dir)
}
