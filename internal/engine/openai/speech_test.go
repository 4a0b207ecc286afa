package openai

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/engine"
)

func speechReq(t *testing.T, p api.SpeechParams) *engine.Request {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return &engine.Request{Kind: api.KindSpeech, Model: "kokoro", Body: b}
}

// toneWAV is a 24 kHz WAV of n samples of a tone.
func toneWAV(t *testing.T, n int) []byte {
	t.Helper()
	samples := make([]float32, n)
	for i := range samples {
		samples[i] = float32(0.5 * math.Sin(2*math.Pi*440*float64(i)/audio.SpeechRate))
	}
	var b bytes.Buffer
	if err := audio.EncodeWAV(&b, audio.PCM{Rate: audio.SpeechRate, Samples: samples}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// silentMP3 is frames of MPEG-1 Layer III, 44.1 kHz mono at 128 kbit/s,
// whose side information is all zero: valid frames that decode to
// silence, 1152 samples each.
func silentMP3(frames int) []byte {
	frame := make([]byte, 417) // 144 * 128000 / 44100, no padding
	copy(frame, []byte{0xFF, 0xFB, 0x90, 0xC0})
	return bytes.Repeat(frame, frames)
}

// s16 is samples as 16-bit little-endian PCM.
func s16(samples ...int16) []byte {
	b := make([]byte, 2*len(samples))
	for i, v := range samples {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	}
	return b
}

func audioHandler(contentType string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Write(body)
	}
}

func TestSpeechRequest(t *testing.T) {
	tests := []struct {
		name   string
		params api.SpeechParams
		want   map[string]any
	}{
		{"plain", api.SpeechParams{Input: "Hello <world>", Voice: "af_heart"},
			map[string]any{"model": "kokoro", "input": "Hello <world>", "voice": "af_heart", "response_format": "wav"}},
		{"speed and instructions", api.SpeechParams{Input: "Hi", Voice: "alloy", Speed: 1.5, Instructions: "Cheerful."},
			map[string]any{"model": "kokoro", "input": "Hi", "voice": "alloy", "response_format": "wav", "speed": 1.5, "instructions": "Cheerful."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wav := toneWAV(t, 2400)
			f := newFake(t, map[string]http.HandlerFunc{speechPath: audioHandler("audio/wav", wav)})
			var s sink
			wantStatus(t, newEngine(t, f.URL).Serve(t.Context(), speechReq(t, tt.params), &s), http.StatusOK)
			r := f.last(t, speechPath)
			if got := decode(t, r.Body); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("sent %v\nwant %v", got, tt.want)
			}
			if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Accept") != "audio/wav" {
				t.Fatalf("headers %v", r.Header)
			}
			if !bytes.Equal(s.body, wav) {
				t.Fatal("a WAV answer was not passed on as it came")
			}
		})
	}
}

func TestSpeechReplies(t *testing.T) {
	tests := []struct {
		name        string
		contentType string
		body        []byte
		rate        int
		samples     int
		first       float32 // the first sample, when it tells
	}{
		{"mp3 instead of wav", "audio/mpeg", silentMP3(20), 44100, 20 * 1152, 0},
		{"pcm", "audio/pcm", s16(16384, -16384, 0, 8192), audio.SpeechRate, 4, 0.5},
		{"L16 with rate and channels", "audio/L16; rate=16000; channels=2", s16(16384, 0, -8192, -8192, 1, 1), 16000, 3, 0.25},
		{"pcm with an odd byte", "audio/pcm", append(s16(16384), 7), audio.SpeechRate, 1, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{speechPath: audioHandler(tt.contentType, tt.body)})
			var s sink
			wantStatus(t, newEngine(t, f.URL).Serve(t.Context(), speechReq(t, api.SpeechParams{Input: "Hi"}), &s), http.StatusOK)
			if audio.Sniff(s.body) != api.AudioWAV {
				t.Fatalf("not WAV: %q", s.body[:min(len(s.body), 16)])
			}
			pcm, err := audio.Decode(bytes.NewReader(s.body))
			if err != nil {
				t.Fatal(err)
			}
			if pcm.Rate != tt.rate || len(pcm.Samples) != tt.samples || math.Abs(float64(pcm.Samples[0]-tt.first)) > 0.001 {
				t.Fatalf("%d Hz, %d samples starting %v", pcm.Rate, len(pcm.Samples), pcm.Samples[0])
			}
		})
	}
}

func TestSpeechErrors(t *testing.T) {
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		status    int
		typ       string
		retryable bool
		msg       string
	}{
		{"empty", audioHandler("audio/wav", nil), 502, api.TypeUpstream, false, "no audio"},
		{"empty pcm", audioHandler("audio/pcm", []byte{1}), 502, api.TypeUpstream, false, "no audio"},
		{"not audio", audioHandler("text/html", []byte("<html>oops</html>")), 502, api.TypeUpstream, true, "text/html"},
		{"damaged mp3", audioHandler("audio/mpeg", append([]byte("ID3\x04\x00\x00\x00\x00\x00\x00"), silentMP3(1)[:40]...)), 502, api.TypeUpstream, true, "decode speech"},
		{"error with status 200", jsonHandler(200, `{"error":"voice not found"}`), 500, api.TypeUpstream, true, "voice not found"},
		{"bad request", jsonHandler(400, `{"error":{"message":"Input text too long","type":"invalid_request_error"}}`), 400, api.TypeInvalidRequest, false, "too long"},
		{"unsupported", jsonHandler(501, `{"detail":"Speech is not supported by this model"}`), 501, api.TypeNotSupported, false, "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{speechPath: tt.handler})
			var s sink
			r := newEngine(t, f.URL).Serve(t.Context(), speechReq(t, api.SpeechParams{Input: "Hi"}), &s)
			wantStatus(t, r, tt.status)
			if r.Error.Type != tt.typ || r.Retryable != tt.retryable || !strings.Contains(r.Error.Message, tt.msg) || s.body != nil {
				t.Fatalf("got %+v retryable=%v", r.Error, r.Retryable)
			}
		})
	}

	t.Run("too large", func(t *testing.T) {
		f := newFake(t, map[string]http.HandlerFunc{speechPath: audioHandler("audio/wav", toneWAV(t, 24000))})
		e := newEngine(t, f.URL)
		e.maxBody = 1000
		r := e.Serve(t.Context(), speechReq(t, api.SpeechParams{Input: "Hi"}), &sink{})
		wantStatus(t, r, http.StatusBadGateway)
		if !strings.Contains(errMsg(r), "too large") {
			t.Fatalf("got %+v", r.Error)
		}
	})

	t.Run("bad parameters", func(t *testing.T) {
		req := speechReq(t, api.SpeechParams{})
		req.Body = []byte(`{"input":7}`)
		wantStatus(t, newEngine(t, "http://127.0.0.1:1").Serve(t.Context(), req, &sink{}), http.StatusBadRequest)
	})

	t.Run("cancelled", func(t *testing.T) {
		release, streaming := make(chan struct{}), make(chan struct{})
		defer close(release)
		f := newFake(t, map[string]http.HandlerFunc{speechPath: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "audio/wav")
			w.WriteHeader(200)
			io.WriteString(w, "RIFF")
			w.(http.Flusher).Flush()
			close(streaming)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}})
		ctx, cancel := context.WithCancel(t.Context())
		var s sink
		go func() { <-streaming; cancel() }()
		wantStatus(t, newEngine(t, f.URL).Serve(ctx, speechReq(t, api.SpeechParams{Input: "Hi"}), &s), 499)
	})
}
