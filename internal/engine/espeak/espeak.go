// Package espeak is the worker's text-to-speech engine over espeak-ng, the
// formant synthesiser Debian ships as espeak-ng. It runs on any CPU, needs
// no model files, and speaks about a hundred languages; the voice is
// robotic but clear.
//
// Each request runs the program once, text on stdin and WAV on stdout.
// The engine offers one model, espeak-ng, whose voices are the languages
// the program lists (en-us, en-gb, de, fr, ...).
package espeak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// Kind is the engine's name, and the id and engine of its one model.
const Kind = "espeak-ng"

// Config configures an Engine.
type Config struct {
	// Path is the espeak-ng program; empty looks espeak-ng up on PATH
	// when it is first needed.
	Path string
}

// Engine runs espeak-ng. It is safe for concurrent use; build it with New.
type Engine struct {
	path   string
	maxWAV int // bounds one answer: maxWAV, lowered in tests

	mu     sync.Mutex
	voices *voiceList // nil until espeak-ng listed them
}

var _ interface {
	engine.Engine
	engine.Info
} = (*Engine)(nil)

// New returns an engine for cfg. It does not run the program: a missing
// one shows in Models.
func New(cfg Config) *Engine {
	return &Engine{path: cfg.Path, maxWAV: maxWAV}
}

// Kind is "espeak-ng".
func (e *Engine) Kind() string { return Kind }

// Info describes the engine for the worker's hello.
func (e *Engine) Info() api.EngineInfo { return api.EngineInfo{Kind: Kind} }

// Models lists the one model with espeak-ng's voices. They are asked for
// once and kept; while espeak-ng cannot answer, every call asks again and
// fails, so that the worker reports a missing or broken install.
func (e *Engine) Models(ctx context.Context) ([]api.Model, error) {
	vs, err := e.voiceList(ctx)
	if err != nil {
		return nil, err
	}
	return []api.Model{{
		ID:           Kind,
		Capabilities: []string{api.CapSpeech},
		Voices:       vs.names,
		DefaultVoice: vs.fallback,
		Engine:       Kind,
	}}, nil
}

// Serve speaks a speech request.
func (e *Engine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if req.Kind != api.KindSpeech {
		return engine.Failure(http.StatusNotImplemented, api.TypeNotSupported,
			fmt.Sprintf("espeak-ng does not serve %q requests: it only speaks", req.Kind))
	}
	if req.Model != Kind {
		return engine.Failure(http.StatusNotFound, api.TypeNotFound,
			fmt.Sprintf("model %q not found: espeak-ng serves %s", req.Model, Kind))
	}
	var p api.SpeechParams
	if err := json.Unmarshal(req.Body, &p); err != nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "invalid speech parameters: "+err.Error())
	}
	vs, err := e.voiceList(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return engine.Cancelled()
		}
		return engine.Unreachable(err)
	}
	voice := p.Voice
	if voice == "" {
		voice = vs.fallback
	}
	file, ok := vs.files[voice]
	if !ok {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest,
			fmt.Sprintf("voice: %q is not a voice of %s; choose one of %s", voice, Kind, strings.Join(vs.names, ", ")))
	}
	wav, err := e.speak(ctx, p.Input, file, wordsPerMinute(p.Speed))
	if err != nil {
		return speakFailure(ctx, err)
	}
	if err := sink.Body(ctx, wav); err != nil {
		return engine.Cancelled()
	}
	return engine.OK()
}

// speakFailure is the result of a failed run of espeak-ng.
func speakFailure(ctx context.Context, err error) *api.Result {
	switch {
	case ctx.Err() != nil:
		return engine.Cancelled()
	case errors.Is(err, errStart):
		return engine.Unreachable(err)
	case errors.Is(err, errTooLong):
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
	}
	r := engine.Failure(http.StatusBadGateway, api.TypeUpstream, err.Error())
	r.Retryable = true
	return r
}

// program is the espeak-ng to run.
func (e *Engine) program() (string, error) {
	if e.path != "" {
		return e.path, nil
	}
	path, err := exec.LookPath(Kind)
	if err != nil {
		return "", fmt.Errorf("find espeak-ng: %w", err)
	}
	return path, nil
}
