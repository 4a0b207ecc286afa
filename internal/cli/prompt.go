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

// readLine reads a line from r, or returns ctx's error once it ends.
func readLine(ctx context.Context, r io.Reader) (string, error) {
	type answer struct {
		line string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		line, err := bufio.NewReader(r).ReadString('\n')
		if errors.Is(err, io.EOF) {
			err = nil
		}
		got <- answer{line, err}
	}()
	select {
	case a := <-got:
		return a.line, a.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
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
	type answer struct {
		b   []byte
		err error
	}
	got := make(chan answer, 1)
	go func() {
		b, err := term.ReadPassword(fd)
		got <- answer{b, err}
	}()
	select {
	case a := <-got:
		return string(a.b), a.err
	case <-ctx.Done():
		_ = term.Restore(fd, state)
		return "", ctx.Err()
	}
}
