package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"

	"github.com/svc-dev/svc/internal/jsontext"
)

// Every request on the link carries a LinkRequest to the worker and a
// Result back, and encoding/json's reflection was a tenth of what a small
// request costs either process. These write the bytes json.Marshal writes
// and read what json.Unmarshal reads, by hand, so either end may be of an
// older release that still uses encoding/json.

// errLinkJSON is the error for a message encoding/json would not decode.
var errLinkJSON = errors.New("malformed link message")

// AppendJSON appends the request as json.Marshal writes it.
func (r *LinkRequest) AppendJSON(b []byte) []byte {
	b = append(b, `{"request_id":`...)
	b = jsontext.AppendString(b, r.RequestID)
	b = append(b, `,"kind":`...)
	b = jsontext.AppendString(b, r.Kind)
	b = append(b, `,"model":`...)
	b = jsontext.AppendString(b, r.Model)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, r.Stream)
	if len(r.Params) > 0 {
		// Compacted and escaped as encoding/json passes a RawMessage on;
		// a transcription's settings, not worth writing by hand.
		params, err := json.Marshal(r.Params)
		if err != nil {
			params = []byte("null")
		}
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	if r.ContentFilter != "" {
		b = append(b, `,"content_filter":`...)
		b = jsontext.AppendString(b, r.ContentFilter)
	}
	if r.E2E {
		b = append(b, `,"e2e":true`...)
	}
	if r.Traceparent != "" {
		b = append(b, `,"traceparent":`...)
		b = jsontext.AppendString(b, r.Traceparent)
	}
	if r.Tracestate != "" {
		b = append(b, `,"tracestate":`...)
		b = jsontext.AppendString(b, r.Tracestate)
	}
	if r.AnswerMaxTokens != 0 {
		b = append(b, `,"answer_max_tokens":`...)
		b = strconv.AppendInt(b, int64(r.AnswerMaxTokens), 10)
	}
	return append(b, '}')
}

// DecodeLinkRequest reads a request's header into r as json.Unmarshal
// would.
func DecodeLinkRequest(b []byte, r *LinkRequest) error {
	var s jsontext.Scanner
	s.Reset(b)
	if s.Object() {
		for n := 0; s.Next(n, '}'); n++ {
			k, kind := s.Key()
			switch {
			case s.Is(k, kind, "request_id"):
				text(&s, &r.RequestID)
			case s.Is(k, kind, "kind"):
				text(&s, &r.Kind)
			case s.Is(k, kind, "model"):
				text(&s, &r.Model)
			case s.Is(k, kind, "stream"):
				boolean(&s, &r.Stream)
			case s.Is(k, kind, "params"):
				r.Params = append(json.RawMessage(nil), s.Raw()...)
			case s.Is(k, kind, "content_filter"):
				text(&s, &r.ContentFilter)
			case s.Is(k, kind, "e2e"):
				boolean(&s, &r.E2E)
			case s.Is(k, kind, "traceparent"):
				text(&s, &r.Traceparent)
			case s.Is(k, kind, "tracestate"):
				text(&s, &r.Tracestate)
			case s.Is(k, kind, "answer_max_tokens"):
				integer(&s, &r.AnswerMaxTokens)
			default:
				s.Value()
			}
		}
	}
	return finish(&s)
}

