package openai

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestTranscriptionForm(t *testing.T) {
	file := []byte("RIFF\x24\x00\x00\x00WAVEfmt some audio bytes")
	tests := []struct {
		name     string
		params   api.TranscriptionParams
		fields   map[string][]string
		fileName string
		fileType string
	}{
		{
			name:   "everything",
			params: api.TranscriptionParams{Language: "de", Prompt: "Namen: Jürgen.", BeamSize: 5, Words: true, Format: api.AudioWAV},
			fields: map[string][]string{
				"model": {"whisper-large-v3"}, "language": {"de"}, "prompt": {"Namen: Jürgen."}, "temperature": {"0"},
				"beam_size": {"5"}, "response_format": {"verbose_json"}, "timestamp_granularities[]": {"segment", "word"},
			},
			fileName: "audio.wav", fileType: "audio/wav",
		},
		{
			name:   "sampling, no beam search, no words",
			params: api.TranscriptionParams{Temperature: 0.4, Format: api.AudioMP3},
			fields: map[string][]string{
				"model": {"whisper-large-v3"}, "temperature": {"0.4"}, "response_format": {"verbose_json"},
				"timestamp_granularities[]": {"segment"},
			},
			fileName: "audio.mp3", fileType: "audio/mpeg",
		},
		{
			name:     "flac",
			params:   api.TranscriptionParams{Format: api.AudioFLAC},
			fields:   map[string][]string{"model": {"whisper-large-v3"}, "temperature": {"0"}, "response_format": {"verbose_json"}, "timestamp_granularities[]": {"segment"}},
			fileName: "audio.flac", fileType: "audio/flac",
		},
		{
			name:     "translation: its own path, no granularities",
			params:   api.TranscriptionParams{Translate: true, Prompt: "Oslo", Words: true, Format: api.AudioWAV},
			fields:   map[string][]string{"model": {"whisper-large-v3"}, "prompt": {"Oslo"}, "temperature": {"0"}, "response_format": {"verbose_json"}},
			fileName: "audio.wav", fileType: "audio/wav",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var srv transcriptionServer
			f := newStreamServer(t, srv.handler(200, "application/json", openaiVerbose))
			e, err := New(Config{BaseURL: f.URL + "/v1", APIKey: "sk-test"})
			if err != nil {
				t.Fatal(err)
			}
			var s sink
			wantStatus(t, e.Serve(t.Context(), transcriptionReq(t, tt.params, bytes.NewReader(file)), &s), http.StatusOK)
			got := srv.last(t)
			if !reflect.DeepEqual(got.fields, tt.fields) {
				t.Errorf("fields %v\nwant   %v", got.fields, tt.fields)
			}
			if got.fileName != tt.fileName || got.fileType != tt.fileType || got.fileSum != sha256.Sum256(file) {
				t.Errorf("file %q %q, %d bytes", got.fileName, got.fileType, got.fileLen)
			}
			path := transcriptionsPath
			if tt.params.Translate {
				path = translationsPath
			}
			if h := got.header; got.path != path || h.Get("Authorization") != "Bearer sk-test" || h.Get("Accept") != "application/json" ||
				!strings.HasPrefix(h.Get("Content-Type"), "multipart/form-data; boundary=") {
				t.Errorf("%s with headers %v", got.path, h)
			}
		})
	}
}

// TestTranscriptionStreams uploads 20 MB to a server that stops reading
// after the first megabyte: the adapter must stop reading the upload too,
// holding no more than what is in flight, and deliver every byte once the
// server reads on.
func TestTranscriptionStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size, hold = 20 << 20, 1 << 20
		paused, release := make(chan struct{}), make(chan struct{})
		gotc := make(chan formGot, 1)
		srv := newMemServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			held := false
			got, err := readForm(r, func(n int64) {
				if n >= hold && !held {
					held = true
					close(paused)
					<-release
				}
			})
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			gotc <- got
			io.WriteString(w, openaiVerbose)
		}))

		src := newSource(t, size)
		done := make(chan int, 1)
		go func() {
			var s sink
			done <- srv.engine(t).Serve(t.Context(), transcriptionReq(t, api.TranscriptionParams{Seconds: 600}, src), &s).Status
		}()
		select {
		case <-paused:
		case <-time.After(10 * time.Second):
			t.Fatal("the upload did not reach the server")
		}
		// Let the upload go as far as it can, then check that the adapter
		// did not run ahead and read the file whole.
		synctest.Wait()
		if last := src.read.Load(); last >= size {
			t.Fatalf("the adapter read all %d bytes while the server held at 1 MB", last)
		}
		close(release)
		select {
		case status := <-done:
			if status != http.StatusOK {
				t.Fatalf("status %d", status)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the upload did not finish")
		}
		if got := <-gotc; got.fileLen != size || got.fileSum != src.sum() {
			t.Fatalf("the server got %d bytes, different from the %d sent", got.fileLen, size)
		}
	})
}

