package power

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// commandTimeout bounds a reading program: a GPU that fell off the bus
// can hang nvidia-smi, and a busy BMC ipmitool.
const commandTimeout = 3 * time.Second

// program is a program a source runs for its readings.
type program struct {
	path    string
	timeout time.Duration // 0 is commandTimeout
}

// output runs the program and returns what it printed, within its
// timeout.
func (p program) output(ctx context.Context, args ...string) ([]byte, error) {
	timeout := p.timeout
	if timeout <= 0 {
		timeout = commandTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.path, args...)
	// Numbers with a decimal point, whatever the machine's locale.
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	// A child that keeps the output pipe open after being killed must not
	// hold up the sample.
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		name := filepath.Base(p.path)
		if ee, ok := errors.AsType[*exec.ExitError](err); ok && len(ee.Stderr) > 0 {
			line, _, _ := bytes.Cut(bytes.TrimSpace(ee.Stderr), []byte("\n"))
			return nil, fmt.Errorf("%s: %w: %s", name, err, line)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
