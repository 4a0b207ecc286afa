package moonshine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// startTimeout bounds a runner's start-up. Loading takes a second or two;
// a runner still silent after a minute is stuck, and requests queue
// behind it.
const startTimeout = time.Minute

// maxReply bounds one line from the runner: the segments of 30 minutes of
// speech take a few hundred kilobytes.
const maxReply = 16 << 20

// The runner's protocol, described in engines/moonshine/runner.mjs.
type (
	ready struct {
		Ready  bool    `json:"ready"`
		Model  string  `json:"model"`
		LoadMs float64 `json:"load_ms"`
	}
	request struct {
		ID      uint64 `json:"id"`
		Samples int    `json:"samples"`
	}
	reply struct {
		ID       uint64    `json:"id"`
		Segments []segment `json:"segments"`
		VADMs    float64   `json:"vad_ms"`
		DecodeMs float64   `json:"decode_ms"`
		Error    string    `json:"error"`
	}
	segment struct {
		Start        float64 `json:"start"`
		End          float64 `json:"end"`
		Text         string  `json:"text"`
		AvgLogprob   float64 `json:"avg_logprob"`
		NoSpeechProb float64 `json:"no_speech_prob"`
	}
)

var errStart = errors.New("start runner")

// errRunner is a failure the runner reported for one request; it keeps
// running.
type errRunner string

func (e errRunner) Error() string { return "moonshine: " + string(e) }

// runner is one runner process. Only the holder of the engine's slot uses
// it; a runner is always stopped before it is dropped, so that the process
// is reaped and the goroutine waiting for it ends.
type runner struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner // stdout
	stderr *stderrLog
	exited chan struct{} // closed when the process has been waited for
	err    error         // how it exited, once exited is closed
	lastID uint64
}

// startRunner starts a runner and waits until it has loaded the engine's
// model. The wait ends early when ctx ends, the engine closes or
// e.startTimeout passes; the runner is then killed.
func (e *Engine) startRunner(ctx context.Context) (*runner, error) {
	node, err := e.program()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errStart, err)
	}
	cmd := exec.Command(node, filepath.Join(e.cfg.Dir, "runner.mjs"),
		"--size", e.cfg.Size, "--threads", strconv.Itoa(e.cfg.Threads))
	cmd.Dir = e.cfg.Dir
	// Wait returns this long after the runner died even if something it
	// started still holds its stderr.
	cmd.WaitDelay = time.Second
	r := &runner{cmd: cmd, stderr: &stderrLog{log: e.log}, exited: make(chan struct{})}
	cmd.Stderr = r.stderr
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("%w: %w", errStart, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errStart, err)
	}
	r.lines = bufio.NewScanner(stdout)
	r.lines.Buffer(make([]byte, 0, 64<<10), maxReply)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: %w", errStart, err)
	}
	go func() {
		r.err = cmd.Wait()
		close(r.exited)
	}()

	var rd ready
	loadCtx, cancel := context.WithTimeoutCause(ctx, e.startTimeout, fmt.Errorf("not ready after %v", e.startTimeout))
	defer cancel()
	err = r.interruptible(loadCtx, e.done, func() error { return r.read(&rd) })
	if ctx.Err() == nil && loadCtx.Err() != nil {
		err = context.Cause(loadCtx)
	}
	if err == nil && (!rd.Ready || rd.Model != e.model) {
		err = fmt.Errorf("runner said %+v, want %s ready", rd, e.model)
	}
	if err != nil {
		r.discard()
		return nil, fmt.Errorf("%w: %w", errStart, r.failure(err))
	}
	e.log.Info("runner ready", "model", rd.Model, "load_ms", rd.LoadMs, "pid", cmd.Process.Pid)
	return r, nil
}

// transcribe sends 16 kHz samples and returns the runner's answer. On
// any error but an errRunner the runner is in an unknown state, and was
// killed if ctx or done ended.
func (r *runner) transcribe(ctx context.Context, done <-chan struct{}, samples []float32) (*reply, error) {
	r.lastID++
	id := r.lastID
	var rep reply
	err := r.interruptible(ctx, done, func() error {
		if err := r.send(request{ID: id, Samples: len(samples)}, samples); err != nil {
			return fmt.Errorf("send audio: %w", err)
		}
		return r.read(&rep)
	})
	switch {
	case err != nil:
		return nil, r.failure(err)
	case rep.ID != id:
		return nil, fmt.Errorf("runner answered request %d while request %d waited", rep.ID, id)
	case rep.Error != "":
		return nil, errRunner(rep.Error)
	}
	return &rep, nil
}

