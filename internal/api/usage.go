package api

import (
	"time"

	"github.com/svc-dev/svc/internal/jsontext"
)

// Request types of usage rows and in-flight requests.
const (
	RequestChat       = "chat"
	RequestEmbeddings = "embeddings"
	// RequestCompletion is a text completion (POST /v1/completions): a
	// type of its own, not chat, so that usage can tell raw prompts from
	// conversations.
	RequestCompletion = "completion"
)

// InflightRequest is an entry of GET /api/v1/usage/inflight.
type InflightRequest struct {
	TaskID      string    `json:"task_id"`
	Model       string    `json:"model"`
	WorkerID    string    `json:"worker_id"`   // "" while the request waits for a worker
	WorkerName  string    `json:"worker_name"` // "" while the request waits for a worker
	RequestType string    `json:"request_type"`
	StartedAt   time.Time `json:"started_at"`
	ElapsedMs   int64     `json:"elapsed_ms"`
	// TokensGenerated is a running estimate for streaming chat (chunks
	// relayed so far); null before the first token and for other kinds.
	TokensGenerated *int `json:"tokens_generated"`
	// AudioSeconds is the length of a transcription's audio; absent for
	// other kinds.
	AudioSeconds *float64 `json:"audio_seconds,omitempty"`
	// State is queued (waiting for a worker slot) or running.
	State  string `json:"state"`
	Stream bool   `json:"stream"`
}

// In-flight states.
const (
	StateQueued  = "queued"
	StateRunning = "running"
)

// UsageRow is one completed request: an entry of GET /api/v1/usage/logs.
// Fields a request does not apply to are null or 0.
type UsageRow struct {
	ID           string    `json:"id"`
	CreatedAt    time.Time `json:"created_at"`
	Model        string    `json:"model"`
	RequestType  string    `json:"request_type"`
	StatusCode   int       `json:"status_code"`
	ErrorMessage *string   `json:"error_message"`

	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`

	RequestDurationMs  int64    `json:"request_duration_ms"`
	TimeToFirstTokenMs *int64   `json:"time_to_first_token_ms"`
	TokensPerSecond    *float64 `json:"tokens_per_second"`
	// WorkerID and WorkerName are null on a row of a request no worker
	// took: refused by the gateway, or never given a slot.
	WorkerID            NullText `json:"worker_id"`
	WorkerName          NullText `json:"worker_name"`
	DraftAcceptanceRate *float64 `json:"draft_acceptance_rate"`
	AudioSeconds        *float64 `json:"audio_seconds"`
	AudioFormat         *string  `json:"audio_format"`

	// Fields beyond the spec's table.

	// SpeechSeconds is the length of the audio a speech request made; null
	// for every other request, and for a speech request that failed.
	// audio_seconds is a transcription's, the audio it was sent.
	SpeechSeconds *float64 `json:"speech_seconds"`

	// ReasoningTokens and CachedTokens are part of the completion and
	// prompt counts, as the engine reported them.
	ReasoningTokens *int `json:"reasoning_tokens"`
	CachedTokens    *int `json:"cached_tokens"`
	// QueueWaitMs is the whole wait before generation started;
	// WorkerQueueWaitMs the part of it spent on the serving worker.
	QueueWaitMs       *int64 `json:"queue_wait_ms"`
	WorkerQueueWaitMs *int64 `json:"worker_queue_wait_ms"`
	// ModelLoadMs is set on cold starts, when the model had to be loaded.
	ModelLoadMs *int64 `json:"model_load_ms"`
	ColdStart   bool   `json:"cold_start"`
	// TokensEstimated marks counts estimated by the gateway (about four
	// characters per token) because the worker never reported them.
	TokensEstimated bool `json:"tokens_estimated"`
	Stream          bool `json:"stream"`
	// Images is the number of image inputs of a chat, or of images an
	// image generation made.
	Images int `json:"images"`
	// Notice is the code of the reply's svc.notice, if any.
	Notice *string `json:"notice"`
	// ModerationOutcome is a moderation check's: pass, flagged or error;
	// ModerationCategories the categories flagged. The content checked is
	// never recorded.
	ModerationOutcome    *string  `json:"moderation_outcome"`
	ModerationCategories []string `json:"moderation_categories"`
	// Attempts is how many workers the request was tried on.
	Attempts int `json:"attempts"`
	// EnergyWh is the GPU energy the request used on its worker (its share
	// of the GPUs' measured energy while it ran); null when not measured.
	EnergyWh *float64 `json:"energy_wh"`
	// APIKeyID names the key that made the request.
	APIKeyID string `json:"api_key_id"`
}

// UsageTotals are the counts summary, daily and breakdown report.
type UsageTotals struct {
	Requests         int64   `json:"requests"`
	Succeeded        int64   `json:"succeeded"`
	Failed           int64   `json:"failed"`
	Cancelled        int64   `json:"cancelled"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	TotalTokens      int64   `json:"total_tokens"`
	ReasoningTokens  int64   `json:"reasoning_tokens"`
	CachedTokens     int64   `json:"cached_tokens"`
	Images           int64   `json:"images"`
	AudioSeconds     float64 `json:"audio_seconds"`
	// SpeechSeconds sums the audio speech requests made.
	SpeechSeconds     float64 `json:"speech_seconds"`
	RequestDurationMs int64   `json:"request_duration_ms"`
	// EnergyWh sums the rows' measured GPU energy.
	EnergyWh float64 `json:"energy_wh"`
	// UnmeteredTokens sums the total tokens of the rows that measured no
	// energy (a worker without power readings), which the energy a
	// thousand tokens leaves out. Totals kept before it was counted have
	// none.
	UnmeteredTokens int64 `json:"-"`
}

