package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/engine"
)

// wavClip is seconds of a tone at pitch Hz as a 16 kHz WAV file: distinct
// pitches are distinct files, and so distinct transcripts.
func wavClip(t testing.TB, seconds, pitch float64) []byte {
	t.Helper()
	const rate = 16000
	samples := make([]float32, int(seconds*rate))
	for i := range samples {
		samples[i] = float32(0.3 * math.Sin(2*math.Pi*pitch*float64(i)/rate))
	}
	var b bytes.Buffer
	if err := audio.EncodeWAV(&b, audio.PCM{Rate: rate, Samples: samples}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func transcriptionBody(t testing.TB, p api.TranscriptionParams) []byte {
	t.Helper()
	if p.Format == "" {
		p.Format = api.AudioWAV
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// transcribeFile runs one in-process transcription of file.
func transcribeFile(t testing.TB, e *Engine, model string, p api.TranscriptionParams, file []byte) (*api.Result, *recSink) {
	t.Helper()
	sink := &recSink{}
	req := &engine.Request{Kind: api.KindTranscription, Model: model, Body: transcriptionBody(t, p), Audio: bytes.NewReader(file)}
	res := e.Serve(t.Context(), req, sink)
	if res == nil {
		t.Fatal("Serve returned nil")
	}
	return res, sink
}

func decodeTranscript(t testing.TB, data []byte) api.Transcript {
	t.Helper()
	var tr api.Transcript
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatalf("decode transcript %s: %v", data, err)
	}
	return tr
}

// checkTranscript checks the shape every transcript must have.
func checkTranscript(t *testing.T, tr api.Transcript, seconds float64, words bool) {
	t.Helper()
	if math.Abs(tr.Duration-seconds) > 0.01 {
		t.Fatalf("duration %v, want %v", tr.Duration, seconds)
	}
	if len(tr.Segments) == 0 || tr.Text == "" {
		t.Fatalf("empty transcript of %vs: %+v", seconds, tr)
	}
	var joined strings.Builder
	at := 0.0
	for i, s := range tr.Segments {
		if s.ID != i || s.Start != at || s.End <= s.Start || !strings.HasPrefix(s.Text, " ") {
			t.Fatalf("segment %d %+v does not follow on from %v", i, s, at)
		}
		last := i == len(tr.Segments)-1
		if d := s.End - s.Start; d > maxSegment+0.01 || (d < minSegment-1 && !last) {
			t.Fatalf("segment %d lasts %.2fs", i, d)
		}
		if s.AvgLogprob < -0.4 || s.AvgLogprob > -0.2 || s.NoSpeechProb <= 0 || s.NoSpeechProb > 0.05 {
			t.Fatalf("segment %d scores %+v", i, s)
		}
		joined.WriteString(s.Text)
		at = s.End
	}
	if at != tr.Duration {
		t.Fatalf("segments end at %v of %v", at, tr.Duration)
	}
	if strings.TrimSpace(joined.String()) != tr.Text {
		t.Fatalf("text %q is not its segments %q", tr.Text, joined.String())
	}
	if !words {
		if tr.Words != nil {
			t.Fatal("words without asking")
		}
		return
	}
	if got, want := len(tr.Words), len(strings.Fields(tr.Text)); got != want {
		t.Fatalf("%d words for a text of %d", got, want)
	}
	prev := 0.0
	for i, w := range tr.Words {
		if w.Start < prev || w.End <= w.Start || w.End > tr.Duration || strings.ContainsAny(w.Word, " .,") || w.Word == "" {
			t.Fatalf("word %d %+v after %v", i, w, prev)
		}
		prev = w.End
	}
}

func TestTranscription(t *testing.T) {
	e := New(fixedConfig())
	tests := []struct {
		name    string
		seconds float64
		params  api.TranscriptionParams
		lang    string
	}{
		{"short", 1.2, api.TranscriptionParams{}, "en"},
		{"a minute", 60, api.TranscriptionParams{}, "en"},
		{"words", 17.5, api.TranscriptionParams{Words: true}, "en"},
		{"language kept", 9, api.TranscriptionParams{Language: "de", Temperature: 0.4}, "de"},
		{"beam search and a prompt", 12, api.TranscriptionParams{BeamSize: 5, Prompt: "Names: Ada, Grace."}, "en"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := wavClip(t, tt.seconds, 220)
			p := tt.params
			p.Seconds, p.Bytes = tt.seconds, int64(len(file))
			res, s := transcribeFile(t, e, "sim-stt", p, file)
			if res.Status != http.StatusOK || s.bodies != 1 || len(s.events) != 0 {
				t.Fatalf("got %d %+v with %d bodies", res.Status, res.Error, s.bodies)
			}
			tr := decodeTranscript(t, s.body)
			if tr.Language != tt.lang {
				t.Fatalf("language %q, want %q", tr.Language, tt.lang)
			}
			checkTranscript(t, tr, tt.seconds, p.Words)
			if n := len(strings.Fields(tr.Text)); float64(n) < 2*tt.seconds || float64(n) > 3*tt.seconds+1 {
				t.Fatalf("%d words in %vs", n, tt.seconds)
			}
		})
	}
}

func TestTranscriptionDeterminism(t *testing.T) {
	text := func(e *Engine, file []byte, words bool) api.Transcript {
		res, s := transcribeFile(t, e, "sim-stt", api.TranscriptionParams{Words: words}, file)
		if res.Status != http.StatusOK {
			t.Fatalf("got %d %+v", res.Status, res.Error)
		}
		return decodeTranscript(t, s.body)
	}
	a, b := wavClip(t, 8, 220), wavClip(t, 8, 330)
	ta, again := text(New(fixedConfig()), a, false), text(New(fixedConfig()), a, true)
	if ta.Text != again.Text || len(ta.Segments) != len(again.Segments) {
		t.Fatalf("the same file read differently:\n%q\n%q", ta.Text, again.Text)
	}
	if tb := text(New(fixedConfig()), b, false); tb.Text == ta.Text {
		t.Fatal("different files read the same")
	}
}

func TestTranscriptionFailures(t *testing.T) {
	e := New(fixedConfig())
	wav := wavClip(t, 2, 220)
	tests := []struct {
		name      string
		model     string
		body      []byte
		file      io.Reader
		status    int
		typ       string
		retryable bool
		msg       string
	}{
		{name: "bad params", model: "sim-stt", body: []byte(`{"seconds":"x"}`), file: bytes.NewReader(wav), status: 400, typ: api.TypeInvalidRequest},
		{name: "unknown model", model: "whisper-9", file: bytes.NewReader(wav), status: 404, typ: api.TypeNotFound},
		{name: "chat model", model: "sim-chat", file: bytes.NewReader(wav), status: 400, typ: api.TypeInvalidRequest, msg: "/v1/chat/completions"},
		{name: "no audio", model: "sim-stt", status: 400, typ: api.TypeInvalidRequest},
		{name: "not audio", model: "sim-stt", file: strings.NewReader(strings.Repeat("not audio ", 100)), status: 400, typ: api.TypeInvalidRequest, msg: "Unsupported audio format"},
		{name: "format mismatch", model: "sim-stt", body: transcriptionBody(t, api.TranscriptionParams{Format: api.AudioMP3}), file: bytes.NewReader(wav), status: 400, typ: api.TypeInvalidRequest, msg: "not mp3"},
		{name: "broken upload", model: "sim-stt", file: io.MultiReader(bytes.NewReader(wav[:100]), iotestErr{}), status: 502, typ: api.TypeUpstream, msg: "read the uploaded audio"},
		{name: "bad directive", model: "sim-stt", body: transcriptionBody(t, api.TranscriptionParams{Prompt: "sim: fail=ok"}), file: bytes.NewReader(wav), status: 400, typ: api.TypeInvalidRequest},
		{name: "fail directive", model: "sim-stt", body: transcriptionBody(t, api.TranscriptionParams{Prompt: "Names.\nsim: fail=503"}), file: bytes.NewReader(wav), status: 503, typ: api.TypeServiceUnavailable, retryable: true},
		{name: "out of memory", model: "sim-stt", body: transcriptionBody(t, api.TranscriptionParams{Prompt: "sim: fail=507"}), file: bytes.NewReader(wav), status: 507, typ: api.TypeInsufficientMemory},
		{name: "cut", model: "sim-stt", body: transcriptionBody(t, api.TranscriptionParams{Prompt: "sim: fail=cut"}), file: bytes.NewReader(wav), status: 502, typ: api.TypeUpstream, msg: "cut off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.body
			if body == nil {
				body = transcriptionBody(t, api.TranscriptionParams{})
			}
			sink := &recSink{}
			res := e.Serve(t.Context(), &engine.Request{Kind: api.KindTranscription, Model: tt.model, Body: body, Audio: tt.file}, sink)
			if res.Status != tt.status || res.Error == nil || res.Error.Type != tt.typ || res.Retryable != tt.retryable ||
				!strings.Contains(res.Error.Message, tt.msg) || sink.bodies != 0 {
				t.Fatalf("got %d %+v retryable=%v, %d bodies", res.Status, res.Error, res.Retryable, sink.bodies)
			}
		})
	}
}

// iotestErr is a reader that fails, as a broken upload does.
type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("link reset") }

