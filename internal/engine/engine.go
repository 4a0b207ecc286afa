// Package engine defines what the worker agent needs from an inference
// engine, whatever it is: the built-in simulator, an OpenAI-compatible
// server (vLLM, llama-server, SGLang) or Ollama. Adapters live in the
// sub-packages and normalise their engine's answers to one shape.
package engine

import (
	"context"
	"io"
	"net/url"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Request is one inference request as the gateway forwards it.
type Request struct {
	Kind   string // api.KindChat, KindEmbeddings, KindRerank, KindImages, KindCompletion, KindTranscription or KindSpeech
	Model  string // the engine's own name for the model
	Stream bool
	// Body is the request the gateway validated: the OpenAI-format JSON of
	// chat, embeddings, rerank and image generation (b64_json asked for),
	// api.SpeechParams JSON of speech, and
	// api.TranscriptionParams JSON of a transcription; or, from the worker
	// itself, the OpenAI /v1/completions JSON of a raw completion (a guard
	// model's exact prompt; not streamed). Adapters translate
	// it to their engine's own switches.
	Body []byte
	// Audio is a transcription's uploaded file (wav, mp3 or flac, as
	// api.TranscriptionParams says) as it arrives from the gateway: read it
	// once, as a stream. A read fails as soon as the request is cancelled.
	// An engine that fails early need not read the rest: the gateway holds
	// the upload and sends it whole to the next worker it tries. Nil for
	// other kinds.
	Audio io.Reader
}

// Sink receives a response. Streaming chat calls Event once per
// chat.completion.chunk object (JSON, without the "data: " framing); every
// other request calls Body once with the whole response: JSON for chat,
// embeddings, rerank (an api.RerankResponse) and image generation (an
// api.ImagesResponse), an api.Transcript for a transcription, a WAV file (PCM at
// any rate and channel count; the worker converts it to 24 kHz mono) for
// speech. Both block
// while the gateway is not keeping up, and fail when the request was
// cancelled; adapters then stop generating.
type Sink interface {
	Event(ctx context.Context, data []byte) error
	Body(ctx context.Context, data []byte) error
}

// Receiver is a Sink told as the bytes of a whole answer arrive, before
// Body has them all. An engine still working out an answer it sends whole
// may be silent for minutes; one that has begun to send it and then stops
// is stuck, and the worker tells the two apart.
type Receiver interface {
	Receiving()
}

// Engine is one inference engine.
//
// What adapters normalise, whatever the engine sends:
//   - Events and bodies are OpenAI-shaped: chat.completion(.chunk),
//     list of embeddings; transcriptions are an api.Transcript with
//     segments, and speech is WAV. Reasoning text is on reasoning_content and
//     mirrored on reasoning, in messages and deltas alike.
//   - Streaming carries no usage-only chunk and no engine-specific timing
//     fields: usage and timings go into the Result instead, and the gateway
//     writes the final chunks itself.
//   - Failures are a Result with the HTTP status the client should get
//     (see ErrorResult, and ForKind for the statuses that depend on the
//     request's kind), never a Go error.
type Engine interface {
	// Kind is "sim", "openai" or "ollama".
	Kind() string
	// Models lists what the engine serves now.
	Models(ctx context.Context) ([]api.Model, error)
	// Serve runs req, writing the response to sink, and reports how it
	// ended. It never returns nil.
	Serve(ctx context.Context, req *Request, sink Sink) *api.Result
}

// Installer is an engine that can download models.
type Installer interface {
	Pull(ctx context.Context, model string, progress func(api.PullProgress)) error
}

// Keeper is an engine that loads models on demand and unloads those left
// idle (Ollama, the simulator's cold models), and can be told to keep one
// loaded: a worker's always-on models.
type Keeper interface {
	// Keep loads model unless it is loaded, and keeps it loaded from then
	// on: no idle time unloads it, though the engine's restart, or its need
	// of the memory for another model, still may. It returns how long the
	// load took, 0 when the model was loaded already.
	Keep(ctx context.Context, model string) (time.Duration, error)
}

// Closer is an engine that owns something to stop, such as the process
// it runs models in. The worker closes it after its last request.
type Closer interface {
	Close(ctx context.Context) error
}

// Info describes an engine instance for the worker's hello.
type Info interface {
	Info() api.EngineInfo
}

// PublicURL is an engine's URL as others may see it, in the worker's hello
// and the gateway's worker list: without a password it may carry for the
// engine's own sake.
func PublicURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}
