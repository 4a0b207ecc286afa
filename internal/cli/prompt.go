package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// A read of a terminal cannot be interrupted: the prompts read on a
// goroutine of their own and give up when ctx ends (the first Ctrl-C), so
// that a question is abandoned as any other command is. The read is left
// blocked; the command, and the process, end right after.
func interruptible[T any](ctx context.Context, read func() (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	got := make(chan answer, 1)
	go func() {
		v, err := read()
		got <- answer{v, err}
	}()
	select {
	case a := <-got:
		return a.v, a.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// readLine reads a line from r, or returns ctx's error once it ends.
func readLine(ctx context.Context, r io.Reader) (string, error) {
	return interruptible(ctx, func() (string, error) {
		line, err := bufio.NewReader(r).ReadString('\n')
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return line, err
	})
}

// readSecret reads a line from the terminal f without echoing it, or
// returns ctx's error once it ends, with the terminal's echo back as it
// was: ReadPassword restores it only when its read returns.
func readSecret(ctx context.Context, f *os.File) (string, error) {
	fd := int(f.Fd())
	state, err := term.GetState(fd)
	if err != nil {
		return "", fmt.Errorf("read the terminal's state: %w", err)
	}
	b, err := interruptible(ctx, func() ([]byte, error) { return term.ReadPassword(fd) })
	if ctx.Err() != nil {
		_ = term.Restore(fd, state)
	}
	return string(b), err
}
