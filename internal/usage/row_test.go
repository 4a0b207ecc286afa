package usage

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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
		{"refused when its wait for a slot ran out", func(o *Outcome) {
			o.Ran, o.Status, o.ErrorMessage = false, 429, "busy"
			o.Timing = &api.Timing{QueueWaitMs: ms(2000.4)}
		}, func(t *testing.T, r api.UsageRow) {
			if r.QueueWaitMs == nil || *r.QueueWaitMs != 2000 || r.TimeToFirstTokenMs != nil || r.WorkerID != "" {
				t.Fatalf("%+v", r)
			}
		}},
		{"estimate of nothing produced is no count", func(o *Outcome) {
			o.Estimated, o.Status, o.ErrorMessage = true, 503, "lost"
			o.Timing = &api.Timing{QueueWaitMs: ms(3.2)}
		}, func(t *testing.T, r api.UsageRow) {
			if r.TotalTokens != 0 || r.TokensEstimated || r.TimeToFirstTokenMs != nil || *r.QueueWaitMs != 3 {
				t.Fatalf("%+v", r)
			}
		}},
		{"a request its worker lost after its first token keeps that token's time", func(o *Outcome) {
			o.Stream, o.Estimated, o.Status, o.ErrorMessage = true, true, 502, "lost"
		}, func(t *testing.T, r api.UsageRow) {
			if r.TimeToFirstTokenMs == nil || *r.TimeToFirstTokenMs != 12 || *r.QueueWaitMs != 1 || !r.TokensEstimated {
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

// A worker's timing becomes whole milliseconds only when it is a duration
// at all: 1e300 once became -9223372036854775808.
func TestRowTimingMs(t *testing.T) {
	start := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		in   float64
		want *int64
	}{
		{"rounded", 12.5, ptr[int64](13)},
		{"zero", 0, ptr[int64](0)},
		{"a week", api.MaxMs, ptr[int64](api.MaxMs)},
		{"past a week", api.MaxMs + 1, nil},
		{"past int64", 1e300, nil},
		{"negative", -50, nil},
		{"just below zero", -0.4, nil},
		{"NaN", math.NaN(), nil},
		{"infinite", math.Inf(1), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.in
			r := Row(Outcome{Started: start, Ended: start, RequestType: api.RequestChat, Status: 200, Ran: true,
				Timing: &api.Timing{TTFTMs: &v, QueueWaitMs: &v, WorkerQueueWaitMs: &v, ModelLoadMs: &v}})
			for _, got := range []*int64{r.TimeToFirstTokenMs, r.QueueWaitMs, r.WorkerQueueWaitMs, r.ModelLoadMs} {
				if (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
					t.Fatalf("%v ms: got %v, want %v", tt.in, got, tt.want)
				}
			}
		})
	}
}

// What the worker reported reaches the kept row within its bounds, when
// the row is cleaned as every store does.
func TestRowCleaned(t *testing.T) {
	start := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	f := func(v float64) *float64 { return &v }
	r := Row(Outcome{Started: start, Ended: start.Add(time.Second), RequestType: api.RequestChat, Status: 200, Ran: true,
		Usage: &api.Usage{PromptTokens: math.MaxInt64, CompletionTokens: math.MaxInt64, TotalTokens: math.MaxInt64,
			ReasoningTokens: ptr(-7), CachedTokens: ptr(-3)},
		Timing:   &api.Timing{TTFTMs: f(-50), TokensPerSecond: f(-3), DraftAcceptanceRate: f(7.5), ModelLoadMs: f(1e300)},
		EnergyWh: f(-5)})
	Clean(&r)
	if r.PromptTokens != api.MaxTokens || r.CompletionTokens != api.MaxTokens || r.TotalTokens != 2*api.MaxTokens ||
		*r.ReasoningTokens != 0 || *r.CachedTokens != 0 || r.EnergyWh != nil || r.TimeToFirstTokenMs != nil ||
		r.TokensPerSecond != nil || r.DraftAcceptanceRate != nil || r.ModelLoadMs != nil {
		t.Fatalf("%+v", r)
	}
}

// A model no worker could list, a client's megabytes, is kept in the row
// cut to what any model id may be, so that the row and its totals can be
// written.
func TestCleanCutsAModelNoWorkerCouldList(t *testing.T) {
	long := strings.Repeat("é", api.MaxModelID) // two bytes each
	row := api.UsageRow{Model: long}
	Clean(&row)
	if len(row.Model) > api.MaxModelID+len("…") || !strings.HasSuffix(row.Model, "…") || !utf8.ValidString(row.Model) {
		t.Fatalf("model of %d bytes kept as %d: %q", len(long), len(row.Model), row.Model)
	}
	short := api.UsageRow{Model: "sim-chat"}
	if Clean(&short); short.Model != "sim-chat" {
		t.Fatalf("a model id changed: %q", short.Model)
	}
}
