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
	var f usageFields
	if !readUsage(raw, &f) {
		var u usageJSON
		if json.Unmarshal(raw, &u) != nil {
			return
		}
		f = u.fields()
	}
	// Counts no engine could mean (negative, or past any context) are no
	// count at all: the gateway estimates from the text instead, where
	// believing them would put them in the usage rows and the totals,
	// which are kept for good.
	for _, n := range []flexInt{f.prompt, f.completion, f.total, f.reasoning, f.cached} {
		if n < 0 || n > maxCount {
			return
		}
	}
	out := &api.Usage{
		PromptTokens:     int(f.prompt),
		CompletionTokens: int(f.completion),
		TotalTokens:      int(f.total),
	}
	if out.TotalTokens == 0 {
		out.TotalTokens = out.PromptTokens + out.CompletionTokens
	}
	if f.hasReasoning {
		out.ReasoningTokens = ptr(int(f.reasoning))
	}
	if f.hasCached {
		out.CachedTokens = ptr(int(f.cached))
	}
	s.usage = out
}

// usageFields is what captureUsage takes from a usage object.
type usageFields struct {
	prompt, completion, total flexInt
	reasoning, cached         flexInt
	hasReasoning, hasCached   bool
}

func (u *usageJSON) fields() usageFields {
	f := usageFields{prompt: u.PromptTokens, completion: u.CompletionTokens, total: u.TotalTokens}
	if d := u.CompletionTokensDetails; d != nil && d.ReasoningTokens != nil {
		f.reasoning, f.hasReasoning = *d.ReasoningTokens, true
	}
	if d := u.PromptTokensDetails; d != nil && d.CachedTokens != nil {
		f.cached, f.hasCached = *d.CachedTokens, true
	}
	return f
}

// readUsage reads a usage object, which must be valid JSON, as decoding
// it into usageJSON would, in one pass: every response carries one, and
// reflection made it a noticeable share of a request's cost. ok is false
// when encoding/json must decide: a member repeated or named in another
// case, a details member that is neither an object nor null.
func readUsage(raw []byte, f *usageFields) (ok bool) {
	ok = true
	var seen uint8
	if !topMembers(raw, func(key, val []byte) bool {
		var bit uint8
		switch string(key) {
		case "prompt_tokens":
			bit, f.prompt = 1, flexIntOf(val)
		case "completion_tokens":
			bit, f.completion = 2, flexIntOf(val)
		case "total_tokens":
			bit, f.total = 4, flexIntOf(val)
		case "completion_tokens_details":
			bit = 8
			f.reasoning, f.hasReasoning, ok = readDetail(val, "reasoning_tokens")
		case "prompt_tokens_details":
			bit = 16
			f.cached, f.hasCached, ok = readDetail(val, "cached_tokens")
		default:
			ok = !foldsTo(key, "prompt_tokens", "completion_tokens", "total_tokens",
				"completion_tokens_details", "prompt_tokens_details")
		}
		ok = ok && seen&bit == 0
		seen |= bit
		return ok
	}) {
		return false
	}
	return ok
}

// readDetail reads member name of a usage details object; has is false
// when it is absent or null.
func readDetail(val []byte, name string) (n flexInt, has, ok bool) {
	if isNull(val) {
		return 0, false, true
	}
	if val[0] != '{' {
		return 0, false, false
	}
	ok, seen := true, false
	if !topMembers(val, func(key, v []byte) bool {
		switch {
		case string(key) == name:
			ok = !seen
			seen = true
			if has = !isNull(v); has {
				n = flexIntOf(v)
			}
		case foldsTo(key, name):
			ok = false
		}
		return ok
	}) {
		return 0, false, false
	}
	return n, has, ok
}

// foldsTo reports whether key is one of names in another case, which
// encoding/json would take for it.
func foldsTo(key []byte, names ...string) bool {
	for _, name := range names {
		if string(key) != name && bytes.EqualFold(key, []byte(name)) {
			return true
		}
	}
	return false
}

func flexIntOf(raw []byte) flexInt {
	var n flexInt
	_ = n.UnmarshalJSON(raw) // it takes anything
	return n
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
	if math.Abs(f) > maxCount {
		// No count is that large; converted, it would wrap.
		*n = -1
		return nil
	}
	*n = flexInt(f)
	return nil
}

// maxCount bounds a believable token count or context length.
const maxCount = 1 << 40

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
