package api

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Capabilities a model can have.
const (
	CapChat          = "chat"
	CapEmbeddings    = "embeddings"
	CapModeration    = "moderation"
	CapTranscription = "transcription"
	CapSpeech        = "speech"
	CapRerank        = "rerank"
	// CapImageGeneration is making images from a prompt, as distinct from
	// CapVision, reading images in a chat.
	CapImageGeneration = "image_generation"
	CapVision          = "vision"
	CapTools           = "tools"
	CapReasoning       = "reasoning"
	// CapThinkingBudget marks reasoning models whose thinking can be ended
	// early, so a thinking budget applies to them.
	CapThinkingBudget = "thinking_budget"
)

// Model is a model a worker serves, with the metadata the models list shows.
type Model struct {
	ID            string   `json:"id"`
	Capabilities  []string `json:"capabilities"`
	ContextWindow int      `json:"context_window,omitempty"`
	// SamplingDefaults are the model's recommended sampling values
	// (temperature, top_p, top_k, min_p, xtc_*, mirostat_*, ...).
	SamplingDefaults map[string]float64 `json:"sampling_defaults,omitempty"`
	// DefaultThinking is whether the model thinks when the request does
	// not say; nil for models that do not reason.
	DefaultThinking *bool    `json:"default_thinking,omitempty"`
	Voices          []string `json:"voices,omitempty"`
	DefaultVoice    string   `json:"default_voice,omitempty"`
	// Engine names the adapter serving the model: sim, openai, ollama, or
	// the local program (espeak-ng, ...).
	Engine string `json:"engine"`
	// Local is the engine's own name for the model when the worker serves
	// it under another id (svc worker --model-alias).
	Local string `json:"local_model,omitempty"`
	// Simulated is true for the built-in simulator's models.
	Simulated bool `json:"simulated,omitempty"`
	// Loaded is whether the engine holds the model in memory now, when known.
	Loaded *bool `json:"loaded,omitempty"`
	// AlwaysOn is set on the models a worker keeps loaded (svc worker
	// --always-on): loaded once offered, and again whenever the engine
	// drops one, so that no request waits for a cold start.
	AlwaysOn bool `json:"always_on,omitempty"`
	// Incomplete is set while the model is listed but not fully
	// installed. What needs all of it (image generation, a chat with an
	// image) is refused with a 409 until it is.
	Incomplete *Incomplete `json:"incomplete,omitempty"`
	// Since is when the gateway first saw a worker of the organisation
	// list the model; the fleet sets it, workers do not send it.
	Since time.Time `json:"-"`
}

// Has reports whether the model has capability c.
func (m *Model) Has(c string) bool { return slices.Contains(m.Capabilities, c) }

// Result is how a request ended on the worker, sent at the end of every
// stream. Status 200 is success; anything else carries Error.
type Result struct {
	Status int          `json:"status"`
	Error  *ResultError `json:"error,omitempty"`
	// Retryable is set on failures another worker may not have (engine
	// unreachable, 5xx) when no output was produced.
	Retryable bool `json:"retryable,omitempty"`
	// Final marks an answer any worker would give (a guard model's
	// unreadable verdict): not retried elsewhere, not the worker's fault.
	Final  bool   `json:"final,omitempty"`
	Usage  *Usage `json:"usage,omitempty"`
	Timing Timing `json:"timing"`
	// EnergyWh is the GPU energy the request used, its share of what the
	// worker's GPUs measured while it ran; nil when not measured.
	EnergyWh     *float64 `json:"energy_wh,omitempty"`
	FinishReason string   `json:"finish_reason,omitempty"`
	Notice       *Notice  `json:"notice,omitempty"`
	// AudioFormat and AudioSeconds describe a sealed transcription's
	// audio as the worker read it from the content: the gateway cannot
	// open the upload, and the usage row wants them all the same. Of a
	// sealed speech request, AudioSeconds is the length of the audio made.
	AudioFormat  string   `json:"audio_format,omitempty"`
	AudioSeconds *float64 `json:"audio_seconds,omitempty"`
	// Sealed is a private request's failure as its client reads it, sealed
	// to the client (e2ee's non-streaming reply): the gateway answers with
	// it in place of a body of its own, while Error tells it only the kind
	// of failure.
	Sealed json.RawMessage `json:"sealed,omitempty"`
}