// UsageSummary is the body of GET /api/v1/usage/summary: totals over the
// last Days UTC days, today included.
type UsageSummary struct {
	Days int    `json:"days"`
	From string `json:"from"` // first day, YYYY-MM-DD
	To   string `json:"to"`   // last day (today), YYYY-MM-DD
	UsageTotals
}

// UsageDay is one entry of GET /api/v1/usage/daily.
type UsageDay struct {
	Date string `json:"date"` // YYYY-MM-DD, UTC
	UsageTotals
}

// UsageBreakdown is the body of GET /api/v1/usage/breakdown.
type UsageBreakdown struct {
	Days    int           `json:"days"`
	From    string        `json:"from"`
	To      string        `json:"to"`
	Sort    string        `json:"sort"` // tokens or requests
	Models  []ModelUsage  `json:"models"`
	Workers []WorkerUsage `json:"workers"`
}

// ModelUsage is a model's totals in a breakdown.
type ModelUsage struct {
	Model string `json:"model"`
	UsageTotals
	// WhPer1KTokens is the measured energy per thousand tokens; absent
	// when no energy or no tokens were counted.
	WhPer1KTokens *float64 `json:"wh_per_1k_tokens,omitempty"`
}

// WorkerUsage is a worker's totals in a breakdown.
type WorkerUsage struct {
	WorkerID   string `json:"worker_id"`
	WorkerName string `json:"worker_name"`
	UsageTotals
	// WhPer1KTokens is the measured energy per thousand tokens; absent
	// when no energy or no tokens were counted.
	WhPer1KTokens *float64 `json:"wh_per_1k_tokens,omitempty"`
}

// NullText is text written as JSON null when empty: a field that does not
// apply is null (the spec's usage-row rule 1), not "". Null reads back as
// "", as encoding/json leaves a string at null.
type NullText string

// MarshalJSON writes null for "", else the string as encoding/json does.
func (t NullText) MarshalJSON() ([]byte, error) {
	if t == "" {
		return []byte("null"), nil
	}
	return jsontext.AppendString(nil, string(t)), nil
}
