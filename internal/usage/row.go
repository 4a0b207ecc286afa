package usage

import (
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Outcome is what is known of a request when it ends: who asked, where it
// ran, what it answered and what the worker reported.
type Outcome struct {
	RequestID   string
	Started     time.Time
	Ended       time.Time
	Model       string
	RequestType string // api.RequestChat, ...
	Stream      bool
	KeyID       string
	Attempts    int

	// Status is the answer's HTTP status, ErrorMessage its message when
	// it failed.
	Status       int
	ErrorMessage string

	// Ran is set when the request reached a worker, which WorkerID and
	// WorkerName name.
	Ran        bool
	WorkerID   string
	WorkerName string

	// Usage is the worker's token count, or an estimate (Estimated): the
	// worker's own count of an answer it stopped, or the gateway's from
	// the text relayed when the worker reported none; Produced says
	// whether any text was relayed or counted to estimate from.
	Usage     *api.Usage
	Estimated bool
	Produced  bool
	// Timing is the reply's svc.timing.
	Timing *api.Timing

	Images       int
	AudioSeconds float64
	AudioFormat  string
	// SpeechSeconds is the length of the audio a speech request made.
	SpeechSeconds float64
	Notice        *api.Notice
	EnergyWh      *float64
	// ModerationOutcome and ModerationCategories are a moderation check's.
	ModerationOutcome    string
	ModerationCategories []string
}

// Row is the usage row of a request that ended.
func Row(o Outcome) api.UsageRow {
	row := api.UsageRow{
		ID: o.RequestID, CreatedAt: o.Started.UTC(), Model: o.Model, RequestType: o.RequestType,
		StatusCode: o.Status, RequestDurationMs: o.Ended.Sub(o.Started).Milliseconds(),
		Stream: o.Stream, Attempts: o.Attempts, APIKeyID: o.KeyID, Images: o.Images, EnergyWh: o.EnergyWh,
	}
	failed := o.Status != 200
	if failed {
		msg := o.ErrorMessage
		row.ErrorMessage = &msg
	}
	if o.ModerationOutcome != "" {
		outcome := o.ModerationOutcome
		row.ModerationOutcome, row.ModerationCategories = &outcome, o.ModerationCategories
	}
	if o.AudioFormat != "" && !failed {
		secs, format := o.AudioSeconds, o.AudioFormat
		row.AudioSeconds, row.AudioFormat = &secs, &format
	}
	if o.RequestType == api.RequestSpeech && !failed && o.SpeechSeconds > 0 {
		secs := o.SpeechSeconds
		row.SpeechSeconds = &secs
	}
	if o.Ran {
		row.WorkerID, row.WorkerName = api.NullText(o.WorkerID), api.NullText(o.WorkerName)
	}
	// Tokens are counted for text only; a request that never reached an
	// engine has nothing to estimate, but a client that left mid-answer
	// is billed for what it was sent, and a stream its worker failed for
	// the text it sent and had back, as the spec has it.
	textual := o.RequestType == api.RequestChat || o.RequestType == api.RequestCompletion ||
		o.RequestType == api.RequestEmbeddings || o.RequestType == api.RequestRerank
	if o.Ran && textual && o.Usage != nil && (!o.Estimated || o.Produced || o.Status == 499 || o.Stream && o.Status >= 500) {
		u := o.Usage
		row.PromptTokens, row.CompletionTokens, row.TotalTokens = u.PromptTokens, u.CompletionTokens, u.TotalTokens
		row.ReasoningTokens, row.CachedTokens = u.ReasoningTokens, u.CachedTokens
		row.TokensEstimated = o.Estimated
	}
	if !o.Ran && o.Timing != nil {
		// Refused when its wait for a slot ran out: the wait is known.
		row.QueueWaitMs = msPtr(o.Timing.QueueWaitMs)
	}
	if o.Ran && o.Timing != nil {
		// What was measured stands whatever ended the request: a stream
		// its worker lost after its first token had that token.
		t := o.Timing
		row.TimeToFirstTokenMs = msPtr(t.TTFTMs)
		row.TokensPerSecond = t.TokensPerSecond
		row.DraftAcceptanceRate = t.DraftAcceptanceRate
		row.QueueWaitMs = msPtr(t.QueueWaitMs)
		row.WorkerQueueWaitMs = msPtr(t.WorkerQueueWaitMs)
		row.ModelLoadMs = msPtr(t.ModelLoadMs)
		row.ColdStart = t.ColdStart != nil && *t.ColdStart
	}
	if o.Notice != nil {
		code := o.Notice.Code
		row.Notice = &code
	}
	return row
}

// msPtr is v rounded to a whole millisecond; nil for what is no
// duration, or one too long to believe (past api.MaxMs), which converted
// could also wrap to the most negative int64.
func msPtr(v *float64) *int64 {
	if api.Within(v, 0, api.MaxMs) == nil {
		return nil
	}
	ms := int64(*v + 0.5)
	return &ms
}
