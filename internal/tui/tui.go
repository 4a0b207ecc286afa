// Package tui is the live dashboard behind `svc top`: in-flight requests,
// the worker fleet, traffic, power and GPU rental spend, polled from the
// gateway's API about once a second.
//
// The package is layered like k9s: the data comes through Source (the
// typed client), pure render functions turn data into text of an exact
// size (golden-tested), and the bubbletea Model (model.go) owns all state,
// delegating each pane's drawing to a small pane value, as glow does.
package tui

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
)

// Source is what the dashboard reads; *client.Client satisfies it.
type Source interface {
	Inflight(ctx context.Context, workerID string) ([]api.InflightRequest, error)
	Workers(ctx context.Context) ([]api.Worker, error)
	WorkerEvents(ctx context.Context, q client.EventQuery) ([]api.WorkerEvent, error)
	LatestVersion(ctx context.Context) (string, error)
	UsageSummary(ctx context.Context, days int) (api.UsageSummary, error)
	UsageLogs(ctx context.Context, q client.LogsQuery) ([]api.UsageRow, error)
	WorkerPower(ctx context.Context, workerID, rng string) (api.PowerHistory, error)
	Spend(ctx context.Context) (api.SpendReport, error)
	Rentals(ctx context.Context) ([]api.Rental, error)
	Health(ctx context.Context) (api.Health, error)
}

var _ Source = (*client.Client)(nil)

// Options configure the dashboard.
type Options struct {
	Interval time.Duration    // poll period, default 1s
	Now      func() time.Time // the clock, default time.Now; tests fix it
	Target   string           // the gateway URL, shown in the header
}

// stdoutProfile is the colour profile of standard output, from its
// environment and terminfo: nothing is asked of the terminal. Tests pin it.
var stdoutProfile = func() colorprofile.Profile { return colorprofile.Detect(os.Stdout, os.Environ()) }

// NewModel returns the dashboard as a tea.Model, styled for the terminal
// detected on standard output. Its polls run until it quits with q or
// ctrl+c; a program stopped from outside should use Run instead, which
// also stops them.
func NewModel(src Source, opts Options) Model {
	return newModel(context.Background(), src, opts, stdoutProfile())
}

// Run shows the dashboard on out, reading keys from in, on the alternate
// screen until q or ctrl+c is pressed or ctx ends; ctx ending is a normal
// exit and returns nil. Colours follow out's terminal and NO_COLOR.
func Run(ctx context.Context, src Source, opts Options, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the poll and tick in flight when the program stops
	// The profile is decided once, from out's terminal and the environment
	// (nothing is asked of the terminal), for the styles and the program's
	// renderer alike. Without colour (NO_COLOR, not a terminal) the styles
	// are plain, so nothing the program learns later colours the screen.
	profile := colorprofile.Detect(out, os.Environ())
	m := newModel(ctx, src, opts, profile)
	p := tea.NewProgram(m,
		tea.WithContext(ctx),
		tea.WithInput(in),
		tea.WithOutput(out),
		tea.WithColorProfile(profile),
		// The size until the terminal tells its own; an output that is
		// not a terminal keeps it (bubbletea v2 draws nothing at 0x0).
		tea.WithWindowSize(defaultWidth, defaultHeight),
	)
	_, err := p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	return err
}
