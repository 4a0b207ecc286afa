package openai

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// stats collects what a response says about itself: usage, finish reason
// and engine timings, plus the worker's own clock readings when streaming.
type stats struct {
	usage   *api.Usage
	finish  string
	timings *llamaTimings
	// draftRate is vLLM's per-request speculative decoding acceptance.
	draftRate *float64

	// Worker-side measurements; zero when not measured.
	start    time.Time // request sent
	firstTok time.Time // first chunk with content, reasoning or tool calls
	lastTok  time.Time // last such chunk
}

// result is the success Result with everything captured.
func (s *stats) result() *api.Result {
	r := &api.Result{Status: http.StatusOK, Usage: s.usage, FinishReason: s.finish}
	t := &r.Timing
	if s.timings != nil {
		// llama.cpp measured these itself, which beats the worker's view
		// through HTTP buffering.
		t.TTFTMs = nonNegative(s.timings.PromptMs)
		t.TokensPerSecond = positive(s.timings.PredictedPerSecond)
		if n := s.timings.DraftN; n != nil && *n > 0 && s.timings.DraftNAccepted != nil {
			t.DraftAcceptanceRate = ratio(*s.timings.DraftNAccepted, *n)
		}
	}
	if t.DraftAcceptanceRate == nil {
		t.DraftAcceptanceRate = s.draftRate
	}
	if !s.firstTok.IsZero() {
		if t.TTFTMs == nil {
			t.TTFTMs = ptr(ms(s.firstTok.Sub(s.start)))
		}
		if t.TokensPerSecond == nil && s.usage != nil && s.usage.CompletionTokens >= 2 {
			// The first token's time is TTFT; the rate is over the rest.
			if d := s.lastTok.Sub(s.firstTok); d > 0 {
				t.TokensPerSecond = ptr(float64(s.usage.CompletionTokens-1) / d.Seconds())
			}
		}
	}
	return r
}

// tokenAt records that a chunk carrying generated output arrived at now.
func (s *stats) tokenAt(now time.Time) {
	if s.firstTok.IsZero() {
		s.firstTok = now
	}
	s.lastTok = now
}

// usageJSON is OpenAI's usage object as engines fill it.
type usageJSON struct {
	PromptTokens            flexInt `json:"prompt_tokens"`
	CompletionTokens        flexInt `json:"completion_tokens"`
	TotalTokens             flexInt `json:"total_tokens"`
	CompletionTokensDetails *struct {
		ReasoningTokens *flexInt `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
	PromptTokensDetails *struct {
		CachedTokens *flexInt `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// captureUsage records a usage object; null or malformed ones are ignored
// so that a quirk in the accounting never fails a served request.
func (s *stats) captureUsage(raw json.RawMessage) {
	if isNull(raw) {
		return
	}
	var u usageJSON
	if json.Unmarshal(raw, &u) != nil {
		return
	}
	out := &api.Usage{
		PromptTokens:     int(u.PromptTokens),
		CompletionTokens: int(u.CompletionTokens),
		TotalTokens:      int(u.TotalTokens),
	}
	if out.TotalTokens == 0 {
		out.TotalTokens = out.PromptTokens + out.CompletionTokens
	}
	if d := u.CompletionTokensDetails; d != nil && d.ReasoningTokens != nil {
		out.ReasoningTokens = ptr(int(*d.ReasoningTokens))
	}
	if d := u.PromptTokensDetails; d != nil && d.CachedTokens != nil {
		out.CachedTokens = ptr(int(*d.CachedTokens))
	}
	s.usage = out
}

// llamaTimings is the part of llama.cpp's timings object the Result uses.
// draft_n and draft_n_accepted are only sent when speculative decoding
// drafted something.
type llamaTimings struct {
	PromptMs           *float64 `json:"prompt_ms"`
	PredictedPerSecond *float64 `json:"predicted_per_second"`
	DraftN             *float64 `json:"draft_n"`
	DraftNAccepted     *float64 `json:"draft_n_accepted"`
}

func (s *stats) captureTimings(raw json.RawMessage) {
	if isNull(raw) {
		return
	}
	var t llamaTimings
	if json.Unmarshal(raw, &t) == nil {
		s.timings = &t
	}
}

// vllmMetrics is vLLM's per-request metrics object (experimental, with
// --per-request-spec-decode-metrics). Field names have moved between
// releases, so several spellings are accepted.
type vllmMetrics struct {
	SpeculativeDecoding *struct {
		DraftAcceptanceRate    *float64 `json:"draft_acceptance_rate"`
		AcceptanceRate         *float64 `json:"acceptance_rate"`
		NumDraftTokens         *float64 `json:"num_draft_tokens"`
		NumAcceptedDraftTokens *float64 `json:"num_accepted_draft_tokens"`
		NumAcceptedTokens      *float64 `json:"num_accepted_tokens"`
	} `json:"speculative_decoding"`
}

func (s *stats) captureMetrics(raw json.RawMessage) {
	var m vllmMetrics
	if isNull(raw) || json.Unmarshal(raw, &m) != nil || m.SpeculativeDecoding == nil {
		return
	}
	sd := m.SpeculativeDecoding
	accepted := sd.NumAcceptedDraftTokens
	if accepted == nil {
		accepted = sd.NumAcceptedTokens
	}
	if sd.NumDraftTokens != nil && *sd.NumDraftTokens > 0 && accepted != nil {
		s.draftRate = ratio(*accepted, *sd.NumDraftTokens)
		return
	}
	rate := sd.DraftAcceptanceRate
	if rate == nil {
		rate = sd.AcceptanceRate
	}
	if rate != nil && *rate >= 0 && *rate <= 1 {
		s.draftRate = ptr(*rate)
	}
}

// flexInt is a token count that tolerates floats, quoted numbers and null.
type flexInt int

func (n *flexInt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) >= 2 && b[0] == '"' {
		b = b[1 : len(b)-1]
	}
	if len(b) == 0 || string(b) == "null" {
		*n = 0
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		*n = 0
		return nil
	}
	*n = flexInt(f)
	return nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ptr[T any](v T) *T { return &v }

func ratio(num, den float64) *float64 {
	r := num / den
	if math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
		return nil
	}
	return &r
}

func nonNegative(v *float64) *float64 {
	if v == nil || math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0 {
		return nil
	}
	return ptr(*v)
}

func positive(v *float64) *float64 {
	if v == nil || math.IsNaN(*v) || math.IsInf(*v, 0) || *v <= 0 {
		return nil
	}
	return ptr(*v)
}