// countingReader counts what was read from r.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestTranscriptionReadsTheWholeUpload(t *testing.T) {
	file := wavClip(t, 30, 220)
	src := &countingReader{r: bytes.NewReader(file)}
	res := New(fixedConfig()).Serve(t.Context(), &engine.Request{
		Kind: api.KindTranscription, Model: "sim-stt", Body: transcriptionBody(t, api.TranscriptionParams{}), Audio: src,
	}, &recSink{})
	if res.Status != http.StatusOK || src.n != int64(len(file)) {
		t.Fatalf("got %d after reading %d of %d bytes", res.Status, src.n, len(file))
	}
}

func TestAudioPacing(t *testing.T) {
	speech := func(input string) []byte {
		b, _ := json.Marshal(api.SpeechParams{Input: input})
		return b
	}
	tests := []struct {
		name    string
		options string
		kind    string
		body    []byte
		want    func(out []byte) time.Duration
	}{
		{"transcription at the default factor", "", api.KindTranscription, transcriptionBody(t, api.TranscriptionParams{}),
			func([]byte) time.Duration { return 1200 * time.Millisecond }},
		{"transcription at rtf=0.05", "rtf=0.05", api.KindTranscription, transcriptionBody(t, api.TranscriptionParams{}),
			func([]byte) time.Duration { return 3 * time.Second }},
		{"transcription directive", "", api.KindTranscription, transcriptionBody(t, api.TranscriptionParams{Prompt: "sim: rtf=0.5"}),
			func([]byte) time.Duration { return 30 * time.Second }},
		{"latency adds", "latency=100ms,rtf=0", api.KindTranscription, transcriptionBody(t, api.TranscriptionParams{}),
			func([]byte) time.Duration { return 100 * time.Millisecond }},
		{"speech", "rtf=0.1", api.KindSpeech, speech("Pacing follows the audio."),
			func(out []byte) time.Duration { return time.Duration(0.1 * wavSeconds(t, out) * float64(time.Second)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseOptions(tt.options)
			if err != nil {
				t.Fatal(err)
			}
			clk := newFakeClock()
			cfg.Now, cfg.Sleep = clk.Now, clk.Sleep
			req := &engine.Request{Kind: tt.kind, Model: "sim-tts", Body: tt.body}
			if tt.kind == api.KindTranscription {
				req.Model, req.Audio = "sim-stt", bytes.NewReader(wavClip(t, 60, 220))
			}
			start, sink := clk.Now(), &recSink{}
			if res := New(cfg).Serve(t.Context(), req, sink); res.Status != http.StatusOK {
				t.Fatalf("got %d %+v", res.Status, res.Error)
			}
			got, want := clk.Now().Sub(start), tt.want(sink.body)
			if d := got - want; d < -time.Millisecond || d > time.Millisecond {
				t.Fatalf("took %v, want %v", got, want)
			}
		})
	}
}

func TestAudioHangAndCancel(t *testing.T) {
	wav := wavClip(t, 60, 220)
	tests := []struct {
		name string
		cfg  Config
		req  func() *engine.Request
	}{
		{"transcription hang", fixedConfig(), func() *engine.Request {
			return &engine.Request{Kind: api.KindTranscription, Model: "sim-stt", Audio: bytes.NewReader(wav),
				Body: transcriptionBody(t, api.TranscriptionParams{Prompt: "sim: hang=1"})}
		}},
		{"speech hang", fixedConfig(), func() *engine.Request {
			return &engine.Request{Kind: api.KindSpeech, Model: "sim-tts", Body: []byte(`{"input":"wait\nsim: hang=1"}`)}
		}},
		// The real clock, so slow that only cancellation ends the work in
		// time.
		{"transcription at work", Config{AudioRTF: 100}, func() *engine.Request {
			return &engine.Request{Kind: api.KindTranscription, Model: "sim-stt", Audio: bytes.NewReader(wav),
				Body: transcriptionBody(t, api.TranscriptionParams{})}
		}},
		{"speech at work", Config{AudioRTF: 100}, func() *engine.Request {
			return &engine.Request{Kind: api.KindSpeech, Model: "sim-tts", Body: []byte(`{"input":"A long wait."}`)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			sink := &recSink{}
			done := make(chan *api.Result, 1)
			go func() { done <- New(tt.cfg).Serve(ctx, tt.req(), sink) }()
			select {
			case res := <-done:
				t.Fatalf("returned %d before the request was cancelled", res.Status)
			case <-time.After(20 * time.Millisecond):
			}
			cancel()
			select {
			case res := <-done:
				if res.Status != 499 || sink.bodies != 0 {
					t.Fatalf("got %d with %d bodies", res.Status, sink.bodies)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the request did not end on cancel")
			}
		})
	}

	// A cancelled upload is a cancelled request, not a broken one.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res := New(fixedConfig()).Serve(ctx, &engine.Request{Kind: api.KindTranscription, Model: "sim-stt",
		Body: transcriptionBody(t, api.TranscriptionParams{}), Audio: io.MultiReader(bytes.NewReader(wav[:64]), iotestErr{})}, &recSink{})
	if res.Status != 499 {
		t.Fatalf("cancelled upload: %d %+v", res.Status, res.Error)
	}
}

// speak runs one in-process speech request.
func speak(t testing.TB, e *Engine, p api.SpeechParams) (*api.Result, []byte) {
	t.Helper()
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	sink := &recSink{}
	res := e.Serve(t.Context(), &engine.Request{Kind: api.KindSpeech, Model: "sim-tts", Body: body}, sink)
	if res.Status == http.StatusOK && sink.bodies != 1 {
		t.Fatalf("%d bodies", sink.bodies)
	}
	return res, sink.body
}

// wavSeconds checks that wav is the simulator's layout, 24 kHz mono, and
// returns its length.
func wavSeconds(t testing.TB, wav []byte) float64 {
	t.Helper()
	info, err := audio.Probe(bytes.NewReader(wav))
	if err != nil || info.Format != api.AudioWAV || info.SampleRate != audio.SpeechRate || info.Channels != 1 {
		t.Fatalf("not 24 kHz mono WAV: %+v %v", info, err)
	}
	return info.Seconds
}

// frameLevels are the RMS levels of wav's 10 ms frames.
func frameLevels(t testing.TB, wav []byte) []float64 {
	t.Helper()
	pcm, err := audio.Decode(bytes.NewReader(wav))
	if err != nil {
		t.Fatal(err)
	}
	n := pcm.Rate / 100
	var out []float64
	for i := 0; i+n <= len(pcm.Samples); i += n {
		sum := 0.0
		for _, v := range pcm.Samples[i : i+n] {
			sum += float64(v) * float64(v)
		}
		out = append(out, math.Sqrt(sum/float64(n)))
	}
	return out
}

func TestSpeech(t *testing.T) {
	e := New(fixedConfig())
	const text = "The quick brown fox jumps over the lazy dog. Then it rests, and sleeps!"
	tests := []struct {
		name  string
		p     api.SpeechParams
		speed float64
	}{
		{"default voice", api.SpeechParams{Input: text}, 1},
		{"another voice", api.SpeechParams{Input: text, Voice: "onyx"}, 1},
		{"fast", api.SpeechParams{Input: text, Voice: "nova", Speed: 2}, 2},
		{"slowest", api.SpeechParams{Input: text, Speed: 0.25}, 0.25},
		{"instructions are accepted", api.SpeechParams{Input: text, Voice: "sage", Instructions: "Speak calmly."}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, wav := speak(t, e, tt.p)
			if res.Status != http.StatusOK {
				t.Fatalf("got %d %+v", res.Status, res.Error)
			}
			// About 65 ms a character at speed 1, pauses included.
			perChar := wavSeconds(t, wav) * tt.speed / float64(len(text))
			if perChar < 0.055 || perChar > 0.08 {
				t.Fatalf("%.1f ms a character", perChar*1000)
			}
			// Speech, not silence and not a drone: loud frames, and quiet
			// ones between words.
			levels := frameLevels(t, wav)
			quiet, loud := 0, 0
			for _, l := range levels {
				switch {
				case l < 0.005:
					quiet++
				case l > 0.05:
					loud++
				}
			}
			if q, l := float64(quiet)/float64(len(levels)), float64(loud)/float64(len(levels)); q < 0.1 || q > 0.6 || l < 0.3 {
				t.Fatalf("%.0f%% quiet and %.0f%% loud frames", 100*q, 100*l)
			}
		})
	}
}