// newStreamServer is a test server whose handler sees the request body as
// it arrives (fake records it whole first).
func newStreamServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestTranscriptionReplies(t *testing.T) {
	segments := []api.Segment{
		{ID: 0, Start: 0, End: 2, Text: " And so, my fellow Americans,"},
		{ID: 1, Start: 3, End: 4.42, Text: " ask not."},
	}
	tests := []struct {
		name        string
		contentType string
		body        string
		params      api.TranscriptionParams
		want        api.Transcript
		words       []string
		ends        []float64 // of the words, when they matter
	}{
		{
			name: "OpenAI", contentType: "application/json", body: openaiVerbose,
			params: api.TranscriptionParams{Words: true, Seconds: 4.4},
			want:   api.Transcript{Language: "en", Duration: 4.420000076293945, Text: clipText, Segments: segments},
			words:  clipWords,
		},
		{
			name: "whisper.cpp, its tokens put together", contentType: "application/json", body: whisperCppVerbose,
			params: api.TranscriptionParams{Words: true, Seconds: 4.4},
			want:   api.Transcript{Language: "en", Duration: 4.4199996, Text: clipText, Segments: segments},
			words:  clipWords,
			ends:   []float64{0.32, 0.6, 1.0, 1.34, 2.0, 3.38, 3.88},
		},
		{
			name: "speaches", contentType: "application/json", body: speachesVerbose,
			params: api.TranscriptionParams{Words: true, Seconds: 4.4},
			want:   api.Transcript{Language: "en", Duration: 4.42, Text: clipText, Segments: segments},
			words:  clipWords,
		},
		{
			name: "words not asked for", contentType: "application/json", body: speachesVerbose,
			params: api.TranscriptionParams{Seconds: 4.4},
			want:   api.Transcript{Language: "en", Duration: 4.42, Text: clipText, Segments: segments},
		},
		{
			name: "json with the text only", contentType: "application/json", body: `{"text":"` + clipText + `"}`,
			params: api.TranscriptionParams{Language: "fr", Words: true, Seconds: 4.4},
			want: api.Transcript{Language: "fr", Duration: 4.4, Text: clipText, Segments: []api.Segment{
				{End: 4.4, Text: clipText},
			}},
			words: []string{},
		},
		{
			name: "json labelled as text", contentType: "text/plain", body: `{"text":"` + clipText + `","duration":4.42}`,
			params: api.TranscriptionParams{Seconds: 4.4},
			want:   api.Transcript{Duration: 4.42, Text: clipText, Segments: []api.Segment{{End: 4.42, Text: clipText}}},
		},
		{
			name: "plain text", contentType: "text/plain; charset=utf-8", body: clipText + "\n",
			params: api.TranscriptionParams{Seconds: 4.4},
			want:   api.Transcript{Duration: 4.4, Text: clipText, Segments: []api.Segment{{End: 4.4, Text: clipText}}},
		},
		{
			name: "whisper.cpp text, as HTML", contentType: "text/html; charset=utf-8", body: " " + clipText + "\n",
			params: api.TranscriptionParams{Seconds: 4.4},
			want:   api.Transcript{Duration: 4.4, Text: clipText, Segments: []api.Segment{{End: 4.4, Text: clipText}}},
		},
		{
			name: "silence", contentType: "application/json", body: `{"task":"transcribe","language":"english","duration":2.0,"text":"","segments":[]}`,
			params: api.TranscriptionParams{Seconds: 2},
			want:   api.Transcript{Language: "en", Duration: 2, Segments: []api.Segment{}},
		},
		{
			name: "text from segments, unknown language", contentType: "application/json",
			body:   `{"language":"klingon","duration":"4.42","segments":[{"id":0,"start":0,"end":2,"text":" And so, my fellow Americans,"},{"id":1,"start":3,"end":4.42,"text":" ask not."}]}`,
			params: api.TranscriptionParams{Seconds: 4.4},
			want:   api.Transcript{Duration: 4.42, Text: clipText, Segments: segments},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{transcriptionsPath: jsonOrText(tt.contentType, tt.body)})
			var s sink
			wantStatus(t, newEngine(t, f.URL).Serve(t.Context(), transcriptionReq(t, tt.params, strings.NewReader("RIFF")), &s), http.StatusOK)
			got := transcriptOf(t, &s)
			words := got.Words
			got.Words = nil
			for i := range got.Segments {
				// Scores are the server's; the shapes are what is checked.
				got.Segments[i].AvgLogprob, got.Segments[i].NoSpeechProb = 0, 0
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
			if tt.words == nil {
				if words != nil {
					t.Fatalf("words without asking: %+v", words)
				}
				return
			}
			texts := []string{}
			for i, w := range words {
				texts = append(texts, w.Word)
				if w.End < w.Start || (tt.ends != nil && w.End != tt.ends[i]) {
					t.Errorf("word %d %+v", i, w)
				}
			}
			if !reflect.DeepEqual(texts, tt.words) {
				t.Fatalf("words %q, want %q", texts, tt.words)
			}
		})
	}

	t.Run("scores", func(t *testing.T) {
		f := newFake(t, map[string]http.HandlerFunc{transcriptionsPath: jsonHandler(200, whisperCppVerbose)})
		var s sink
		wantStatus(t, newEngine(t, f.URL).Serve(t.Context(), transcriptionReq(t, api.TranscriptionParams{}, strings.NewReader("RIFF")), &s), http.StatusOK)
		got := transcriptOf(t, &s).Segments
		if got[0].AvgLogprob != -0.25 || got[0].NoSpeechProb != 0.0012 || got[1].AvgLogprob != 0 {
			t.Fatalf("segments %+v", got)
		}
	})
}

