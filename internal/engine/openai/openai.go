// Package openai is the worker's adapter for OpenAI-compatible inference
// servers: vLLM, llama.cpp's llama-server, SGLang and Ollama's /v1 API.
//
// The servers agree on the request format but not on the details of the
// answer: where reasoning text goes (reasoning vs reasoning_content), how
// usage is reported in a stream, and which engine-specific timing fields
// ride along (llama.cpp timings, vLLM metrics). The adapter forwards the
// client's request unchanged apart from the streaming switches it needs and
// each engine's own thinking switches (see mapReasoning), and normalises
// the answer to the shape package engine promises.
//
// Raw completions (api.KindCompletion) go to /v1/completions, which
// vLLM, llama-server and SGLang serve without a chat template: the worker
// sends a guard model its exact prompt that way. Ollama's /v1 templates
// the prompt, so completions are refused there.
//
// Audio goes to /v1/audio/transcriptions and /v1/audio/speech, which
// OpenAI, speaches, vLLM and whisper.cpp's whisper-server (with
// --inference-path) serve with shapes of their own: transcriptions are
// read into an api.Transcript whatever their shape (transcript.go), and
// speech is turned into WAV whatever its encoding (speech.go).
//
// Reranking goes to /v1/rerank (vLLM, llama-server --reranking) and its
// answer is normalised to one shape (rerank.go); image generation goes to
// /v1/images/generations, asking for b64_json (images.go). An engine with
// no route for either answers a 501.
package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// Config configures an Engine.
type Config struct {
	// BaseURL is the server's root, with or without the /v1 suffix:
	// http://127.0.0.1:8000 and http://127.0.0.1:8000/v1 are the same.
	BaseURL string
	// APIKey is sent as a bearer token when set.
	APIKey string
	// Dial, when set, opens the connections to the server instead of
	// net.Dialer (tests reach servers in memory with it), and no proxy of
	// the environment's is used. TLS, for an https URL, is layered on what
	// it returns.
	Dial DialFunc
}

// Engine talks to one OpenAI-compatible server. It is safe for concurrent
// use.
type Engine struct {
	base   string // root URL without /v1 and without a trailing slash
	client *client
	// maxBody bounds a non-streaming answer (maxResponseBody; lowered in
	// tests).
	maxBody int64
	// flavour is what Models last detected from owned_by; it selects the
	// engine-specific lookups (llama.cpp's /props).
	flavour atomic.Uint32
	// simulated is whether Models last found svc's simulator behind the
	// API (owned_by svc-sim), which is labelled wherever it shows.
	simulated atomic.Bool
}

var _ interface {
	engine.Engine
	engine.Info
	engine.Closer
} = (*Engine)(nil)

// New returns an engine for the server at cfg.BaseURL. It does not contact
// the server.
func New(cfg Config) (*Engine, error) {
	base, err := normaliseBase(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	var proxy ProxyFunc // the environment's
	if cfg.Dial != nil {
		proxy = func(*url.URL) (*url.URL, error) { return nil, nil }
	}
	c, err := newClient(base, cfg.APIKey, cfg.Dial, proxy)
	if err != nil {
		return nil, fmt.Errorf("openai engine: %w", err)
	}
	return &Engine{base: base, client: c, maxBody: maxResponseBody}, nil
}

// Close closes the connections kept alive to the server. The worker calls
// it after its last request.
func (e *Engine) Close(context.Context) error {
	e.client.close()
	return nil
}

// normaliseBase reduces a base URL to the server root: the adapter adds
// /v1/... itself, and llama.cpp's /props lives outside /v1.
func normaliseBase(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", errors.New("openai engine: base URL is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("openai engine: parse base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("openai engine: base URL %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("openai engine: base URL %q has no host", raw)
	}
	u.RawQuery, u.Fragment = "", ""
	u.Path = strings.TrimRight(u.Path, "/")
	u.Path = strings.TrimSuffix(u.Path, "/v1")
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String(), nil
}

// Kind is "openai".
func (e *Engine) Kind() string { return "openai" }

// Info describes the engine for the worker's hello.
func (e *Engine) Info() api.EngineInfo {
	return api.EngineInfo{Kind: "openai", URL: engine.PublicURL(e.base), Simulated: e.simulated.Load()}
}

// Serve runs one request. It never returns nil.
func (e *Engine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	switch req.Kind {
	case api.KindChat:
		if req.Stream {
			return e.streamChat(ctx, req, sink)
		}
		return e.chat(ctx, req, sink)
	case api.KindCompletion:
		return e.completion(ctx, req, sink)
	case api.KindEmbeddings:
		return engine.ForKind(req.Kind, e.embeddings(ctx, req, sink))
	case api.KindRerank:
		return engine.ForKind(req.Kind, e.rerank(ctx, req, sink))
	case api.KindImages:
		return e.images(ctx, req, sink)
	case api.KindTranscription:
		return e.transcribe(ctx, req, sink)
	case api.KindSpeech:
		return e.speak(ctx, req, sink)
	default:
		return engine.Failure(http.StatusNotImplemented, api.TypeNotSupported,
			fmt.Sprintf("the openai engine does not serve %q requests", req.Kind))
	}
}

// flavour is the kind of server behind the OpenAI API, as its /v1/models
// owned_by tells.
type flavour uint32

const (
	flavourGeneric flavour = iota
	flavourVLLM
	flavourLlamaCpp
	flavourSGLang
	flavourOllama
)

func (f flavour) String() string {
	switch f {
	case flavourVLLM:
		return "vllm"
	case flavourLlamaCpp:
		return "llamacpp"
	case flavourSGLang:
		return "sglang"
	case flavourOllama:
		return "ollama"
	default:
		return "generic"
	}
}

func flavourOf(ownedBy string) flavour {
	switch strings.ToLower(ownedBy) {
	case "vllm":
		return flavourVLLM
	case "llamacpp", "llama.cpp":
		return flavourLlamaCpp
	case "sglang":
		return flavourSGLang
	case "library", "ollama":
		return flavourOllama
	default:
		return flavourGeneric
	}
}

func (e *Engine) detected() flavour { return flavour(e.flavour.Load()) }