// AppendJSON appends the result as json.Marshal writes it, except that a
// measurement that is not a finite number, which json.Marshal refuses
// along with the whole result, is left out as if not measured.
func (r *Result) AppendJSON(b []byte) []byte {
	b = append(b, `{"status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	if e := r.Error; e != nil {
		b = append(b, `,"error":{"message":`...)
		b = jsontext.AppendString(b, e.Message)
		if e.Type != "" {
			b = append(b, `,"type":`...)
			b = jsontext.AppendString(b, e.Type)
		}
		if e.Code != "" {
			b = append(b, `,"code":`...)
			b = jsontext.AppendString(b, e.Code)
		}
		if e.Param != "" {
			b = append(b, `,"param":`...)
			b = jsontext.AppendString(b, e.Param)
		}
		if e.RetryAfter != 0 {
			b = append(b, `,"retry_after":`...)
			b = strconv.AppendInt(b, int64(e.RetryAfter), 10)
		}
		b = append(b, '}')
	}
	if r.Retryable {
		b = append(b, `,"retryable":true`...)
	}
	if r.Final {
		b = append(b, `,"final":true`...)
	}
	if u := r.Usage; u != nil {
		b = append(b, `,"usage":{"prompt_tokens":`...)
		b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
		b = append(b, `,"completion_tokens":`...)
		b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
		b = append(b, `,"total_tokens":`...)
		b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
		if u.ReasoningTokens != nil {
			b = append(b, `,"reasoning_tokens":`...)
			b = strconv.AppendInt(b, int64(*u.ReasoningTokens), 10)
		}
		if u.CachedTokens != nil {
			b = append(b, `,"cached_tokens":`...)
			b = strconv.AppendInt(b, int64(*u.CachedTokens), 10)
		}
		if u.Estimated {
			b = append(b, `,"estimated":true`...)
		}
		b = append(b, '}')
	}
	b = append(b, `,"timing":`...)
	b = r.Timing.AppendJSON(b)
	if finite(r.EnergyWh) {
		b = append(b, `,"energy_wh":`...)
		b = jsontext.AppendFloat(b, *r.EnergyWh)
	}
	if r.FinishReason != "" {
		b = append(b, `,"finish_reason":`...)
		b = jsontext.AppendString(b, r.FinishReason)
	}
	if n := r.Notice; n != nil {
		b = append(b, `,"notice":{"code":`...)
		b = jsontext.AppendString(b, n.Code)
		b = append(b, `,"message":`...)
		b = jsontext.AppendString(b, n.Message)
		b = append(b, '}')
	}
	if r.AudioFormat != "" {
		b = append(b, `,"audio_format":`...)
		b = jsontext.AppendString(b, r.AudioFormat)
	}
	if finite(r.AudioSeconds) {
		b = append(b, `,"audio_seconds":`...)
		b = jsontext.AppendFloat(b, *r.AudioSeconds)
	}
	if len(r.Sealed) > 0 {
		b = append(b, `,"sealed":`...)
		b = append(b, r.Sealed...)
	}
	return append(b, '}')
}

// AppendJSON appends the timing as json.Marshal writes it, leaving out
// what is not a finite number.
func (t *Timing) AppendJSON(b []byte) []byte {
	b = append(b, '{')
	start := len(b)
	num := func(name string, v *float64) {
		if !finite(v) {
			return
		}
		if len(b) > start {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = jsontext.AppendFloat(b, *v)
	}
	num("ttft_ms", t.TTFTMs)
	num("tokens_per_second", t.TokensPerSecond)
	num("draft_acceptance_rate", t.DraftAcceptanceRate)
	num("queue_wait_ms", t.QueueWaitMs)
	num("worker_queue_wait_ms", t.WorkerQueueWaitMs)
	num("model_load_ms", t.ModelLoadMs)
	if t.ColdStart != nil {
		if len(b) > start {
			b = append(b, ',')
		}
		b = append(b, `"cold_start":`...)
		b = strconv.AppendBool(b, *t.ColdStart)
	}
	return append(b, '}')
}

func finite(v *float64) bool {
	return v != nil && !math.IsInf(*v, 0) && !math.IsNaN(*v)
}

// DecodeResult reads a result into r as json.Unmarshal would, then bounds
// it (see Result.bound): the worker's word goes into the client's usage,
// the usage rows and the totals, which are kept for good.
func DecodeResult(b []byte, r *Result) error {
	err := decodeResult(b, r)
	r.bound()
	return err
}

func decodeResult(b []byte, r *Result) error {
	var s jsontext.Scanner
	s.Reset(b)
	if s.Object() {
		for n := 0; s.Next(n, '}'); n++ {
			k, kind := s.Key()
			switch {
			case s.Is(k, kind, "status"):
				integer(&s, &r.Status)
			case s.Is(k, kind, "error"):
				readResultError(&s, &r.Error)
			case s.Is(k, kind, "retryable"):
				boolean(&s, &r.Retryable)
			case s.Is(k, kind, "final"):
				boolean(&s, &r.Final)
			case s.Is(k, kind, "usage"):
				readUsage(&s, &r.Usage)
			case s.Is(k, kind, "timing"):
				readTiming(&s, &r.Timing)
			case s.Is(k, kind, "energy_wh"):
				floatPtr(&s, &r.EnergyWh)
			case s.Is(k, kind, "finish_reason"):
				text(&s, &r.FinishReason)
			case s.Is(k, kind, "notice"):
				readNotice(&s, &r.Notice)
			case s.Is(k, kind, "audio_format"):
				text(&s, &r.AudioFormat)
			case s.Is(k, kind, "audio_seconds"):
				floatPtr(&s, &r.AudioSeconds)
			case s.Is(k, kind, "sealed"):
				r.Sealed = bytes.Clone(s.Raw())
			default:
				s.Value()
			}
		}
	}
	return finish(&s)
}

// MaxTokens bounds a token count the gateway believes: 2^32, over four
// hundred times the longest context windows (some ten million tokens),
// yet small enough that a billion rows of it (2^63 / 2^33, a total being
// up to two such counts) fit in one day's int64 sums; past that the sums
// saturate (usage.Add).
const MaxTokens = 1 << 32

// MaxMs bounds a duration the gateway believes, in milliseconds: a week,
// far past the longest a request may run (relay.Timing.MaxDuration), and
// exact in a float64 and an int64 alike.
const MaxMs = 7 * 24 * 3600 * 1000

// Bounds of the other measurements a worker reports. No request uses a
// megawatt-hour (a 16-GPU machine at full power for a day uses less), and
// none has a week of audio, in or out.
const (
	maxEnergyWh     = 1e6
	maxAudioSeconds = MaxMs / 1000
)

// bound drops what no worker could have measured. A usage with a count
// no engine could mean is no usage, as the engine adapter has it, and the
// gateway estimates from the text instead: a clamped count would still
// bill billions of tokens never served. A total short of its parts is
// their sum, as the adapter makes a missing one. A timing or measurement
// that is negative or past its bound is not measured; so is an acceptance
// rate outside 0..1, since clamping one would make up a rate instead.
func (r *Result) bound() {
	if u := r.Usage; u != nil {
		if !isCount(u.PromptTokens) || !isCount(u.CompletionTokens) || !isCount(u.TotalTokens) ||
			u.ReasoningTokens != nil && !isCount(*u.ReasoningTokens) || u.CachedTokens != nil && !isCount(*u.CachedTokens) {
			r.Usage = nil
		} else {
			u.TotalTokens = max(u.TotalTokens, u.PromptTokens+u.CompletionTokens)
		}
	}
	t := &r.Timing
	t.TTFTMs = Within(t.TTFTMs, 0, MaxMs)
	t.TokensPerSecond = Within(t.TokensPerSecond, 0, math.MaxFloat64)
	t.DraftAcceptanceRate = Within(t.DraftAcceptanceRate, 0, 1)
	t.QueueWaitMs = Within(t.QueueWaitMs, 0, MaxMs)
	t.WorkerQueueWaitMs = Within(t.WorkerQueueWaitMs, 0, MaxMs)
	t.ModelLoadMs = Within(t.ModelLoadMs, 0, MaxMs)
	r.EnergyWh = Within(r.EnergyWh, 0, maxEnergyWh)
	r.AudioSeconds = Within(r.AudioSeconds, 0, maxAudioSeconds)
}

func isCount(n int) bool { return n >= 0 && n <= MaxTokens }

// Within is p when it points to a number from lo to hi, else nil; NaN is
// never within.
func Within(p *float64, lo, hi float64) *float64 {
	if p == nil || !(*p >= lo && *p <= hi) {
		return nil
	}
	return p
}

func readResultError(s *jsontext.Scanner, p **ResultError) {
	if !object(s, p) {
		return
	}
	e := *p
	for n := 0; s.Next(n, '}'); n++ {
		k, kind := s.Key()
		switch {
		case s.Is(k, kind, "message"):
			text(s, &e.Message)
		case s.Is(k, kind, "type"):
			text(s, &e.Type)
		case s.Is(k, kind, "code"):
			text(s, &e.Code)
		case s.Is(k, kind, "param"):
			text(s, &e.Param)
		case s.Is(k, kind, "retry_after"):
			integer(s, &e.RetryAfter)
		default:
			s.Value()
		}
	}
}

func readUsage(s *jsontext.Scanner, p **Usage) {
	if !object(s, p) {
		return
	}
	u := *p
	for n := 0; s.Next(n, '}'); n++ {
		k, kind := s.Key()
		switch {
		case s.Is(k, kind, "prompt_tokens"):
			integer(s, &u.PromptTokens)
		case s.Is(k, kind, "completion_tokens"):
			integer(s, &u.CompletionTokens)
		case s.Is(k, kind, "total_tokens"):
			integer(s, &u.TotalTokens)
		case s.Is(k, kind, "reasoning_tokens"):
			intPtr(s, &u.ReasoningTokens)
		case s.Is(k, kind, "cached_tokens"):
			intPtr(s, &u.CachedTokens)
		case s.Is(k, kind, "estimated"):
			boolean(s, &u.Estimated)
		default:
			s.Value()
		}
	}
}

func readTiming(s *jsontext.Scanner, t *Timing) {
	if !s.Object() {
		return
	}
	for n := 0; s.Next(n, '}'); n++ {
		k, kind := s.Key()
		switch {
		case s.Is(k, kind, "ttft_ms"):
			floatPtr(s, &t.TTFTMs)
		case s.Is(k, kind, "tokens_per_second"):
			floatPtr(s, &t.TokensPerSecond)
		case s.Is(k, kind, "draft_acceptance_rate"):
			floatPtr(s, &t.DraftAcceptanceRate)
		case s.Is(k, kind, "queue_wait_ms"):
			floatPtr(s, &t.QueueWaitMs)
		case s.Is(k, kind, "worker_queue_wait_ms"):
			floatPtr(s, &t.WorkerQueueWaitMs)
		case s.Is(k, kind, "model_load_ms"):
			floatPtr(s, &t.ModelLoadMs)
		case s.Is(k, kind, "cold_start"):
			if s.Peek() == 'n' {
				s.Null()
				t.ColdStart = nil
			} else if v, ok := s.Bool(); ok {
				t.ColdStart = &v
			}
		default:
			s.Value()
		}
	}
}

func readNotice(s *jsontext.Scanner, p **Notice) {
	if !object(s, p) {
		return
	}
	no := *p
	for n := 0; s.Next(n, '}'); n++ {
		k, kind := s.Key()
		switch {
		case s.Is(k, kind, "code"):
			text(s, &no.Code)
		case s.Is(k, kind, "message"):
			text(s, &no.Message)
		default:
			s.Value()
		}
	}
}

// object reports whether the value of a pointer field is an object to
// read member by member, into what p points to, made when nil. Null
// clears the field; anything else is read past (see Scanner.Object).
func object[T any](s *jsontext.Scanner, p **T) bool {
	switch s.Peek() {
	case 'n':
		s.Null()
		*p = nil
		return false
	case '{':
		if *p == nil {
			*p = new(T)
		}
	}
	return s.Object()
}

// The readers of one field: null leaves a value as it was and clears a
// pointer, as encoding/json does.

func text(s *jsontext.Scanner, dst *string) {
	if t, ok := s.Text(); ok {
		*dst = string(t)
	}
}

func boolean(s *jsontext.Scanner, dst *bool) {
	if v, ok := s.Bool(); ok {
		*dst = v
	}
}

func integer(s *jsontext.Scanner, dst *int) {
	if v, ok := s.Int(); ok {
		*dst = int(v)
	}
}

func intPtr(s *jsontext.Scanner, dst **int) {
	if s.Peek() == 'n' {
		s.Null()
		*dst = nil
		return
	}
	if v, ok := s.Int(); ok {
		n := int(v)
		*dst = &n
	}
}

func floatPtr(s *jsontext.Scanner, dst **float64) {
	if s.Peek() == 'n' {
		s.Null()
		*dst = nil
		return
	}
	if v, ok := s.Float(); ok {
		*dst = &v
	}
}

// finish checks that the value was JSON, of the right types, and alone.
func finish(s *jsontext.Scanner) error {
	s.End()
	if s.Bad() || s.Mistyped() {
		return errLinkJSON
	}
	return nil
}
