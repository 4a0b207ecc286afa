package usage

import (
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestRow(t *testing.T) {
	start := time.Date(2026, 11, 28, 9, 0, 0, 0, time.FixedZone("CET", 3600))
	ms := func(v float64) *float64 { return &v }
	ran := Outcome{RequestID: "r", Started: start, Ended: start.Add(1500 * time.Millisecond), Model: "m",
		RequestType: api.RequestChat, Status: 200, Ran: true, WorkerID: "wk", WorkerName: "gpu-1", Attempts: 1,
		Usage:  &api.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15},
		Timing: &api.Timing{TTFTMs: ms(12.4), QueueWaitMs: ms(0.6)}}
	tests := []struct {
		name  string
		edit  func(*Outcome)
		check func(*testing.T, api.UsageRow)
	}{
		{"served", func(*Outcome) {}, func(t *testing.T, r api.UsageRow) {
			if r.CreatedAt.Location() != time.UTC || r.RequestDurationMs != 1500 || r.ErrorMessage != nil ||
				r.TotalTokens != 15 || r.TokensEstimated || *r.TimeToFirstTokenMs != 12 || *r.QueueWaitMs != 1 || r.WorkerName != "gpu-1" {
				t.Fatalf("%+v", r)
			}
		}},
		{"refused before a worker", func(o *Outcome) {
			o.Ran, o.Status, o.ErrorMessage = false, 400, "too long"
		}, func(t *testing.T, r api.UsageRow) {
			if r.WorkerID != "" || r.TotalTokens != 0 || r.TimeToFirstTokenMs != nil || *r.ErrorMessage != "too long" {
				t.Fatalf("%+v", r)
			}
		}},
		{"estimate of nothing produced is no count", func(o *Outcome) {
			o.Estimated, o.Status, o.ErrorMessage = true, 503, "lost"
		}, func(t *testing.T, r api.UsageRow) {
			if r.TotalTokens != 0 || r.TokensEstimated || r.TimeToFirstTokenMs != nil {
				t.Fatalf("%+v", r)
			}
		}},
		{"a stream its worker failed before any output is billed the prompt's estimate", func(o *Outcome) {
			o.Stream, o.Estimated, o.Status, o.ErrorMessage = true, true, 503, "lost"
			o.Usage = &api.Usage{PromptTokens: 10, TotalTokens: 10}
		}, func(t *testing.T, r api.UsageRow) {
			if r.PromptTokens != 10 || r.TotalTokens != 10 || !r.TokensEstimated {
				t.Fatalf("%+v", r)
			}
		}},
		{"a stream the gateway refused is not", func(o *Outcome) {
			o.Ran, o.Stream, o.Estimated, o.Status, o.ErrorMessage = false, true, true, 503, "no worker"
		}, func(t *testing.T, r api.UsageRow) {
			if r.TotalTokens != 0 || r.TokensEstimated {
				t.Fatalf("%+v", r)
			}
		}},
		{"speech counts the audio made, on success", func(o *Outcome) {
			o.RequestType, o.SpeechSeconds = api.RequestSpeech, 2.5
		}, func(t *testing.T, r api.UsageRow) {
			if r.TotalTokens != 0 || r.SpeechSeconds == nil || *r.SpeechSeconds != 2.5 || r.AudioSeconds != nil {
				t.Fatalf("%+v", r)
			}
		}},
		{"failed speech made none", func(o *Outcome) {
			o.RequestType, o.SpeechSeconds, o.Status = api.RequestSpeech, 2.5, 502
		}, func(t *testing.T, r api.UsageRow) {
			if r.SpeechSeconds != nil {
				t.Fatalf("%+v", r)
			}
		}},
		{"a client that left is billed the estimate", func(o *Outcome) {
			o.Estimated, o.Status, o.ErrorMessage = true, 499, "Client disconnected"
		}, func(t *testing.T, r api.UsageRow) {
			if r.TotalTokens != 15 || !r.TokensEstimated || r.TimeToFirstTokenMs == nil {
				t.Fatalf("%+v", r)
			}
		}},
		{"audio has no tokens; its length only on success", func(o *Outcome) {
			o.RequestType, o.AudioSeconds, o.AudioFormat = api.RequestAudio, 3.5, "audio/wav"
		}, func(t *testing.T, r api.UsageRow) {
			if r.TotalTokens != 0 || *r.AudioSeconds != 3.5 || *r.AudioFormat != "audio/wav" {
				t.Fatalf("%+v", r)
			}
		}},
		{"failed audio has no length", func(o *Outcome) {
			o.RequestType, o.AudioSeconds, o.AudioFormat, o.Status = api.RequestAudio, 3.5, "audio/wav", 502
		}, func(t *testing.T, r api.UsageRow) {
			if r.AudioSeconds != nil || r.AudioFormat != nil {
				t.Fatalf("%+v", r)
			}
		}},
		{"moderation and notice", func(o *Outcome) {
			o.RequestType, o.ModerationOutcome, o.ModerationCategories = api.RequestModeration, api.ModerationFlagged, []string{"violence"}
			o.Notice = &api.Notice{Code: "truncated"}
		}, func(t *testing.T, r api.UsageRow) {
			if *r.ModerationOutcome != api.ModerationFlagged || r.ModerationCategories[0] != "violence" || *r.Notice != "truncated" {
				t.Fatalf("%+v", r)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ran
			tt.edit(&o)
			tt.check(t, Row(o))
		})
	}
}
