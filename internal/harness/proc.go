package harness

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec says how to run one process.
type Spec struct {
	Name   string   // names the process in errors
	Bin    string   // the program: a path, or a name looked up on PATH
	Args   []string // its arguments
	Env    []string // added to this process's environment
	Prefix []string // a command that runs Bin, as taskset -c 0 does

	// svc logs to stderr; stdout carries only what a command prints for a
	// person, such as serve's demo banner.
	LogFile string // stdout and stderr are appended here
	KeepLog bool   // stderr is also kept in memory, as Proc.Log

	Group *Group // the process joins it, to be stopped when it is
}

// outputDelay is how long a process's output may still be copied after
// it has exited.
const outputDelay = 5 * time.Second

// Proc is a running (or exited) process.
type Proc struct {
	name    string
	logFile string
	log     *Log
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // the exit status, once done is closed
}

// Start runs the process described by s. It is the caller's (or s.Group's)
// to stop: Stop, Kill or Wait.
func Start(s Spec) (*Proc, error) {
	argv := append(slices.Clone(s.Prefix), s.Bin)
	argv = append(argv, s.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.SysProcAttr = SysProcAttr()
	// Output still unread once the process has exited is held open by a
	// descendant that outlives it (a rental's worker does, by design);
	// waiting on it would tie the process's end to the descendant's.
	cmd.WaitDelay = outputDelay
	p := &Proc{name: s.Name, logFile: s.LogFile, cmd: cmd, done: make(chan struct{})}
	if p.name == "" {
		p.name = s.Bin
	}
	var file *os.File
	if s.LogFile != "" {
		f, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		file = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	if s.KeepLog {
		p.log = newLog()
		if file != nil {
			cmd.Stderr = io.MultiWriter(file, p.log)
		} else {
			cmd.Stderr = p.log
		}
	}
	if err := cmd.Start(); err != nil {
		if file != nil {
			file.Close()
		}
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	go func() {
		// Wait returns once the output is all copied, so the log is
		// complete when done is closed.
		p.err = cmd.Wait()
		if file != nil {
			file.Close()
		}
		if p.log != nil {
			p.log.end()
		}
		close(p.done)
	}()
	if s.Group != nil {
		s.Group.add(p)
	}
	return p, nil
}

// Name is the process's name, for messages.
func (p *Proc) Name() string { return p.name }

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Args is the command line the process was started with.
func (p *Proc) Args() []string { return p.cmd.Args }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the exit status, nil for a clean exit; only meaningful once Done
// is closed.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Signal sends sig, and does not wait.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill ends the process at once, as a power cut or the OOM killer would,
// waits for it and returns its exit status. Like Stop, it does nothing
// for a nil Proc, so that a deferred stop may follow a start that failed.
func (p *Proc) Kill() error {
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return p.err
}

// StuckError is Stop's answer when the process outlived its grace and was
// killed.
type StuckError struct {
	Name   string
	Signal os.Signal
	Grace  time.Duration
}

func (e *StuckError) Error() string {
	return fmt.Sprintf("%s did not exit within %v of %v", e.Name, e.Grace, e.Signal)
}

// Stop sends sig, waits up to grace for the process to exit and kills it
// when it has not. It returns the exit status, or a *StuckError when the
// process had to be killed. A process that has exited already is left
// alone.
func (p *Proc) Stop(sig os.Signal, grace time.Duration) error {
	if p == nil {
		return nil
	}
	if p.Exited() {
		return p.err
	}
	_ = p.cmd.Process.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		p.Kill()
		return &StuckError{Name: p.name, Signal: sig, Grace: grace}
	}
}

// Log is the process's stderr kept in memory; nil unless its Spec asked
// for it.
func (p *Proc) Log() *Log { return p.log }

// Output is everything the process has written so far: its log file,
// across every process that appended to it, or else its kept log.
func (p *Proc) Output() string {
	if p.logFile != "" {
		b, _ := os.ReadFile(p.logFile)
		return string(b)
	}
	if p.log != nil {
		return p.log.String()
	}
	return ""
}

// Crashed is the output from the first sign of a crash on, "" when there
// is none.
func (p *Proc) Crashed() string { return Crash(p.Output()) }

// Crash finds the first sign of a crash in a process's output: a panic, a
// fatal runtime error or, in a race-enabled build, a data race, which
// would otherwise pass unseen. It returns the output from there on, or ""
// when there is none.
func Crash(out string) string {
	first := -1
	for _, sign := range []string{"WARNING: DATA RACE", "panic: ", "fatal error: "} {
		if i := strings.Index(out, sign); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first < 0 {
		return ""
	}
	return out[first:]
}

// Group is a set of processes stopped together: what a run leaves behind
// when it ends early. Its zero value is ready to use.
type Group struct {
	mu    sync.Mutex
	procs []*Proc
}

func (g *Group) add(p *Proc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.procs = slices.DeleteFunc(g.procs, (*Proc).Exited)
	g.procs = append(g.procs, p)
}

// Stop stops every process of the group that is still running, the last
// started first (workers before their gateway), each with SIGTERM and
// grace before it is killed, and waits for them all.
func (g *Group) Stop(grace time.Duration) {
	g.mu.Lock()
	procs := g.procs
	g.procs = nil
	g.mu.Unlock()
	for _, p := range slices.Backward(procs) {
		_ = p.Stop(syscall.SIGTERM, grace)
	}
}
