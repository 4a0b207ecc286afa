package cli

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// A question waiting on a reader that has said nothing is given up when
// the command's context ends (the first Ctrl-C), not when a line comes.
func TestReadLineEndsWithItsContext(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := readLine(ctx, r)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("readLine = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("readLine waited on after its context ended")
	}

	line, err := readLine(context.Background(), strings.NewReader("yes\nno\n"))
	if line != "yes\n" || err != nil {
		t.Fatalf("readLine = %q, %v", line, err)
	}
	if line, err := readLine(context.Background(), strings.NewReader("y")); line != "y" || err != nil {
		t.Fatalf("a last line without its end: %q, %v", line, err)
	}
}
