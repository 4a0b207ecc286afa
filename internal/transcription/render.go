package transcription

import (
	"encoding/json"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
)

// Render is the answer in the response format the client asked for, with
// its content type. JSON formats carry svc, the gateway's object naming the
// worker and the request.
func (r *Request) Render(t *api.Transcript, svc json.RawMessage) (string, []byte, error) {
	switch r.ResponseFormat {
	case FormatText:
		return "text/plain; charset=utf-8", []byte(strings.TrimSpace(t.Text) + "\n"), nil
	case FormatSRT:
		return "application/x-subrip; charset=utf-8", audio.SRT(t), nil
	case FormatVTT:
		return "text/vtt; charset=utf-8", audio.VTT(t), nil
	case FormatVerboseJSON:
		task := "transcribe"
		if r.Params.Translate {
			task = "translate"
		}
		v := verbose{
			Task: task, Language: t.Language, Duration: t.Duration, Text: strings.TrimSpace(t.Text),
			Segments: t.Segments, Usage: durationUsage(r.Params.Seconds), Svc: svc,
		}
		if v.Segments == nil {
			v.Segments = []api.Segment{}
		}
		if r.Params.Words {
			v.Words = t.Words
			if v.Words == nil {
				v.Words = []api.Word{}
			}
		}
		b, err := json.Marshal(v)
		return "application/json", b, err
	default:
		b, err := json.Marshal(plain{Text: strings.TrimSpace(t.Text), Usage: durationUsage(r.Params.Seconds), Svc: svc})
		return "application/json", b, err
	}
}

// JSON reports whether the answer is JSON, which a long wait may pad with
// leading whitespace to keep the connection alive; subtitle and text
// files must begin with their first byte.
func (r *Request) JSON() bool {
	return r.ResponseFormat == FormatJSON || r.ResponseFormat == FormatVerboseJSON
}

type plain struct {
	Text  string          `json:"text"`
	Usage usage           `json:"usage"`
	Svc   json.RawMessage `json:"svc,omitempty"` // none in a sealed transcript: the gateway names the worker beside it
}

type verbose struct {
	Task     string          `json:"task"`
	Language string          `json:"language"`
	Duration float64         `json:"duration"`
	Text     string          `json:"text"`
	Segments []api.Segment   `json:"segments"`
	Words    []api.Word      `json:"words,omitempty"`
	Usage    usage           `json:"usage"`
	Svc      json.RawMessage `json:"svc,omitempty"`
}

// usage is OpenAI's billing object for audio priced by length.
type usage struct {
	Type    string  `json:"type"`
	Seconds float64 `json:"seconds"`
}

func durationUsage(seconds float64) usage { return usage{Type: "duration", Seconds: seconds} }
