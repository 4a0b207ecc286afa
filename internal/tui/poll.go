package tui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
)

// Polling is a chain of commands, never a goroutine of its own: poll runs
// the API calls and returns a pollMsg; Update stores the result and returns
// a tick that sleeps until the next poll is due; the tickMsg starts the next
// poll. So there is exactly one poll or one tick outstanding at a time and a
// slow gateway makes the dashboard update less often instead of piling up
// requests. Pausing lets the chain end at the next tick; resuming starts a
// new one.

// pollMsg is one poll's answers. Each call can fail on its own (a key
// may read workers but lack usage:read), so each carries its error and the
// parts that worked are still shown.
type pollMsg struct {
	at time.Time

	inflight    []api.InflightRequest
	inflightErr error
	workers     []api.Worker
	workersErr  error
	latest      string
	latestErr   error
	summary     api.UsageSummary
	summaryErr  error
	rows        []api.UsageRow
	rowsErr     error
	spend       api.SpendReport
	spendErr    error
	rentals     []api.Rental
	rentalsErr  error
	// health is the gateway's /healthz, for its store's state; it is not
	// among the parts whose failure is shown, as a gateway without a key
	// check there answers it whatever else fails.
	health    api.Health
	healthErr error
}

// tickMsg says the next poll is due.
type tickMsg struct{ at time.Time }

// poll queries the gateway, the calls in parallel so one poll takes as
// long as the slowest call, not their sum.
func poll(ctx context.Context, src Source, now func() time.Time, timeout time.Duration) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var m pollMsg
		var wg sync.WaitGroup
		wg.Go(func() { m.inflight, m.inflightErr = src.Inflight(ctx, "") })
		wg.Go(func() { m.workers, m.workersErr = src.Workers(ctx) })
		wg.Go(func() { m.latest, m.latestErr = src.LatestVersion(ctx) })
		wg.Go(func() { m.summary, m.summaryErr = src.UsageSummary(ctx, 1) })
		wg.Go(func() { m.rows, m.rowsErr = src.UsageLogs(ctx, client.LogsQuery{Limit: logLimit}) })
		wg.Go(func() { m.spend, m.spendErr = src.Spend(ctx) })
		wg.Go(func() { m.rentals, m.rentalsErr = src.Rentals(ctx) })
		wg.Go(func() { m.health, m.healthErr = src.Health(ctx) })
		wg.Wait()
		m.at = now()
		return m
	}
}

// tick waits d, or until ctx ends so no goroutine outlives the program.
func tick(ctx context.Context, d time.Duration, now func() time.Time) tea.Cmd {
	return func() tea.Msg {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return tickMsg{at: now()}
		case <-ctx.Done():
			return nil
		}
	}
}

// failures returns the poll's errors, labelled by what failed. The rental
// calls' refusals are left out: a key without compute:write, or a gateway
// that rents no GPUs, is a state the Rental spend pane shows, not a fault.
func (m pollMsg) failures() []partError {
	parts := []partError{
		{"workers", m.workersErr},
		{"in-flight requests", m.inflightErr},
		{"usage summary", m.summaryErr},
		{"usage log", m.rowsErr},
		{"latest version", m.latestErr},
	}
	for _, p := range []partError{{"rental spend", m.spendErr}, {"rentals", m.rentalsErr}} {
		if rentalRefusal(p.err) == "" {
			parts = append(parts, p)
		}
	}
	var out []partError
	for _, p := range parts {
		if p.err != nil {
			out = append(out, p)
		}
	}
	return out
}

// pollParts is how many calls a poll makes.
const pollParts = 7

type partError struct {
	part string
	err  error
}

// pollFailure is how a failed poll is shown and retried.
type pollFailure struct {
	msg  string
	auth bool // 401/403: waiting longer will not fix it, so retry slowly
}

// describe turns a poll's errors into one status-bar message. When every
// call failed the same way the cause is the gateway (down, wrong key) and
// the message says so once; otherwise it names the part that failed.
func describe(errs []partError) pollFailure {
	if len(errs) == 0 {
		return pollFailure{}
	}
	f := describeErr(errs[0].err)
	if len(errs) < pollParts {
		f.msg = errs[0].part + ": " + f.msg
		if len(errs) > 1 {
			f.msg += fmt.Sprintf(" (+%d more)", len(errs)-1)
		}
	}
	for _, e := range errs[1:] {
		f.auth = f.auth || describeErr(e.err).auth
	}
	return f
}

func describeErr(err error) pollFailure {
	var ce *client.ConnectError
	var ae *client.Error
	switch {
	case errors.As(err, &ce):
		return pollFailure{msg: "gateway unreachable: " + firstLine(ce.Err.Error())}
	case errors.Is(err, context.DeadlineExceeded):
		return pollFailure{msg: "gateway did not answer in time"}
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		return pollFailure{msg: "unauthorized (401): " + firstLine(ae.Error()) + "; check the API key", auth: true}
	case errors.As(err, &ae) && ae.Status == http.StatusForbidden:
		return pollFailure{msg: "forbidden (403): " + firstLine(ae.Error()), auth: true}
	case errors.As(err, &ae):
		return pollFailure{msg: fmt.Sprintf("gateway error %d: %s", ae.Status, firstLine(ae.Error()))}
	}
	return pollFailure{msg: firstLine(err.Error())}
}

// denied is the message of err when it is the gateway's 403 (the key may
// not read this), else "".
func denied(err error) string {
	var ae *client.Error
	if errors.As(err, &ae) && ae.Status == http.StatusForbidden {
		return firstLine(ae.Error())
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// backoff is the wait before retry number fails (1 for the first retry):
// the interval, doubling up to five intervals (5s at the default). Auth
// failures wait the longest straight away: they need a human to fix them.
func backoff(interval time.Duration, fails int, auth bool) time.Duration {
	ceiling := 5 * interval
	if auth {
		return ceiling
	}
	d := interval
	for i := 1; i < fails && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// pollTimeout bounds one poll: generous, since a timeout only means the
// status bar reports it instead of waiting on.
func pollTimeout(interval time.Duration) time.Duration {
	return max(5*time.Second, 5*interval)
}
