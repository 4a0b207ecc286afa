package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/engine/sim"
)

// The simulator's HTTP face answers the way OpenAI's API does; the
// adapter in front of it must give what the simulator gives in-process.

// simConfig is a simulator that does not wait.
func simConfig() sim.Config {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return sim.Config{Now: func() time.Time { return at }, Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
}

// direct runs req on the in-process simulator.
func direct(t *testing.T, req *engine.Request) []byte {
	t.Helper()
	var s sink
	wantStatus(t, sim.New(simConfig()).Serve(t.Context(), req, &s), http.StatusOK)
	return s.body
}

func clipWAV(t *testing.T, seconds float64) []byte {
	t.Helper()
	samples := make([]float32, int(seconds*16000))
	for i := range samples {
		samples[i] = float32(0.2 * math.Sin(float64(i)/7))
	}
	var b bytes.Buffer
	if err := audio.EncodeWAV(&b, audio.PCM{Rate: 16000, Samples: samples}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestSimulatorAudio(t *testing.T) {
	srv := httptest.NewServer(sim.NewHandler(simConfig()))
	t.Cleanup(srv.Close)
	e := newEngine(t, srv.URL)

	t.Run("models", func(t *testing.T) {
		models, err := e.Models(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		caps := map[string][]string{}
		for _, m := range models {
			caps[m.ID] = m.Capabilities
		}
		if !reflect.DeepEqual(caps["sim-stt"], []string{api.CapTranscription}) || !reflect.DeepEqual(caps["sim-tts"], []string{api.CapSpeech}) {
			t.Fatalf("capabilities %v", caps)
		}
	})

	t.Run("transcription", func(t *testing.T) {
		file := clipWAV(t, 21)
		for _, words := range []bool{false, true} {
			p := api.TranscriptionParams{Words: words, BeamSize: 5, Seconds: 21, Bytes: int64(len(file))}
			req := func() *engine.Request {
				r := transcriptionReq(t, p, bytes.NewReader(file))
				r.Model = "sim-stt"
				return r
			}
			var s sink
			wantStatus(t, e.Serve(t.Context(), req(), &s), http.StatusOK)
			var got, want api.Transcript
			if err := json.Unmarshal(s.body, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(direct(t, req()), &want); err != nil {
				t.Fatal(err)
			}
			// verbose_json names the language ("english"); the adapter
			// makes it a code again.
			if !reflect.DeepEqual(got, want) || got.Language != "en" || (got.Words != nil) != words {
				t.Fatalf("over HTTP %+v\nin-process %+v", got, want)
			}
		}
	})

	t.Run("speech", func(t *testing.T) {
		req := speechReq(t, api.SpeechParams{Input: "Testing, one, two.", Voice: "coral", Speed: 1.25})
		req.Model = "sim-tts"
		var s sink
		wantStatus(t, e.Serve(t.Context(), req, &s), http.StatusOK)
		if !bytes.Equal(s.body, direct(t, req)) {
			t.Fatal("the speech differs over HTTP")
		}
	})

	t.Run("failures", func(t *testing.T) {
		tests := []struct {
			name      string
			req       *engine.Request
			status    int
			retryable bool
			msg       string
		}{
			{"transcription directive", func() *engine.Request {
				r := transcriptionReq(t, api.TranscriptionParams{Prompt: "sim: fail=503"}, bytes.NewReader(clipWAV(t, 1)))
				r.Model = "sim-stt"
				return r
			}(), 503, true, "sim fail=503"},
			{"not audio", func() *engine.Request {
				r := transcriptionReq(t, api.TranscriptionParams{}, strings.NewReader(strings.Repeat("x", 1000)))
				r.Model = "sim-stt"
				return r
			}(), 400, false, "Unsupported audio format"},
			{"unknown voice", func() *engine.Request {
				r := speechReq(t, api.SpeechParams{Input: "Hi", Voice: "bob"})
				r.Model = "sim-tts"
				return r
			}(), 400, false, "alloy"},
			{"speech directive", func() *engine.Request {
				r := speechReq(t, api.SpeechParams{Input: "Hi\nsim: fail=507"})
				r.Model = "sim-tts"
				return r
			}(), 507, false, "out of memory"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := e.Serve(t.Context(), tt.req, &sink{})
				wantStatus(t, r, tt.status)
				if r.Retryable != tt.retryable || !strings.Contains(errMsg(r), tt.msg) {
					t.Fatalf("got %+v retryable=%v", r.Error, r.Retryable)
				}
			})
		}
	})
}
