package sim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

func TestPull(t *testing.T) {
	cfg, clk := testConfig()
	e := New(cfg)
	start := clk.Now()
	var got []api.PullProgress
	if err := e.Pull(t.Context(), "qwen3-8b-q4", func(p api.PullProgress) { got = append(got, p) }); err != nil {
		t.Fatal(err)
	}
	if took := clk.Now().Sub(start); took != DefaultPullTime {
		t.Errorf("the install took %v, want %v", took, DefaultPullTime)
	}
	var statuses []string
	var last int64
	downloads := 0
	for _, p := range got {
		if len(statuses) == 0 || statuses[len(statuses)-1] != p.Status {
			statuses = append(statuses, p.Status)
		}
		if !strings.HasPrefix(p.Status, "pulling ") || p.Status == "pulling manifest" {
			continue
		}
		downloads++
		if p.Total != pullSize || !strings.HasPrefix(p.Digest, "sha256:") || p.Status != "pulling "+p.Digest[7:19] {
			t.Errorf("download step %+v", p)
		}
		if p.Completed < last {
			t.Errorf("progress went back from %d to %d", last, p.Completed)
		}
		last = p.Completed
	}
	if last != pullSize || downloads < 10 {
		t.Errorf("the download ended at %d of %d after %d steps", last, int64(pullSize), downloads)
	}
	want := []string{"pulling manifest", "pulling " + got[1].Digest[7:19], "verifying sha256 digest", "writing manifest", "success"}
	if !slices.Equal(statuses, want) {
		t.Errorf("statuses %q, want %q", statuses, want)
	}

	models, err := e.Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(models, func(m api.Model) bool { return m.ID == "qwen3-8b-q4" })
	if i < 0 {
		t.Fatal("the installed model is not listed")
	}
	if m := models[i]; !slices.Equal(m.Capabilities, []string{api.CapChat}) || !m.Simulated || m.Engine != "sim" {
		t.Errorf("installed model listed as %+v", m)
	}
	sink := &recSink{}
	res := e.Serve(t.Context(), &engine.Request{Kind: api.KindChat, Model: "qwen3-8b-q4",
		Body: []byte(`{"messages":[{"role":"user","content":"hi"}]}`)}, sink)
	if res.Error != nil {
		t.Fatalf("the installed model does not serve: %+v", res.Error)
	}

	// Installing again, or a model served from the start, is instant.
	for _, id := range []string{"qwen3-8b-q4", "sim-chat"} {
		before, n := clk.Now(), len(models)
		got = nil
		if err := e.Pull(t.Context(), id, func(p api.PullProgress) { got = append(got, p) }); err != nil {
			t.Fatal(err)
		}
		if clk.Now() != before || len(got) != 1 || got[0].Status != "success" {
			t.Errorf("pull of %s: took %v, progress %+v", id, clk.Now().Sub(before), got)
		}
		if again, _ := e.Models(t.Context()); len(again) != n {
			t.Errorf("pull of %s listed %d models, want %d", id, len(again), n)
		}
	}
}

func TestPullCancelled(t *testing.T) {
	// Real time: the download is long and the test cancels it early on.
	cfg := DefaultConfig()
	cfg.PullTime = time.Hour
	e := New(cfg)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var steps int
	errc := make(chan error, 1)
	go func() {
		errc <- e.Pull(ctx, "llama-3.3-70b-q4", func(p api.PullProgress) {
			if p.Completed > 0 {
				steps++
				cancel()
			}
		})
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Pull = %v, want cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Pull did not stop when cancelled")
	}
	if steps != 1 {
		t.Errorf("%d steps reported after the cancel", steps-1)
	}
	models, _ := e.Models(t.Context())
	if slices.ContainsFunc(models, func(m api.Model) bool { return m.ID == "llama-3.3-70b-q4" }) {
		t.Error("a cancelled install is listed")
	}
}

func TestPullNoModel(t *testing.T) {
	cfg, _ := testConfig()
	if err := New(cfg).Pull(t.Context(), " ", nil); err == nil {
		t.Fatal("a pull of no model succeeded")
	}
}