// send writes a request: its header line, then the samples as
// little-endian float32.
func (r *runner) send(req request, samples []float32) error {
	head, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := r.stdin.Write(append(head, '\n')); err != nil {
		return err
	}
	buf := make([]byte, 0, 64<<10)
	for len(samples) > 0 {
		n := min(len(samples), cap(buf)/4)
		buf = buf[:0]
		for _, v := range samples[:n] {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
		if _, err := r.stdin.Write(buf); err != nil {
			return err
		}
		samples = samples[n:]
	}
	return nil
}

// read decodes the runner's next line into v.
func (r *runner) read(v any) error {
	if !r.lines.Scan() {
		// Wait closes the pipe once the runner has exited: a read it
		// overtakes finds the file closed, not the end of the output.
		if err := r.lines.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
			return fmt.Errorf("read runner: %w", err)
		}
		return errors.New("the runner closed its output")
	}
	if err := json.Unmarshal(r.lines.Bytes(), v); err != nil {
		return fmt.Errorf("read runner: %w", err)
	}
	return nil
}

// interruptible runs f, which talks to the runner, killing the runner if
// ctx or done ends first: that makes f's reads and writes fail at once.
func (r *runner) interruptible(ctx context.Context, done <-chan struct{}, f func() error) error {
	finished := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-ctx.Done():
			r.kill()
		case <-done:
			r.kill()
		case <-finished:
		}
	})
	err := f()
	close(finished)
	wg.Wait()
	return err
}

// failure adds to err how the runner ended, when it has: its exit status
// and the end of its stderr.
func (r *runner) failure(err error) error {
	select {
	case <-r.exited:
	case <-time.After(time.Second):
		// Alive but not making sense: its answer went astray.
		return err
	}
	if tail := r.stderr.tail(); tail != "" {
		return fmt.Errorf("%w; the runner exited (%v): %s", err, r.err, tail)
	}
	return fmt.Errorf("%w; the runner exited (%v)", err, r.err)
}

func (r *runner) kill() {
	// An error means the process is already gone.
	_ = r.cmd.Process.Kill()
}

// discard kills the runner and waits until it is reaped.
func (r *runner) discard() {
	r.kill()
	<-r.exited
}

// hasExited reports whether the process has ended and been reaped.
func (r *runner) hasExited() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// stop ends the runner: closing its stdin asks it to exit, and it is
// killed if it has not when ctx ends. It returns once the process has
// been reaped.
func (r *runner) stop(ctx context.Context) error {
	r.stdin.Close()
	select {
	case <-r.exited:
		return nil
	case <-ctx.Done():
		r.kill()
		<-r.exited
		return fmt.Errorf("stop moonshine runner: %w", ctx.Err())
	}
}

// stderrLog receives the runner's stderr: it logs each line and keeps the
// last few for error messages.
type stderrLog struct {
	log *slog.Logger

	mu      sync.Mutex
	partial []byte   // a line not yet ended
	last    []string // the latest lines, at most keepLines
}

const (
	keepLines   = 3
	maxLineKept = 500
)

func (s *stderrLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		s.line(string(s.partial[:i]))
		s.partial = s.partial[i+1:]
	}
	if len(s.partial) > maxLineKept {
		s.line(string(s.partial))
		s.partial = nil
	}
	return len(p), nil
}

func (s *stderrLog) line(l string) {
	if l == "" {
		return
	}
	s.log.Warn("runner stderr", "line", l)
	if len(l) > maxLineKept {
		l = l[:maxLineKept]
	}
	s.last = append(s.last, l)
	if len(s.last) > keepLines {
		s.last = s.last[1:]
	}
}

// tail is the last lines of stderr on one line.
func (s *stderrLog) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := append([]string(nil), s.last...)
	if len(s.partial) > 0 {
		lines = append(lines, string(s.partial))
	}
	return strings.ToValidUTF8(strings.Join(lines, " | "), "")
}
