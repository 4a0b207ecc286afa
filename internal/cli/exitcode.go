package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/cluster"
	"github.com/svc-dev/svc/internal/pgstore"
	"github.com/svc-dev/svc/internal/termsafe"
	"github.com/svc-dev/svc/internal/worker"
)

// Exit codes, in one place.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitFlagged  = 3
	exitAuth     = 4
	exitCapacity = 5
	// exitTooOld is svc serve on a data directory, or a cluster's
	// database, that a newer release migrated past what this build reads:
	// restarting it cannot help, and the systemd unit does not.
	exitTooOld = 6
	// exitIDShared is svc serve stopping because another live replica,
	// started before it, registers under its id (a copied data
	// directory): a restart would find the same.
	exitIDShared = 7
	// exitRefused is svc worker refused by its gateway for good: a
	// revoked token, a protocol it does not speak, a name another live
	// worker holds. A restart would be refused the same.
	exitRefused = 8
)

// signalExit is the status of a process ended by sig, as a shell reports
// one killed by it: 128 plus its number.
func signalExit(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitError
}

// exitStatus ends a command with a status and no message of its own: what
// it printed says why (svc moderate --fail-on-flagged).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// UsageError is a mistake in how a command was called.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageError(err error) error { return &UsageError{Err: err} }

func usageErrorf(format string, args ...any) error { return usageError(fmt.Errorf(format, args...)) }

// hintError carries advice, printed after the error and its request id.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

func withHint(err error, hint string) error { return &hintError{err: err, hint: hint} }

// codedError gives an error the exit status its meaning calls for where
// the HTTP status alone does not say it: a 409 is "no capacity" only from
// POST /api/v1/compute/instances. Unlike exitStatus, its message is printed.
type codedError struct {
	err  error
	code int
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func withExitCode(err error, code int) error { return &codedError{err: err, code: code} }

// exitCode maps an error to the process exit code.
func exitCode(err error) int {
	var ue *UsageError
	var ae *client.Error
	var st exitStatus
	var ce *codedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &st):
		return int(st)
	case errors.As(err, &ce):
		return ce.code
	case errors.As(err, &ue), isCobraUsage(err):
		return exitUsage
	case errors.Is(err, pgstore.ErrSchemaTooNew), errors.Is(err, bolt.ErrSchemaTooNew):
		return exitTooOld
	case errors.Is(err, cluster.ErrIDShared):
		return exitIDShared
	case errors.As(err, new(*worker.PermanentError)):
		return exitRefused
	case errors.As(err, &ae):
		switch ae.Status {
		case http.StatusUnauthorized, http.StatusForbidden:
			return exitAuth
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			return exitCapacity
		}
	}
	return exitError
}

// isCobraUsage recognises the usage errors cobra makes itself, which it
// returns as plain strings: unknown commands, argument counts and flag groups.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, prefix := range []string{"unknown command ", "unknown flag", "unknown shorthand flag", "invalid argument ",
		"if any flags in the group", "at least one of the flags in the group", "required flag(s)"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return strings.Contains(msg, "arg(s), received")
}

// reportError prints err the way a user should see it and returns the exit
// code; cmd is the command that ran (or failed to parse).
func reportError(w io.Writer, cmd *cobra.Command, err error) int {
	code := exitCode(err)
	var st exitStatus
	if err == nil || errors.Is(err, context.Canceled) || errors.As(err, &st) {
		return code
	}
	// The message often quotes the server (an error's detail, a rental's
	// error): escaped, keeping the lines a list of invalid fields runs to.
	fmt.Fprintf(w, "Error: %s\n", termsafe.Text(err.Error()))
	var ae *client.Error
	if errors.As(err, &ae) && ae.RequestID != "" {
		fmt.Fprintf(w, "Request id: %s\n", termsafe.Line(ae.RequestID))
	}
	var he *hintError
	if errors.As(err, &he) {
		fmt.Fprintln(w, termsafe.Text(he.hint))
	}
	if code == exitUsage && cmd != nil {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}