func TestSpeechVoicesAndDeterminism(t *testing.T) {
	say := func(p api.SpeechParams) []byte {
		res, wav := speak(t, New(fixedConfig()), p)
		if res.Status != http.StatusOK {
			t.Fatalf("got %d %+v", res.Status, res.Error)
		}
		return wav
	}
	const text = "Hello there."
	alloy := say(api.SpeechParams{Input: text, Voice: "alloy"})
	if !bytes.Equal(alloy, say(api.SpeechParams{Input: text})) {
		t.Fatal("alloy is not the default voice, or the same request sounded different")
	}
	if !bytes.Equal(alloy, say(api.SpeechParams{Input: text + "\nsim: rtf=0"})) {
		t.Fatal("a directive line was said aloud")
	}
	if bytes.Equal(alloy, say(api.SpeechParams{Input: "Hello there!"})) {
		t.Fatal("different text, same audio")
	}
	// Each voice has a pitch of its own.
	pitches := map[float64]string{}
	for _, v := range speechVoices() {
		p := voicePitch(v)
		for q, other := range pitches {
			if math.Abs(p-q) < 2 {
				t.Fatalf("%s and %s both speak at about %.0f Hz", v, other, p)
			}
		}
		if p < 90 || p > 240 {
			t.Fatalf("%s speaks at %.0f Hz", v, p)
		}
		pitches[p] = v
		if v != "alloy" && bytes.Equal(alloy, say(api.SpeechParams{Input: text, Voice: v})) {
			t.Fatalf("%s sounds like alloy", v)
		}
	}
}

