package fleet

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// The start grace: a gateway that replaced another lets requests wait for
// the workers the other had, and only for as long as it can expect them.
func TestStartGraceWaitsForReturningWorkers(t *testing.T) {
	const grace = 10 * time.Second
	type answer struct {
		l       *Lease
		err     error
		elapsed time.Duration
	}
	tests := []struct {
		name string
		// returning is the list the gateway starts with.
		returning []string
		org       string
		model     string
		// connect names the workers that come back, in order, after the
		// request has settled.
		connect []string
		// waits is whether the request is still waiting before they do.
		waits bool
		// want is the worker that serves it, or the error code.
		want, code string
		// whole is whether the answer comes at the end of the grace.
		whole bool
	}{
		{name: "served once its worker is back", returning: []string{"w1", "w2"}, org: "o", model: "m",
			connect: []string{"w1"}, waits: true, want: "ok from w1"},
		{name: "unknown model answered once every worker is back", returning: []string{"w1", "w2"}, org: "o", model: "x",
			connect: []string{"w1", "w2"}, waits: true, code: api.CodeModelNotFound},
		{name: "a worker that never comes back: the grace, then 503", returning: []string{"w1"}, org: "o", model: "m",
			waits: true, code: api.CodeNoWorkerOnline, whole: true},
		{name: "an organisation that had no workers is answered at once", returning: []string{"w1"}, org: "other", model: "m",
			code: api.CodeNoWorkerOnline},
		{name: "a fresh start is answered at once", org: "o", model: "m", code: api.CodeNoWorkerOnline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := Config{StartGrace: grace}
				if tt.returning != nil {
					cfg.Returning = map[string][]string{}
					for _, name := range tt.returning {
						cfg.Returning["o"] = append(cfg.Returning["o"], WorkerID("o", name))
					}
				}
				h := newHarness(t, cfg)
				res := make(chan answer, 1)
				start := time.Now()
				go func() {
					l, err := h.f.Acquire(h.ctx, Need{OrgID: tt.org, Model: tt.model, Capability: api.CapChat})
					res <- answer{l, err, time.Since(start)}
				}()
				synctest.Wait()
				select {
				case a := <-res:
					if tt.waits {
						t.Fatalf("answered before the workers came back: %v", a.err)
					}
					res <- a
				default:
					if !tt.waits {
						t.Fatal("waits although no worker is expected")
					}
				}
				for _, name := range tt.connect {
					models := map[string][]api.Model{"w1": {chat("m")}, "w2": {chat("n")}}[name]
					h.worker("o", name, 1, models...)
				}
				a := <-res
				if tt.want != "" {
					if a.err != nil {
						t.Fatalf("err = %v, want a lease", a.err)
					}
					if got := run(t, a.l); got != tt.want {
						t.Fatalf("answered %q, want %q", got, tt.want)
					}
					a.l.Release(Succeeded)
				} else {
					var ae *api.Error
					if !errors.As(a.err, &ae) || ae.Code != tt.code {
						t.Fatalf("err = %v, want %s", a.err, tt.code)
					}
				}
				if tt.whole != (a.elapsed >= grace) {
					t.Fatalf("answered after %v of the %v grace", a.elapsed, grace)
				}
			})
		})
	}
}

// Requests after the grace, or once every worker is back, do not wait.
func TestStartGraceEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{StartGrace: time.Second,
			Returning: map[string][]string{"o": {WorkerID("o", "w1"), WorkerID("o", "gone")}}})
		h.worker("o", "w1", 1, chat("m"))
		time.Sleep(time.Second)
		start := time.Now()
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "x"}); status(err) != 404 || time.Since(start) != 0 {
			t.Fatalf("after the grace: %v after %v", err, time.Since(start))
		}
		if !h.f.returning.over.Load() {
			t.Fatal("the grace is not over after its end")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{StartGrace: time.Hour, Returning: map[string][]string{"o": {WorkerID("o", "w1")}}})
		h.worker("o", "w1", 1, chat("m"))
		if !h.f.returning.over.Load() {
			t.Fatal("the grace is not over once every worker is back")
		}
	})
}

// A negative grace turns it off (serve --start-grace 0).
func TestNegativeStartGraceWaitsForNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{StartGrace: -1, Returning: map[string][]string{"o": {WorkerID("o", "w1")}}})
		start := time.Now()
		if _, err := h.f.Acquire(h.ctx, Need{OrgID: "o", Model: "m"}); status(err) != 503 || time.Since(start) != 0 {
			t.Fatalf("with no grace: %v after %v", err, time.Since(start))
		}
	})
}

func TestConnectedListsWorkersToExpectBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.worker("o", "w1", 1, chat("m"))
		dropped := h.worker("o", "w2", 1, chat("m"))
		h.worker("p", "w3", 1, chat("m"))
		_ = dropped.conn.Close()
		h.expect(dropped.id, "o", api.StatusStale)
		got := h.f.Connected()
		if len(got["o"]) != 2 || len(got["p"]) != 1 {
			t.Fatalf("Connected = %v, want two workers of o (one in its grace) and one of p", got)
		}
	})
}
