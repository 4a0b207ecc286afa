package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/rental"
)

// pollEvery is how often a running worker is looked at.
const pollEvery = 200 * time.Millisecond

// run boots an instance's worker, then watches it until ctx ends or the
// worker does. The boot holds the instance's boot lock: one resumed after
// a restart waits out the boot of the process it replaces, and then goes
// on from what that one did.
func (p *Provider) run(ctx context.Context, in *instance, w rental.WorkerSpec) {
	release, err := lockBoot(ctx, in.dir)
	if err != nil {
		if ctx.Err() == nil {
			p.end(in, rental.InstanceFailed, "boot: "+err.Error())
		}
		return
	}
	if d := readDisk(in.dir); d.pid != 0 || d.err != errCutShort {
		// The boot this one waited for started the worker, or ended.
		release()
		p.mu.Lock()
		in.state, in.phase, in.err, in.pid = d.state, d.phase, d.err, d.pid
		p.mu.Unlock()
		if d.state == rental.InstanceRunning {
			p.watch(ctx, in, d.pid)
		}
		return
	}
	pid, err := p.boot(ctx, in, w)
	release()
	if err != nil {
		if ctx.Err() != nil {
			// Destroyed or closed: a provider started later over the
			// directory resumes the boot.
			return
		}
		p.log.Warn("local rental: boot failed", "instance", in.id, "err", err)
		p.end(in, rental.InstanceFailed, "boot: "+err.Error())
		return
	}
	p.watch(ctx, in, pid)
}

// boot goes through the phases a cloud machine does: it gets the svc
// binary and checks it runs, then starts the worker.
func (p *Provider) boot(ctx context.Context, in *instance, w rental.WorkerSpec) (int, error) {
	if err := p.pause(ctx); err != nil {
		return 0, err
	}
	p.setPhase(in, api.BootPullingImage)
	exe := filepath.Join(in.dir, binFile)
	if err := installBinary(p.exe, exe); err != nil {
		return 0, fmt.Errorf("install svc: %w", err)
	}
	if err := checkBinary(ctx, exe); err != nil {
		return 0, err
	}
	if err := p.pause(ctx); err != nil {
		return 0, err
	}
	p.setPhase(in, api.BootRuntimeReady)
	if err := p.pause(ctx); err != nil {
		return 0, err
	}
	pid, err := p.startWorker(ctx, in.dir, exe, w)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	in.pid, in.state, in.phase = pid, rental.InstanceRunning, api.BootWorkerStarted
	p.mu.Unlock()
	p.log.Info("local rental: worker started", "instance", in.id, "rental", in.meta.RentalID, "pid", pid)
	return pid, nil
}

// startWorker starts the rental's svc worker in a process group of its
// own, logging to the instance directory, and records its pid.
func (p *Provider) startWorker(ctx context.Context, dir, exe string, w rental.WorkerSpec) (int, error) {
	args := append(rental.WorkerArgs(w, filepath.Join(dir, tokenFile), p.cfg.Engine), "--log-format", "json")
	logf, err := os.OpenFile(filepath.Join(dir, logFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("open the worker log: %w", err)
	}
	defer logf.Close()
	// Not CommandContext: the worker outlives the boot, and the gateway.
	cmd := exec.Command(exe, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	cmd.Env = workerEnv(os.Environ())
	cmd.SysProcAttr = ownGroup()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start the worker: %w", err)
	}
	pid := cmd.Process.Pid
	// The worker is reaped by pid (probe), as a provider started later
	// would, so that watching it can stop without waiting for it.
	_ = cmd.Process.Release()
	if err := writePid(dir, pid); err != nil {
		_ = terminate(context.WithoutCancel(ctx), pid, exe)
		return 0, fmt.Errorf("record the worker's pid: %w", err)
	}
	return pid, nil
}

// workerEnv is the gateway's environment without svc's own variables: a
// SVC_WORKER_TOKEN there would win over the rental's token file.
func workerEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "SVC_") {
			out = append(out, kv)
		}
	}
	return out
}

// installBinary puts the svc binary at dst: a hard link when it can, so
// that the worker keeps its binary whatever happens to the gateway's,
// else a copy.
func installBinary(src, dst string) error {
	// A boot resumed after a restart finds the last one's.
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if os.Link(src, dst) == nil {
		return nil
	}
	return copyFile(src, dst)
}

func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(dst)
		}
	}()
	_, err = io.Copy(out, in)
	return err
}

// checkBinary runs `svc version` to see that the binary works here.
func checkBinary(ctx context.Context, exe string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("svc version: %w: %s", err, bytes.TrimSpace(out))
	}
	if !bytes.HasPrefix(out, []byte("svc ")) {
		return fmt.Errorf("%s is not svc: its version says %q", exe, bytes.TrimSpace(out))
	}
	return nil
}

// watch looks at a running worker until ctx ends or the worker does, and
// stops it at the rental's deadline.
func (p *Provider) watch(ctx context.Context, in *instance, pid int) {
	exe := filepath.Join(in.dir, binFile)
	// The stored deadline is read once against the wall clock and then
	// kept on the monotonic one, so a step of the host's clock neither
	// stops the worker early nor lets it run on.
	var until time.Time
	if d := in.meta.Deadline; d != nil {
		until = time.Now().Add(time.Until(*d))
	}
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !until.IsZero() && !time.Now().Before(until) {
			p.log.Info("local rental: maximum runtime reached; stopping the worker", "instance", in.id, "rental", in.meta.RentalID)
			if err := terminate(ctx, pid, exe); err != nil {
				if ctx.Err() == nil {
					p.log.Warn("local rental: the worker did not stop", "instance", in.id, "err", err)
				}
				continue
			}
			p.end(in, rental.InstanceTerminated, "the machine reached its maximum runtime")
			return
		}
		alive, how := probe(pid, exe)
		if alive {
			continue
		}
		msg := exitError(in.dir, how)
		p.log.Warn("local rental: the worker exited", "instance", in.id, "rental", in.meta.RentalID, "err", msg)
		p.end(in, rental.InstanceFailed, msg)
		return
	}
}

// end records how an instance ended, in memory and for a provider started
// later.
func (p *Provider) end(in *instance, state, msg string) {
	if err := writeJSON(filepath.Join(in.dir, exitFile), exit{State: state, Error: msg}); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.log.Warn("local rental: cannot record the end", "instance", in.id, "err", err)
	}
	p.mu.Lock()
	in.state, in.err = state, msg
	p.mu.Unlock()
}

func (p *Provider) setPhase(in *instance, phase string) {
	p.mu.Lock()
	in.phase = phase
	p.mu.Unlock()
	p.log.Debug("local rental: boot phase", "instance", in.id, "phase", phase)
}

// pause waits a boot step, or until ctx ends.
func (p *Provider) pause(ctx context.Context) error {
	if p.cfg.BootStep <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(p.cfg.BootStep)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
