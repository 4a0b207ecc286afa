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
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

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
}

var _ Source = (*client.Client)(nil)

// Options configure the dashboard.
type Options struct {
	Interval time.Duration    // poll period, default 1s
	Now      func() time.Time // the clock, default time.Now; tests fix it
	Target   string           // the gateway URL, shown in the header
}

// NewModel returns the dashboard as a tea.Model, styled for the terminal
// lipgloss detects on standard output. Its polls run until it quits with
// q or ctrl+c; a program stopped from outside should use Run instead,
// which also stops them.
func NewModel(src Source, opts Options) Model {
	return newModel(context.Background(), src, opts, lipgloss.DefaultRenderer())
}

// Run shows the dashboard on out, reading keys from in, on the alternate
// screen until q or ctrl+c is pressed or ctx ends; ctx ending is a normal
// exit and returns nil. Colours follow out's terminal and NO_COLOR.
func Run(ctx context.Context, src Source, opts Options, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the poll and tick in flight when the program stops
	m := newModel(ctx, src, opts, lipgloss.NewRenderer(out))
	p := tea.NewProgram(m,
		tea.WithContext(ctx),
		tea.WithInput(in),
		tea.WithOutput(out),
		tea.WithAltScreen(),
	)
	_, err := p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	return err
}
