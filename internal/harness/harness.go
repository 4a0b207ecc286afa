// Package harness runs svc the way its users do, for the end-to-end tests,
// the benchmarks and the reliability checks: the binary built once, `svc
// serve`, `svc worker` and `svc sim` as real processes on loopback ports
// with their own data directories, waited on until they answer, and
// stopped, killed or restarted on demand.
//
// Every wait ends with the caller's context; the starts that wait for a
// process to come up, WaitHTTP and WaitAccepted give up after
// StartTimeout as well. Processes are owned by whoever started them (or
// by a Group) and are always waited for.
package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// StartTimeout bounds how long a start waits for its process to answer,
// unless the caller's context ends first.
const StartTimeout = 30 * time.Second

// Builder builds the svc binary on first use and hands the same one to
// every later caller. Its fields are read on that first use.
type Builder struct {
	Dir  string    // where the binary is written
	Root string    // the module to build; "" is ModuleRoot()
	Log  io.Writer // the go command's output; nil discards it

	once sync.Once
	bin  string
	err  error
}

// Binary builds ./cmd/svc, the first time, and returns the binary's path.
// A failed build is not retried: every caller gets its error.
func (b *Builder) Binary(ctx context.Context) (string, error) {
	b.once.Do(func() {
		root := b.Root
		if root == "" {
			root = ModuleRoot()
		}
		bin := filepath.Join(b.Dir, "svc")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/svc")
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = b.Log, b.Log
		if err := cmd.Run(); err != nil {
			b.err = fmt.Errorf("build svc: %w", err)
			return
		}
		b.bin = bin
	})
	return b.bin, b.err
}

// ModuleRoot finds the directory holding go.mod, from the working
// directory upward; the working directory when there is none.
func ModuleRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// FreeAddr picks a loopback port that was free a moment ago, for a process
// that must keep its address across restarts or be told it up front.
// Another process could take it first; that is rare, as the kernel does
// not hand a port it just gave out straight back.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// FreePort is FreeAddr's port.
func FreePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(port)
}