// ResultError is an engine or worker failure.
type ResultError struct {
	Message string `json:"message"`
	Type    string `json:"type,omitempty"`
	Code    string `json:"code,omitempty"`
	// Param names the request's field the failure is about, as the
	// gateway's own errors do (error.param).
	Param string `json:"param,omitempty"`
	// RetryAfter is the engine's own Retry-After on a 429 or 503, in
	// seconds; 0 when it sent none.
	RetryAfter int `json:"retry_after,omitempty"`
}

// Usage counts tokens as the engine reported them, or as the worker
// counted them (Estimated).
type Usage struct {
	PromptTokens     int  `json:"prompt_tokens"`
	CompletionTokens int  `json:"completion_tokens"`
	TotalTokens      int  `json:"total_tokens"`
	ReasoningTokens  *int `json:"reasoning_tokens,omitempty"`
	CachedTokens     *int `json:"cached_tokens,omitempty"`
	// Estimated says the worker counted the tokens itself, as the
	// engine was stopped before it reported them (an answer cut off at
	// the client's cap): the usage row says they are an estimate.
	Estimated bool `json:"estimated,omitempty"`
}

// AppendOpenAI appends u in the OpenAI shape clients read: cached tokens
// only when some prompt tokens were reused, reasoning tokens when
// reported. Its members are sorted, as encoding/json wrote the map it
// once was.
func (u Usage) AppendOpenAI(b []byte) []byte {
	b = append(b, `{"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	if u.ReasoningTokens != nil {
		b = append(b, `,"completion_tokens_details":{"reasoning_tokens":`...)
		b = strconv.AppendInt(b, int64(*u.ReasoningTokens), 10)
		b = append(b, '}')
	}
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	if u.CachedTokens != nil && *u.CachedTokens > 0 {
		b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(*u.CachedTokens), 10)
		b = append(b, '}')
	}
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
	return append(b, '}')
}

// Timing holds what was measured; every field is present only when it was.
type Timing struct {
	TTFTMs              *float64 `json:"ttft_ms,omitempty"`
	TokensPerSecond     *float64 `json:"tokens_per_second,omitempty"`
	DraftAcceptanceRate *float64 `json:"draft_acceptance_rate,omitempty"`
	QueueWaitMs         *float64 `json:"queue_wait_ms,omitempty"`
	WorkerQueueWaitMs   *float64 `json:"worker_queue_wait_ms,omitempty"`
	ModelLoadMs         *float64 `json:"model_load_ms,omitempty"`
	ColdStart           *bool    `json:"cold_start,omitempty"`
}

// Notice is an advisory about a reply (svc.notice).
type Notice struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Request kinds carried by the link (the audio kinds are in audio.go).
const (
	KindChat       = "chat"
	KindEmbeddings = "embeddings"
)

// LinkRequest is the header of a request the gateway sends to a worker.
type LinkRequest struct {
	RequestID string `json:"request_id"`
	Kind      string `json:"kind"`
	Model     string `json:"model"`
	Stream    bool   `json:"stream"`
	// Params are the settings of a request whose body is not JSON (a
	// transcription's TranscriptionParams ahead of the audio).
	Params json.RawMessage `json:"params,omitempty"`
	// ContentFilter names the moderation model a chat's prompt and output
	// are checked with on the worker (the key has content filtering on).
	ContentFilter string `json:"content_filter,omitempty"`
	// E2E marks a body sealed to the worker's key (docs/e2e.md): the
	// worker opens it and seals everything it sends back.
	E2E bool `json:"e2e,omitempty"`
	// Traceparent and Tracestate are the W3C trace context of the
	// gateway's span for the request, so the worker's span continues the
	// trace; empty when the gateway traces nothing.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
	// AnswerMaxTokens caps a chat's answer apart from its thinking: the
	// client's max_tokens when the model has a thinking budget on top.
	// The engine is sent one cap for both, so the worker ends an answer
	// that reaches this one (thinking that ended early left it room).
	// 0 for none.
	AnswerMaxTokens int `json:"answer_max_tokens,omitempty"`
}

// Hello is the worker's first message on a link.
type Hello struct {
	Protocol      int         `json:"protocol"`
	Name          string      `json:"name"`
	Version       string      `json:"version"`
	MaxConcurrent int         `json:"max_concurrent"`
	SessionID     string      `json:"session_id"`
	Models        []Model     `json:"models"`
	Streams       []StreamSeq `json:"streams,omitempty"`
	Draining      bool        `json:"draining,omitempty"`
	// DownMS is how long ago, in milliseconds, the worker's last link to
	// a gateway dropped; 0 on its process's first connection. SentAway
	// says instead that the last link ended at the gateway's GoAway,
	// which that gateway recorded.
	DownMS    int64        `json:"down_ms,omitempty"`
	SentAway  bool         `json:"sent_away,omitempty"`
	Heartbeat *Heartbeat   `json:"heartbeat,omitempty"`
	Engines   []EngineInfo `json:"engines,omitempty"`
	// Features are the protocol features the worker supports
	// (FeatureModeration); a worker of an older release lists fewer.
	Features []string `json:"features,omitempty"`
	// E2EKey is the key requests sealed for this worker alone use; nil
	// for a worker that serves no private inference.
	E2EKey *E2EKey `json:"e2e_key,omitempty"`
	// TokenID is the worker token the link authenticated with: set by the
	// gateway, never sent.
	TokenID string `json:"-"`
}

// EngineInfo describes one engine a worker runs.
type EngineInfo struct {
	Kind      string `json:"kind"`
	URL       string `json:"url,omitempty"`
	Simulated bool   `json:"simulated,omitempty"`
}

// StreamSeq is how far one stream has been received, exchanged on resume.
type StreamSeq struct {
	ID      uint64 `json:"id"`
	RecvSeq uint64 `json:"recv_seq"`
}

// GoAway is the payload of a GoAway the gateway sends of its own accord
// (the worker's own GoAway, and the gateway's acknowledgement of it, carry
// none): the gateway opens no new stream on the link, and the worker is
// to finish what it runs, then reconnect through its configured gateway.
type GoAway struct {
	Reconnect bool   `json:"reconnect"`
	Reason    string `json:"reason,omitempty"`
	// Abandon, from a worker whose drain was cut short, says that the
	// requests it still runs end with its process: the gateway fails them
	// at once rather than wait for a reconnect that cannot resume them.
	// Its Reason says what cut it: AbandonDrainTimeout or AbandonStopped
	// (none, from a release before it said).
	Abandon bool `json:"abandon,omitempty"`
}

// Why a worker abandoned its running requests (GoAway.Reason).
const (
	AbandonDrainTimeout = "drain_timeout"
	AbandonStopped      = "stopped"
)

// Welcome is the gateway's answer to Hello.
type Welcome struct {
	WorkerID   string      `json:"worker_id"`
	Resumed    bool        `json:"resumed"`
	Streams    []StreamSeq `json:"streams,omitempty"`
	HeartbeatS int         `json:"heartbeat_s"`
	// PowerThrough is the end of the last power window the gateway holds
	// for the worker: the worker sends again only windows after it.
	PowerThrough time.Time `json:"power_through,omitzero"`
	// Error refuses the worker; the link is closed after it.
	Error string `json:"error,omitempty"`
	// RetryAfterS, with Error, says the refusal is for now: the worker
	// tries again after this many seconds. Without it a refusal is for
	// good.
	RetryAfterS int `json:"retry_after_s,omitempty"`
	// Redirect says the gateway took no session: the worker is to dial
	// this base URL (http(s)://host:port, with the path scheme of its
	// configured gateway) instead. The link is closed after it. A standby
	// replica, or one that is not the organisation's home, sends it.
	Redirect string `json:"redirect,omitempty"`
}

// Heartbeat is the worker's periodic report.
type Heartbeat struct {
	ActiveTasks int `json:"active_tasks"`
	QueueDepth  int `json:"queue_depth"`
	// Power is a live power reading; nil when the worker reads none.
	Power *LivePower `json:"power,omitempty"`
	// GPUs describes the machine's GPUs, by index; empty without one or
	// when the worker cannot read them. DriverVersion is the GPU
	// driver's release, where known.
	GPUs          []GPU  `json:"gpus,omitempty"`
	DriverVersion string `json:"driver_version,omitempty"`
	// Stalled lists the models whose engine stopped answering (it sent
	// nothing within the worker's time-to-first-byte limit, nor to a
	// probe): the worker takes no requests for them until a probe of the
	// engine is answered. A heartbeat goes at once when the list changes.
	Stalled []string `json:"stalled,omitempty"`
}

// WorkerEventReport is an event a worker reports about itself: how its
// model installs go.
type WorkerEventReport struct {
	EventType string `json:"event_type"`
	Detail    string `json:"detail,omitempty"`
	// Install is a model_install event's metadata.
	Install *ModelInstall `json:"metadata,omitempty"`
	// Load is a model_loaded event's: a load the worker made itself, of
	// an always-on model.
	Load *ModelLoad `json:"load,omitempty"`
}

// ModelLoad is a worker's load of a model it keeps loaded.
type ModelLoad struct {
	Model string `json:"model"`
	// LoadMs is how long the load took; nil when the model was loaded
	// already.
	LoadMs *float64 `json:"model_load_ms,omitempty"`
}

// ModelInstall is where a worker's install of a model stands.
type ModelInstall struct {
	Model string `json:"model"`
	State string `json:"state"` // InstallStarted, InstallProgress, InstallCompleted or InstallFailed
	// Total and Completed are the bytes of an InstallProgress.
	Total     int64 `json:"total,omitempty"`
	Completed int64 `json:"completed,omitempty"`
}

// States of a model install.
const (
	InstallStarted   = "started"
	InstallProgress  = "progress"
	InstallCompleted = "completed"
	InstallFailed    = "failed"
)

// Metadata is the install as a model_install event's metadata shows it.
func (i ModelInstall) Metadata() map[string]any {
	m := map[string]any{"model": i.Model, "state": i.State}
	if i.State == InstallProgress {
		m["total"], m["completed"] = i.Total, i.Completed
	}
	return m
}

// Metadata is the load's event metadata: the model, the load's time when
// it took one (as a request's cold start records it), and always_on.
func (l ModelLoad) Metadata() map[string]any {
	m := map[string]any{"model": l.Model, "always_on": true}
	if l.LoadMs != nil {
		m["model_load_ms"] = *l.LoadMs
	}
	return m
}

// PullProgress is one step of a model install.
type PullProgress struct {
	Status    string `json:"status"`
	Digest    string `json:"digest,omitempty"`
	Total     int64  `json:"total,omitempty"`
	Completed int64  `json:"completed,omitempty"`
}

// Worker is an entry of GET /api/v1/workers.
type Worker struct {
	WorkerID           string       `json:"worker_id"`
	WorkerName         string       `json:"worker_name"`
	Status             string       `json:"status"`
	Version            string       `json:"version"`
	Models             []Model      `json:"models"`
	ActiveTasks        int          `json:"active_tasks"`
	QueueDepth         int          `json:"queue_depth"`
	MaxConcurrent      int          `json:"max_concurrent"`
	LastSeenSecondsAgo int          `json:"last_seen_seconds_ago"`
	OfflineSince       *time.Time   `json:"offline_since,omitempty"`
	Power              *LivePower   `json:"power"`
	Draining           bool         `json:"draining"`
	Engines            []EngineInfo `json:"engines,omitempty"`
	Features           []string     `json:"features,omitempty"`
	Simulated          bool         `json:"simulated"`
	ConnectedAt        *time.Time   `json:"connected_at,omitempty"`
	// GPUs are the worker's GPUs as its last report described them:
	// empty, never null, without one. GPUCount is how many;
	// DriverVersion the driver's release, null when unknown.
	GPUs          []GPU   `json:"gpus"`
	GPUCount      int     `json:"gpu_count"`
	DriverVersion *string `json:"driver_version"`
	// ApprovalPending is set while the worker waits for the
	// organisation's approval (require_worker_approval): it is connected
	// and is routed nothing.
	ApprovalPending bool `json:"approval_pending"`
	// LinkDownSince is when the link of a worker still in its grace
	// dropped: the gateway waits for it to resume, and it is not offline
	// yet. Not part of the list's JSON.
	LinkDownSince *time.Time `json:"-"`
}

// GPU is one GPU of a worker's machine. Memory figures are MiB; 0 when
// the reader could not tell.
type GPU struct {
	Index          int    `json:"index"`
	Name           string `json:"name"`
	MemoryTotalMiB int64  `json:"memory_total_mib"`
	MemoryUsedMiB  int64  `json:"memory_used_mib"`
}

// Worker statuses.
const (
	StatusHealthy   = "healthy"
	StatusStale     = "stale"
	StatusUnhealthy = "unhealthy"
	StatusOffline   = "offline"
)

// WorkerEvent is an entry of GET /api/v1/workers/events.
type WorkerEvent struct {
	ID         string         `json:"id"`
	WorkerID   string         `json:"worker_id"`
	WorkerName string         `json:"worker_name"`
	EventType  string         `json:"event_type"`
	Detail     *string        `json:"detail"`
	Metadata   map[string]any `json:"metadata"`
	CreatedAt  time.Time      `json:"created_at"`
	Transient  bool           `json:"transient"`
	Actor      *string        `json:"actor"`
	// Install is a model_install event's Metadata as the worker reported
	// it, for the gateway's own use; nil on an event read back from the
	// store.
	Install *ModelInstall `json:"-"`
}

// Worker event types.
const (
	EventConnected     = "connected"
	EventDisconnected  = "disconnected"
	EventHealthChanged = "health_changed"
	EventModelsChanged = "models_changed"
	EventModelLoaded   = "model_loaded"
	EventModelInstall  = "model_install"
	EventDraining      = "draining"
	EventReplaced      = "replaced"
	// EventEngineStalled and EventEngineRecovered are health changes of
	// one engine of a worker: it stopped answering, so its models are
	// held back, and it answered a probe again.
	EventEngineStalled   = "engine_stalled"
	EventEngineRecovered = "engine_recovered"
	// EventApprovalPending is a worker the organisation has not approved
	// connecting while it requires approval: it is listed and serves
	// nothing. EventApproved is its approval, after which it serves.
	EventApprovalPending = "approval_pending"
	EventApproved        = "approved"
	// EventSettingsChanged is a worker whose settings (max_concurrent,
	// engines, features, private inference) differ from its last
	// connection's; metadata has each change's from and to.
	EventSettingsChanged = "settings_changed"
)

// ModelEntry is an entry of GET /v1/models: the common shape, Anthropic's
// (type, display_name, created_at) beside it, and the metadata workers
// report.
type ModelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Type, DisplayName and CreatedAt are the entry as Anthropic's SDKs
	// read it.
	Type             string             `json:"type"`
	DisplayName      string             `json:"display_name"`
	CreatedAt        string             `json:"created_at"`
	Capabilities     []string           `json:"capabilities"`
	Engine           string             `json:"engine"`
	ContextWindow    int                `json:"context_window,omitempty"`
	SamplingDefaults map[string]float64 `json:"sampling_defaults,omitempty"`
	DefaultThinking  *bool              `json:"default_thinking,omitempty"`
	Voices           []string           `json:"voices,omitempty"`
	DefaultVoice     string             `json:"default_voice,omitempty"`
	// Local is the engine's own name for a model offered under an alias.
	Local     string `json:"local_model,omitempty"`
	Simulated bool   `json:"simulated,omitempty"`
	// Incomplete is set while the model is not fully installed on any
	// worker that lists it.
	Incomplete *Incomplete `json:"incomplete,omitempty"`
}

// ModelList is the body of GET /v1/models: OpenAI's list, and Anthropic's
// page of one (has_more, first_id, last_id).
type ModelList struct {
	Object  string       `json:"object"`
	Data    []ModelEntry `json:"data"`
	HasMore bool         `json:"has_more"`
	FirstID *string      `json:"first_id"`
	LastID  *string      `json:"last_id"`
}

// MaxModelID bounds a model id, in bytes: the longest a worker may list.
const MaxModelID = 256

// ShortModelID is id as a message or a record quotes it: whole when it
// could be a model's, else cut to MaxModelID bytes (at a character's
// start) and marked cut. A client may name a model of megabytes, which no
// worker lists.
func ShortModelID(id string) string {
	if len(id) <= MaxModelID {
		return id
	}
	n := MaxModelID
	for n > 0 && !utf8.RuneStart(id[n]) {
		n--
	}
	return id[:n] + "…"
}

// MaxWorkerName bounds a worker's name, in characters.
const MaxWorkerName = 128

// WorkerNameError is why name, trimmed, cannot be a worker's, or "": the
// rule a worker's hello is held to, and an approval given before it
// connects.
func WorkerNameError(name string) string {
	switch {
	case name == "" || utf8.RuneCountInString(name) > MaxWorkerName || !utf8.ValidString(name):
		return "worker name must be 1 to 128 characters of UTF-8"
	case strings.ContainsFunc(name, unicode.IsControl):
		return "worker name must not hold control characters"
	}
	return ""
}

// ValidModelID reports whether a request could name id: not empty, at
// most MaxModelID bytes, and without control characters.
func ValidModelID(id string) bool {
	return id != "" && len(id) <= MaxModelID && !strings.ContainsFunc(id, unicode.IsControl)
}
