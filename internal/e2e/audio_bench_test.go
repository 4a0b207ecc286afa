package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/engine/espeak"
	"github.com/svc-dev/svc/internal/engine/moonshine"
)

// BenchmarkAudio measures, in one run, speech and transcription on the
// real CPU engines called directly (the engine adapters in this process)
// and through the gateway and a worker running the same engines: the
// difference is what svc adds to an audio request.
//
//	SVC_MOONSHINE_DIR=DIR go test -run XXX -bench Audio -benchtime 20x ./internal/e2e/
func BenchmarkAudio(b *testing.B) {
	dir := realEngines(b)
	s := startServer(b, "")
	key := s.adminKey()
	startWorker(b, s.URL, s.tokenFile(), "voice", "--engine", "espeak-ng")
	startWorker(b, s.URL, s.tokenFile(), "ears", "--engine", "moonshine="+dir)
	const text = "The quick brown fox jumps over the lazy dog. Please call Stella and ask her to bring these things with her from the store."
	speechBody, _ := json.Marshal(map[string]any{"model": "espeak-ng", "voice": "en-us", "input": text})
	speakReq, _ := json.Marshal(api.SpeechParams{Input: text, Voice: "en-us"})

	// The audio both transcription paths are given: the gateway's speech.
	r := s.do("POST", "/v1/audio/speech", string(speechBody), bearer(key))
	if r.Status != 200 {
		b.Fatalf("speech: %d %s", r.Status, r.Body)
	}
	wav := r.Body
	ct, form := upload(b, wav, "model", "moonshine-base", "language", "en")
	params, _ := json.Marshal(api.TranscriptionParams{Language: "en", Format: api.AudioWAV, Bytes: int64(len(wav))})

	voice := espeak.New(espeak.Config{})
	ears, err := moonshine.New(moonshine.Config{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer ears.Close(context.Background())
	direct := func(e engine.Engine, req *engine.Request) {
		var sink discardSink
		if res := e.Serve(context.Background(), req, &sink); res.Status != 200 {
			b.Fatalf("direct: %d %+v", res.Status, res.Error)
		}
	}
	// The first transcription loads the model: not part of any figure.
	direct(ears, &engine.Request{Kind: api.KindTranscription, Model: "moonshine-base", Body: params, Audio: bytes.NewReader(wav)})

	through := func(path, ctype string, body []byte) {
		req, _ := http.NewRequest("POST", s.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("through svc: %d", resp.StatusCode)
		}
	}
	cases := []struct {
		name string
		run  func()
	}{
		{"speech/direct", func() {
			direct(voice, &engine.Request{Kind: api.KindSpeech, Model: "espeak-ng", Body: speakReq})
		}},
		{"speech/gateway", func() { through("/v1/audio/speech", "application/json", speechBody) }},
		{"transcribe/direct", func() {
			direct(ears, &engine.Request{Kind: api.KindTranscription, Model: "moonshine-base", Body: params, Audio: bytes.NewReader(wav)})
		}},
		{"transcribe/gateway", func() { through("/v1/audio/transcriptions", ct, form) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				c.run()
				lat = append(lat, time.Since(start))
			}
			reportPercentiles(b, lat, "")
		})
	}
}

type discardSink struct{}

func (discardSink) Event(context.Context, []byte) error { return nil }
func (discardSink) Body(context.Context, []byte) error  { return nil }