// jsonOrText answers 200 with body as contentType.
func jsonOrText(contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		io.WriteString(w, body)
	}
}

func TestNormaliseLanguage(t *testing.T) {
	for in, want := range map[string]string{
		"english": "en", "English": "en", "en": "en", " german ": "de", "chinese": "zh", "castilian": "es",
		"": "", "auto": "", "klingon": "", "yue": "",
	} {
		if got := normaliseLanguage(in); got != want {
			t.Errorf("normaliseLanguage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTranscriptionErrors(t *testing.T) {
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		status    int
		typ       string
		retryable bool
		msg       string
	}{
		{"OpenAI bad request", jsonHandler(400, `{"error":{"message":"Invalid file format. Supported formats: ['flac', 'm4a', 'mp3', 'wav']","type":"invalid_request_error","param":null,"code":null}}`),
			400, api.TypeInvalidRequest, false, "Invalid file format"},
		{"whisper.cpp failure", jsonHandler(500, `{"error":"failed to process audio"}`), 500, api.TypeUpstream, true, "failed to process audio"},
		{"speaches unknown model", jsonHandler(404, `{"detail":"Model 'x' is not installed locally."}`), 404, api.TypeNotFound, false, "not installed"},
		{"error with status 200", jsonHandler(200, `{"error":{"message":"CUDA out of memory","type":"server_error","code":500}}`), 507, api.TypeInsufficientMemory, false, "out of memory"},
		{"not JSON", jsonHandler(200, `{"text":`), 502, api.TypeUpstream, true, "invalid response"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{transcriptionsPath: tt.handler})
			var s sink
			r := newEngine(t, f.URL).Serve(t.Context(), transcriptionReq(t, api.TranscriptionParams{}, strings.NewReader("RIFF")), &s)
			wantStatus(t, r, tt.status)
			if r.Error.Type != tt.typ || r.Retryable != tt.retryable || !strings.Contains(r.Error.Message, tt.msg) || s.body != nil {
				t.Fatalf("got %+v retryable=%v", r.Error, r.Retryable)
			}
		})
	}

	t.Run("unreachable", func(t *testing.T) {
		r := newEngine(t, "http://127.0.0.1:1").Serve(t.Context(), transcriptionReq(t, api.TranscriptionParams{}, strings.NewReader("RIFF")), &sink{})
		wantStatus(t, r, http.StatusBadGateway)
		if !r.Retryable || !strings.Contains(errMsg(r), "unreachable") {
			t.Fatalf("got %+v", r.Error)
		}
	})

	t.Run("too large", func(t *testing.T) {
		f := newFake(t, map[string]http.HandlerFunc{transcriptionsPath: jsonHandler(200, openaiVerbose)})
		e := newEngine(t, f.URL)
		e.maxBody = 100
		r := e.Serve(t.Context(), transcriptionReq(t, api.TranscriptionParams{}, strings.NewReader("RIFF")), &sink{})
		wantStatus(t, r, http.StatusBadGateway)
	})

	t.Run("bad parameters", func(t *testing.T) {
		req := transcriptionReq(t, api.TranscriptionParams{}, strings.NewReader("RIFF"))
		req.Body = []byte(`{"seconds":"long"}`)
		wantStatus(t, newEngine(t, "http://127.0.0.1:1").Serve(t.Context(), req, &sink{}), http.StatusBadRequest)
		req.Body, req.Audio = []byte(`{}`), nil
		wantStatus(t, newEngine(t, "http://127.0.0.1:1").Serve(t.Context(), req, &sink{}), http.StatusBadRequest)
	})

	t.Run("broken upload", func(t *testing.T) {
		// The worker's copy of the upload broke off: not the engine's
		// fault, and not worth a retry elsewhere with half a file.
		var srv transcriptionServer
		f := newStreamServer(t, srv.handler(200, "application/json", openaiVerbose))
		src := newSource(t, 256<<10)
		src.err = errors.New("link reset")
		r := newEngine(t, f.URL).Serve(t.Context(), transcriptionReq(t, api.TranscriptionParams{}, src), &sink{})
		wantStatus(t, r, http.StatusBadGateway)
		if r.Retryable || !strings.Contains(errMsg(r), "link reset") {
			t.Fatalf("got %+v retryable=%v", r.Error, r.Retryable)
		}
	})
}