func TestSpeechFailures(t *testing.T) {
	e := New(fixedConfig())
	tests := []struct {
		name      string
		model     string
		body      string
		status    int
		typ       string
		retryable bool
		msg       string
	}{
		{"unknown voice", "sim-tts", `{"input":"hi","voice":"bob"}`, 400, api.TypeInvalidRequest, false, "alloy, ash, coral"},
		{"too fast", "sim-tts", `{"input":"hi","speed":4.5}`, 400, api.TypeInvalidRequest, false, "speed"},
		{"too slow", "sim-tts", `{"input":"hi","speed":0.2}`, 400, api.TypeInvalidRequest, false, "speed"},
		{"empty input", "sim-tts", `{"input":"  "}`, 400, api.TypeInvalidRequest, false, "input"},
		{"input too long", "sim-tts", `{"input":"` + strings.Repeat("a", 4097) + `"}`, 400, api.TypeInvalidRequest, false, "4096"},
		{"bad body", "sim-tts", `{"input":1}`, 400, api.TypeInvalidRequest, false, ""},
		{"transcription model", "sim-stt", `{"input":"hi"}`, 400, api.TypeInvalidRequest, false, "/v1/audio/transcriptions"},
		{"speech model for chat", "sim-chat", `{"input":"hi"}`, 400, api.TypeInvalidRequest, false, "/v1/chat/completions"},
		{"unknown model", "tts-9", `{"input":"hi"}`, 404, api.TypeNotFound, false, ""},
		{"fail directive", "sim-tts", `{"input":"hi\nsim: fail=500"}`, 500, api.TypeServer, true, ""},
		{"bad directive", "sim-tts", `{"input":"hi\nsim: rtf=fast"}`, 400, api.TypeInvalidRequest, false, "rtf"},
		{"cut", "sim-tts", `{"input":"hi\nsim: fail=cut"}`, 502, api.TypeUpstream, false, "cut off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &recSink{}
			res := e.Serve(t.Context(), &engine.Request{Kind: api.KindSpeech, Model: tt.model, Body: []byte(tt.body)}, sink)
			if res.Status != tt.status || res.Error == nil || res.Error.Type != tt.typ || res.Retryable != tt.retryable ||
				!strings.Contains(res.Error.Message, tt.msg) || sink.bodies != 0 {
				t.Fatalf("got %d %+v retryable=%v, %d bodies", res.Status, res.Error, res.Retryable, sink.bodies)
			}
		})
	}
}

func TestWorkTime(t *testing.T) {
	for _, tt := range []struct {
		seconds, rtf float64
		want         time.Duration
	}{
		{60, 0.02, 1200 * time.Millisecond},
		{60, 0, 0},
		{0, 1, 0},
		{math.NaN(), 1, 0},
		{1e12, 1e12, 24 * time.Hour},
	} {
		if got := workTime(tt.seconds, tt.rtf); got != tt.want {
			t.Errorf("workTime(%v, %v) = %v, want %v", tt.seconds, tt.rtf, got, tt.want)
		}
	}
}
