package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/rental"
)

// The files of an instance directory.
const (
	metaFile  = "meta.json"
	tokenFile = "worker.token"
	binFile   = "svc"
	logFile   = "worker.log"
	pidFile   = "pid"
	exitFile  = "exit.json"
	// lockFile is locked while a boot runs (lockBoot): a provider started
	// over the directory, as the gateway restarts, resumes a boot its
	// predecessor's stop cut short, and waits for one still going.
	lockFile = "boot.lock"
)

// meta is what a provider started later needs to know of an instance.
type meta struct {
	RentalID   string    `json:"rental_id"`
	GPUModelID string    `json:"gpu_model_id"`
	TierID     string    `json:"tier_id"`
	Region     string    `json:"region"`
	WorkerName string    `json:"worker_name"`
	Created    time.Time `json:"created"`
	// Gateway and Models are the worker's launch but its token, which is
	// in its own file: what a boot resumed after a restart needs. Absent
	// in instances created before they were kept.
	Gateway string           `json:"gateway,omitempty"`
	Models  []rental.Variant `json:"models,omitempty"`
	// Deadline is when the worker is stopped whatever the gateway says,
	// from the launch's MaxRuntime.
	Deadline *time.Time `json:"deadline,omitempty"`
}

// exit is how an instance ended, as the provider saw it.
type exit struct {
	State string `json:"state"`
	Error string `json:"error"`
}

// makeInstanceDir creates an instance's directory with its token and
// meta.
func makeInstanceDir(dir, token string, m meta) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, tokenFile), []byte(token), 0o600); err != nil {
		return fmt.Errorf("write the worker token: %w", err)
	}
	return writeJSON(filepath.Join(dir, metaFile), m)
}

// writeJSON writes v to path through a temporary file, so that a reader
// never sees half of it.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

func readMeta(dir string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("read %s: %w", metaFile, err)
	}
	if m.RentalID == "" {
		return m, errors.New("an instance without a rental")
	}
	return m, nil
}

// readPid is the worker's pid; 0 before it started.
func readPid(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

func writePid(dir string, pid int) error {
	return os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(pid)+"\n"), 0o600)
}

// disk is an instance's state as its directory tells it.
type disk struct {
	state, phase, err string
	pid               int
}

// readDisk works out an instance's state from its directory: how it
// ended when the provider saw it end, else whether its worker runs.
func readDisk(dir string) disk {
	pid := readPid(dir)
	if b, err := os.ReadFile(filepath.Join(dir, exitFile)); err == nil {
		var e exit
		if json.Unmarshal(b, &e) == nil && e.State != "" {
			return disk{state: e.State, err: e.Error, pid: pid}
		}
	}
	if pid == 0 {
		return disk{state: rental.InstanceFailed, err: errCutShort}
	}
	if alive, _ := probe(pid, filepath.Join(dir, binFile)); alive {
		return disk{state: rental.InstanceRunning, phase: api.BootWorkerStarted, pid: pid}
	}
	return disk{state: rental.InstanceFailed, phase: api.BootWorkerStarted, err: exitError(dir, ""), pid: pid}
}

// errCutShort is the end of an instance whose boot was stopped before its
// worker started and cannot be resumed (created before its launch was
// kept).
const errCutShort = "the boot was cut short: the gateway stopped before the worker started"

// resumable reports an instance whose boot was cut short and can be
// resumed: no worker started, no end recorded, its launch kept.
func resumable(dir string, m meta) bool {
	if m.Gateway == "" || readPid(dir) != 0 {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, exitFile))
	return errors.Is(err, os.ErrNotExist)
}

// exitError says why a worker ended: how (an exit status, when known) and
// the last lines it logged.
func exitError(dir, how string) string {
	msg := "the worker exited"
	if how != "" {
		msg += " (" + how + ")"
	}
	if tail := logTail(filepath.Join(dir, logFile), 3); tail != "" {
		msg += ": " + tail
	}
	const limit = 500
	if len(msg) > limit {
		msg = msg[:limit-3] + "..."
	}
	return msg
}

// logTail is the last n lines of a worker's log, JSON records shortened
// to their message and error.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const window = 8 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		if _, err := f.Seek(st.Size()-window, io.SeekStart); err != nil {
			return ""
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	var lines []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			lines = append(lines, logLine(line))
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}

func logLine(line []byte) string {
	var rec struct {
		Msg string `json:"msg"`
		Err any    `json:"err"`
	}
	if line[0] != '{' || json.Unmarshal(line, &rec) != nil || rec.Msg == "" {
		return string(line)
	}
	if rec.Err != nil {
		return fmt.Sprintf("%s: %v", rec.Msg, rec.Err)
	}
	return rec.Msg
}
