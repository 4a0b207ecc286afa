// Package iostreams gives commands their standard streams together with
// what they need to know about them: whether each is a terminal and whether
// colour is wanted.
package iostreams

import (
	"bytes"
	"io"
	"os"

	"golang.org/x/term"
)

// IOStreams are a command's stdin, stdout and stderr.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	stdinTTY, stdoutTTY, stderrTTY bool
	noColor                        bool
}

// System returns the process's streams.
func System(getenv func(string) string) *IOStreams {
	return &IOStreams{
		In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
		stdinTTY:  isTerminal(os.Stdin),
		stdoutTTY: isTerminal(os.Stdout),
		stderrTTY: isTerminal(os.Stderr),
		noColor:   getenv("NO_COLOR") != "" || getenv("TERM") == "dumb",
	}
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// Test returns streams backed by buffers, none of them a terminal.
func Test() (ios *IOStreams, in, out, errOut *bytes.Buffer) {
	in, out, errOut = &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut}, in, out, errOut
}

// IsStdinTTY reports whether stdin is a terminal (so not a pipe to read).
func (s *IOStreams) IsStdinTTY() bool { return s.stdinTTY }

// IsStdoutTTY reports whether stdout is a terminal.
func (s *IOStreams) IsStdoutTTY() bool { return s.stdoutTTY }

// IsStderrTTY reports whether stderr is a terminal.
func (s *IOStreams) IsStderrTTY() bool { return s.stderrTTY }

// SetStdoutTTY overrides terminal detection, for tests.
func (s *IOStreams) SetStdoutTTY(v bool) { s.stdoutTTY = v }

// SetStdinTTY overrides terminal detection, for tests.
func (s *IOStreams) SetStdinTTY(v bool) { s.stdinTTY = v }

// ColorEnabled reports whether output to stdout may be coloured: only on a
// terminal and never with NO_COLOR set.
func (s *IOStreams) ColorEnabled() bool { return s.stdoutTTY && !s.noColor }
