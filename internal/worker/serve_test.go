package worker

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/link"
)

// wavEngine answers speech with a fixed body.
type wavEngine struct {
	stubEngine
	body []byte
	res  *api.Result
}

func (e *wavEngine) Serve(ctx context.Context, _ *engine.Request, sink engine.Sink) *api.Result {
	if e.res != nil {
		return e.res
	}
	if err := sink.Body(ctx, e.body); err != nil {
		return engine.Cancelled()
	}
	return engine.OK()
}

type bodySink struct{ got []byte }

func (s *bodySink) Event(_ context.Context, b []byte) error { s.got = append(s.got, b...); return nil }
func (s *bodySink) Body(_ context.Context, b []byte) error  { s.got = append(s.got, b...); return nil }

// Whatever layout an engine speaks in, the reply is 24 kHz 16-bit mono.
func TestSpeakNormalisesTheAudio(t *testing.T) {
	pcm := audio.PCM{Rate: 22050, Samples: make([]float32, 22050)}
	for i := range pcm.Samples {
		pcm.Samples[i] = float32(i%50) / 100
	}
	var in bytes.Buffer
	if err := audio.EncodeWAV(&in, pcm); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		eng    *wavEngine
		status int
	}{
		{"22.05 kHz is resampled", &wavEngine{body: in.Bytes()}, http.StatusOK},
		{"not audio is the engine's fault", &wavEngine{body: []byte("<html>oops</html>")}, http.StatusBadGateway},
		{"a failure passes through", &wavEngine{res: engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "no")}, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a Agent
			var out bodySink
			res := a.speak(context.Background(), tt.eng, &engine.Request{Kind: api.KindSpeech}, &out)
			if res.Status != tt.status {
				t.Fatalf("status %d: %+v", res.Status, res.Error)
			}
			if tt.status != http.StatusOK {
				if len(out.got) != 0 {
					t.Fatal("a failure sent audio")
				}
				return
			}
			info, err := audio.Probe(bytes.NewReader(out.got))
			if err != nil || info.SampleRate != audio.SpeechRate || info.Channels != 1 || info.Seconds < 0.99 || info.Seconds > 1.01 {
				t.Fatalf("%+v %v", info, err)
			}
		})
	}
}

// An engine's error body of any size still fits the result's one frame,
// cut on a character's boundary; a short one is kept whole.
func TestBoundResult(t *testing.T) {
	long := engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, strings.Repeat("é", 50_000))
	got := boundResult(long)
	if b := got.AppendJSON(nil); len(b) > link.MaxChunk || !utf8.ValidString(got.Error.Message) ||
		!strings.HasSuffix(got.Error.Message, " …") || got.Status != http.StatusBadRequest {
		t.Fatalf("bounded result of %d bytes: status %d, valid %v", len(b), got.Status, utf8.ValidString(got.Error.Message))
	}
	if len(long.Error.Message) != 100_000 {
		t.Fatal("the result given was changed")
	}
	short := engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "too long")
	if boundResult(short) != short {
		t.Fatal("a short message was rewritten")
	}
}
