package transcription

import (
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Limits of a live transcription, beside its sample rate's.
const (
	// LiveMaxDuration bounds one session's audio, as MaxFileBytes bounds
	// an upload's.
	LiveMaxDuration = 30 * time.Minute
	// LiveMaxFrame bounds one binary frame: a second at 48 kHz is 96 KB,
	// and clients send a fraction of a second at a time.
	LiveMaxFrame = 256 << 10
	// LiveIdle is how long a session waits for the client's next frame.
	LiveIdle = time.Minute
)

// LiveRequest is a live transcription's query, checked.
type LiveRequest struct {
	Model  string
	Params api.LiveParams
}

// BytesPerSecond is the PCM's rate of bytes.
func (r *LiveRequest) BytesPerSecond() float64 { return 2 * float64(r.Params.SampleRate) }

// MaxBytes is the most audio a session takes.
func (r *LiveRequest) MaxBytes() int64 {
	return int64(r.BytesPerSecond() * LiveMaxDuration.Seconds())
}

// ParseLive checks a live transcription's query parameters: model
// (required), sample_rate (8000 to 48000 Hz, 16000 when absent) and
// language (ISO 639-1, optional).
func ParseLive(query func(string) string) (*LiveRequest, error) {
	r := &LiveRequest{Model: strings.TrimSpace(query("model")), Params: api.LiveParams{SampleRate: api.LiveDefaultRate}}
	if r.Model == "" {
		return nil, &api.Error{Kind: api.KindInvalidRequest, Param: "model", Code: "missing_required_parameter",
			Message: "model is required: name it in the query, ?model=..."}
	}
	if v := query("sample_rate"); v != "" {
		rate, err := strconv.Atoi(v)
		if err != nil || rate < api.LiveMinRate || rate > api.LiveMaxRate {
			return r, &api.Error{Kind: api.KindInvalidRequest, Param: "sample_rate", Code: "invalid_value",
				Message: "sample_rate must be a whole number of Hz from 8000 to 48000"}
		}
		r.Params.SampleRate = rate
	}
	if v := strings.ToLower(strings.TrimSpace(query("language"))); v != "" {
		if !isLanguage(v) {
			return r, &api.Error{Kind: api.KindInvalidRequest, Param: "language", Code: "invalid_language",
				Message: "language must be an ISO 639-1 code, such as en"}
		}
		r.Params.Language = v
	}
	return r, nil
}
