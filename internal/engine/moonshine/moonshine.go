// Package moonshine is the worker's speech-to-text engine over Moonshine,
// Useful Sensors' small English recogniser, run on the CPU by ONNX Runtime
// in Node.js. engines/moonshine/install.sh installs it: the runner script,
// its two npm dependencies, and the quantized Moonshine base and tiny
// models with the Silero VAD v5 model that cuts audio into utterances.
//
// The engine owns one runner process, which loads the models once and
// transcribes one request at a time; concurrent requests queue for it. The
// runner starts with the first request (which reports a cold start with
// its load time), starts again after it died or was killed to cancel a
// request, and stops with Close.
//
// What the model cannot do: it transcribes English only; it decodes
// greedily, so prompt, temperature and beam_size have no effect; and it
// gives no word timings, so word timestamps spread each segment's span
// over its words in proportion to their length.
package moonshine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// Kind is the engine's name.
const Kind = "moonshine"

// Config configures an Engine.
type Config struct {
	// Dir is where engines/moonshine/install.sh installed the runner.
	Dir string
	// Node is the node program; empty looks node up on PATH.
	Node string
	// Size is the model: "base" (the default) or "tiny", faster and less
	// accurate.
	Size string
	// Threads is how many threads ONNX Runtime uses; 0 is one per core.
	Threads int
	// Logger receives the runner's stderr and each request's timings;
	// nil discards them.
	Logger *slog.Logger
}

// Engine transcribes with a Moonshine runner. It is safe for concurrent
// use; build it with New and stop it with Close.
type Engine struct {
	cfg   Config
	model string // the model's id: moonshine-base or moonshine-tiny
	log   *slog.Logger
	// startTimeout bounds a runner's start-up: startTimeout, lowered in
	// tests.
	startTimeout time.Duration

	// slot holds a token while a request (or Close) uses the runner: it
	// serialises them, and lets a queued request give up when its context
	// ends.
	slot chan struct{}
	// run is the runner, nil until started or after it stopped. It is
	// changed only by the slot's holder; Models reads it at any time.
	run atomic.Pointer[runner]
	// done is closed by Close: requests stop waiting and running.
	done      chan struct{}
	closeOnce sync.Once
}

var _ interface {
	engine.Engine
	engine.Info
} = (*Engine)(nil)

var errClosed = errors.New("the moonshine engine is shut down")

// New returns an engine for the install in cfg.Dir. It starts nothing: a
// missing or broken install shows in Models.
func New(cfg Config) (*Engine, error) {
	switch cfg.Size {
	case "":
		cfg.Size = "base"
	case "base", "tiny":
	default:
		return nil, fmt.Errorf("moonshine engine: size %q: want base or tiny", cfg.Size)
	}
	if cfg.Dir == "" {
		return nil, errors.New("moonshine engine: no install directory")
	}
	if cfg.Threads < 0 {
		return nil, fmt.Errorf("moonshine engine: %d threads", cfg.Threads)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Engine{
		cfg:          cfg,
		model:        "moonshine-" + cfg.Size,
		log:          log.With("engine", Kind),
		startTimeout: startTimeout,
		slot:         make(chan struct{}, 1),
		done:         make(chan struct{}),
	}, nil
}

// Kind is "moonshine".
func (e *Engine) Kind() string { return Kind }

// Info describes the engine for the worker's hello.
func (e *Engine) Info() api.EngineInfo { return api.EngineInfo{Kind: Kind} }

// Models lists the one model once the install is complete; Loaded says
// whether the runner holds it now.
func (e *Engine) Models(ctx context.Context) ([]api.Model, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list moonshine models: %w", err)
	}
	if _, err := e.program(); err != nil {
		return nil, err
	}
	if err := checkInstall(e.cfg.Dir, e.cfg.Size); err != nil {
		return nil, err
	}
	r := e.run.Load()
	loaded := r != nil && !r.hasExited()
	return []api.Model{{
		ID:           e.model,
		Capabilities: []string{api.CapTranscription},
		Engine:       Kind,
		Loaded:       &loaded,
	}}, nil
}

// Close stops the runner, cancelling the request it runs, if any, and
// every queued one; later requests fail with 503. It waits for the runner
// to exit until ctx ends, then kills it. Close may be called more than
// once.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() { close(e.done) })
	select {
	case e.slot <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("close moonshine engine: %w", ctx.Err())
	}
	defer func() { <-e.slot }()
	if r := e.run.Swap(nil); r != nil {
		return r.stop(ctx)
	}
	return nil
}

// acquire takes the slot, waiting for the request ahead.
func (e *Engine) acquire(ctx context.Context) error {
	select {
	case e.slot <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-e.done:
		return errClosed
	}
	select {
	case <-e.done:
		<-e.slot
		return errClosed
	default:
		return nil
	}
}

func (e *Engine) release() { <-e.slot }

// unavailable is the result of a request the engine cannot take now.
func unavailable(err error) *api.Result {
	r := engine.Failure(http.StatusServiceUnavailable, api.TypeServiceUnavailable, err.Error())
	r.Retryable = true
	return r
}