// TestTranscriptionEndsTheUpload checks that a request that ends before
// its upload does, cancelled or answered early, stops reading the audio:
// the upload goroutine is over by the time Serve returns.
func TestTranscriptionEndsTheUpload(t *testing.T) {
	const hold = 1 << 20
	tests := []struct {
		name   string
		answer bool // the server answers early instead of the client cancelling
		status int
	}{
		{"cancelled mid-upload", false, 499},
		{"answered mid-upload", true, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reached := make(chan struct{})
				srv := newMemServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					buf := make([]byte, 32<<10)
					var n int64
					for n < hold {
						m, err := r.Body.Read(buf)
						n += int64(m)
						if err != nil {
							return
						}
					}
					close(reached)
					if tt.answer {
						jsonHandler(413, `{"error":{"message":"Maximum content size limit exceeded","type":"invalid_request_error"}}`)(w, r)
						return
					}
					// Read on until the client goes: the server notices a
					// closed connection only through the body.
					io.Copy(io.Discard, r.Body)
				}))
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				src := newSource(t, 1<<40) // more than will ever be read
				done := make(chan int, 1)
				go func() {
					r := srv.engine(t).Serve(ctx, transcriptionReq(t, api.TranscriptionParams{}, src), &sink{})
					src.ended.Store(true)
					done <- r.Status
				}()
				select {
				case <-reached:
				case <-time.After(10 * time.Second):
					t.Fatal("the upload did not reach the server")
				}
				if !tt.answer {
					cancel()
				}
				select {
				case status := <-done:
					if status != tt.status {
						t.Fatalf("status %d, want %d", status, tt.status)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Serve did not return")
				}
				// Any reader still running would trip source.Read now; one
				// left waiting fails the bubble.
				synctest.Wait()
			})
		})
	}
}
