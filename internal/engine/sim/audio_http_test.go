package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/engine"
)

// form is a transcription form: fields in order, the file among them
// under "file".
type form [][2]string

// postForm sends f as multipart/form-data, with file as the "file" part.
func postForm(t *testing.T, srv string, f form, file []byte) *http.Response {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, kv := range f {
		if kv[0] == "file" {
			w, err := mw.CreateFormFile("file", kv[1])
			if err != nil {
				t.Fatal(err)
			}
			w.Write(file)
			continue
		}
		mw.WriteField(kv[0], kv[1])
	}
	mw.Close()
	resp, err := http.Post(srv+"/v1/audio/transcriptions", mw.FormDataContentType(), &b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestHTTPTranscription(t *testing.T) {
	cfg := fixedConfig()
	srv := newServer(t, NewHandler(cfg))
	file := wavClip(t, 13, 220)
	// What the in-process engine makes of the same file.
	_, s := transcribeFile(t, New(cfg), "sim-stt", api.TranscriptionParams{Words: true, Language: "fr"}, file)
	want := decodeTranscript(t, s.body)

	type verbose struct {
		Task     string  `json:"task"`
		Language string  `json:"language"`
		Duration float64 `json:"duration"`
		Text     string  `json:"text"`
		Segments []struct {
			api.Segment
			Seek             *int     `json:"seek"`
			Tokens           []int    `json:"tokens"`
			Temperature      *float64 `json:"temperature"`
			CompressionRatio float64  `json:"compression_ratio"`
		} `json:"segments"`
		Words []api.Word `json:"words"`
		Usage struct {
			Type    string `json:"type"`
			Seconds int    `json:"seconds"`
		} `json:"usage"`
	}
	tests := []struct {
		name        string
		form        form
		contentType string
		check       func(t *testing.T, body []byte)
	}{
		{"json by default", form{{"file", "a.wav"}, {"model", "sim-stt"}, {"language", "fr"}}, "application/json", func(t *testing.T, body []byte) {
			var v struct {
				Text  string `json:"text"`
				Usage struct {
					Seconds int `json:"seconds"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(body, &v); err != nil || v.Text != want.Text || v.Usage.Seconds != 13 {
				t.Fatalf("%s: %v", body, err)
			}
		}},
		{"text, the file last", form{{"model", "sim-stt"}, {"language", "fr"}, {"response_format", "text"}, {"file", "a.wav"}}, "text/plain; charset=utf-8", func(t *testing.T, body []byte) {
			if string(body) != want.Text+"\n" {
				t.Fatalf("%q", body)
			}
		}},
		{"srt", form{{"model", "sim-stt"}, {"language", "fr"}, {"response_format", "srt"}, {"file", "a.wav"}}, "application/x-subrip", func(t *testing.T, body []byte) {
			if !bytes.Equal(body, audio.SRT(&want)) {
				t.Fatalf("%s", body)
			}
		}},
		{"vtt", form{{"model", "sim-stt"}, {"language", "fr"}, {"response_format", "vtt"}, {"file", "a.wav"}}, "text/vtt", func(t *testing.T, body []byte) {
			if !bytes.Equal(body, audio.VTT(&want)) {
				t.Fatalf("%s", body)
			}
		}},
		{"verbose_json with both granularities", form{
			{"model", "sim-stt"}, {"language", "fr"}, {"response_format", "verbose_json"}, {"temperature", "0.2"},
			{"timestamp_granularities[]", "segment"}, {"timestamp_granularities[]", "word"}, {"file", "a.wav"},
		}, "application/json", func(t *testing.T, body []byte) {
			var v verbose
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatal(err)
			}
			if v.Task != "transcribe" || v.Language != "french" || v.Duration != 13 || v.Text != want.Text ||
				len(v.Segments) != len(want.Segments) || len(v.Words) != len(want.Words) || v.Usage.Type != "duration" {
				t.Fatalf("%s", body)
			}
			for i, seg := range v.Segments {
				if seg.Segment != want.Segments[i] || seg.Seek == nil || len(seg.Tokens) == 0 || *seg.Temperature != 0.2 || seg.CompressionRatio <= 1 {
					t.Fatalf("segment %d: %+v", i, seg)
				}
			}
		}},
		{"verbose_json defaults to segments", form{{"model", "sim-stt"}, {"response_format", "verbose_json"}, {"file", "a.wav"}}, "application/json", func(t *testing.T, body []byte) {
			var v verbose
			if err := json.Unmarshal(body, &v); err != nil || v.Language != "english" || len(v.Segments) == 0 || v.Words != nil {
				t.Fatalf("%s: %v", body, err)
			}
		}},
		{"verbose_json with words only", form{{"model", "sim-stt"}, {"response_format", "verbose_json"}, {"timestamp_granularities[]", "word"}, {"file", "a.wav"}}, "application/json", func(t *testing.T, body []byte) {
			var v verbose
			if err := json.Unmarshal(body, &v); err != nil || v.Segments != nil || len(v.Words) == 0 {
				t.Fatalf("%s: %v", body, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := postForm(t, srv.URL, tt.form, file)
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != tt.contentType {
				t.Fatalf("%d %q: %s %v", resp.StatusCode, resp.Header.Get("Content-Type"), body, err)
			}
			tt.check(t, body)
		})
	}
}

// errorOf checks an OpenAI error envelope and returns what the openai
// adapter makes of it.
func errorOf(t *testing.T, resp *http.Response) *api.Result {
	t.Helper()
	body, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") != "application/json" || !json.Valid(body) {
		t.Fatalf("%d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return engine.ErrorResult(resp.StatusCode, body)
}

func TestHTTPTranscriptionErrors(t *testing.T) {
	srv := newServer(t, NewHandler(fixedConfig()))
	wav := wavClip(t, 2, 220)
	tests := []struct {
		name   string
		form   form
		file   []byte
		status int
		typ    string
		msg    string
	}{
		{"no file", form{{"model", "sim-stt"}}, nil, 400, api.TypeInvalidRequest, "file"},
		{"two files", form{{"model", "sim-stt"}, {"file", "a.wav"}, {"file", "b.wav"}}, wav, 400, api.TypeInvalidRequest, "one file"},
		{"no model", form{{"file", "a.wav"}}, wav, 400, api.TypeInvalidRequest, "model"},
		{"unknown model", form{{"model", "whisper-9"}, {"file", "a.wav"}}, wav, 404, api.TypeNotFound, "whisper-9"},
		{"speech model", form{{"model", "sim-tts"}, {"file", "a.wav"}}, wav, 400, api.TypeInvalidRequest, "/v1/audio/speech"},
		{"not audio", form{{"model", "sim-stt"}, {"file", "a.wav"}}, []byte(strings.Repeat("text ", 50)), 400, api.TypeInvalidRequest, "Unsupported audio format"},
		{"bad format", form{{"model", "sim-stt"}, {"response_format", "mp3"}, {"file", "a.wav"}}, wav, 400, api.TypeInvalidRequest, "response_format"},
		{"granularities need verbose_json", form{{"model", "sim-stt"}, {"timestamp_granularities[]", "word"}, {"file", "a.wav"}}, wav, 400, api.TypeInvalidRequest, "verbose_json"},
		{"bad granularity", form{{"model", "sim-stt"}, {"timestamp_granularities[]", "char"}, {"file", "a.wav"}}, wav, 400, api.TypeInvalidRequest, "char"},
		{"bad temperature", form{{"model", "sim-stt"}, {"temperature", "2"}, {"file", "a.wav"}}, wav, 400, api.TypeInvalidRequest, "temperature"},
		{"huge field", form{{"model", "sim-stt"}, {"prompt", strings.Repeat("p", maxFieldBytes+1)}, {"file", "a.wav"}}, wav, 400, api.TypeInvalidRequest, "prompt"},
		{"fail directive", form{{"model", "sim-stt"}, {"prompt", "sim: fail=503"}, {"file", "a.wav"}}, wav, 503, api.TypeServiceUnavailable, "sim fail=503"},
		{"out of memory", form{{"model", "sim-stt"}, {"prompt", "sim: fail=507"}, {"file", "a.wav"}}, wav, 507, api.TypeInsufficientMemory, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := postForm(t, srv.URL, tt.form, tt.file)
			r := errorOf(t, resp)
			if resp.StatusCode != tt.status || r.Error.Type != tt.typ || !strings.Contains(r.Error.Message, tt.msg) {
				t.Fatalf("%d %+v", resp.StatusCode, r.Error)
			}
		})
	}

	t.Run("not multipart", func(t *testing.T) {
		resp := post(t, srv, "/v1/audio/transcriptions", []byte(`{"model":"sim-stt"}`))
		if r := errorOf(t, resp); resp.StatusCode != 400 || !strings.Contains(r.Error.Message, "multipart") {
			t.Fatalf("%d %+v", resp.StatusCode, r.Error)
		}
	})

	t.Run("too large", func(t *testing.T) {
		// Streamed, so neither side holds the file: a valid WAV header
		// and then silence past the limit.
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			mw.WriteField("model", "sim-stt")
			w, _ := mw.CreateFormFile("file", "big.wav")
			w.Write(wav[:44])
			_, err := io.CopyN(w, zeros{}, maxBodyBytes)
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
		resp, err := http.Post(srv.URL+"/v1/audio/transcriptions", mw.FormDataContentType(), pr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		pr.Close() // the server stopped reading; let the writer go
		if r := errorOf(t, resp); resp.StatusCode != http.StatusRequestEntityTooLarge || r.Error.Type != api.TypeInvalidRequest {
			t.Fatalf("%d %+v", resp.StatusCode, r.Error)
		}
	})

	t.Run("cut", func(t *testing.T) {
		resp := postForm(t, srv.URL, form{{"model", "sim-stt"}, {"prompt", "sim: fail=cut"}, {"file", "a.wav"}}, wav)
		if body, err := io.ReadAll(resp.Body); err == nil || json.Valid(body) {
			t.Fatalf("a cut answer arrived whole: %s", body)
		}
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestHTTPSpeech(t *testing.T) {
	cfg := fixedConfig()
	srv := newServer(t, NewHandler(cfg))
	_, want := speak(t, New(cfg), api.SpeechParams{Input: "Good morning, world.", Voice: "nova"})

	tests := []struct {
		name        string
		body        string
		contentType string
		check       func(t *testing.T, body []byte)
	}{
		{"wav by default", `{"model":"sim-tts","input":"Good morning, world.","voice":"nova"}`, "audio/wav", func(t *testing.T, body []byte) {
			if !bytes.Equal(body, want) {
				t.Fatal("the HTTP face and the engine say it differently")
			}
		}},
		{"voice as an object", `{"model":"sim-tts","input":"Good morning, world.","voice":{"id":"nova"},"response_format":"wav"}`, "audio/wav", func(t *testing.T, body []byte) {
			if !bytes.Equal(body, want) {
				t.Fatal("the voice object was not read")
			}
		}},
		{"pcm", `{"model":"sim-tts","input":"Good morning, world.","voice":"nova","response_format":"pcm"}`, "audio/pcm", func(t *testing.T, body []byte) {
			pcm, err := audio.Decode(bytes.NewReader(want))
			if err != nil {
				t.Fatal(err)
			}
			if len(body) != 2*len(pcm.Samples) {
				t.Fatalf("%d bytes for %d samples", len(body), len(pcm.Samples))
			}
			for i, v := range pcm.Samples {
				got := float32(int16(binary.LittleEndian.Uint16(body[2*i:]))) / 32768
				if d := got - v; d > 0.001 || d < -0.001 {
					t.Fatalf("sample %d: %v, want %v", i, got, v)
				}
			}
		}},
		{"speed", `{"model":"sim-tts","input":"Good morning, world.","voice":"nova","speed":2}`, "audio/wav", func(t *testing.T, body []byte) {
			if got, full := wavSeconds(t, body), wavSeconds(t, want); got < 0.45*full || got > 0.55*full {
				t.Fatalf("%vs at double speed, %vs at normal", got, full)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, srv, "/v1/audio/speech", []byte(tt.body))
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != tt.contentType {
				t.Fatalf("%d %q: %.200s %v", resp.StatusCode, resp.Header.Get("Content-Type"), body, err)
			}
			tt.check(t, body)
		})
	}
}

func TestHTTPSpeechErrors(t *testing.T) {
	srv := newServer(t, NewHandler(fixedConfig()))
	tests := []struct {
		name   string
		body   string
		status int
		typ    string
		msg    string
	}{
		{"mp3", `{"model":"sim-tts","input":"hi","response_format":"mp3"}`, 400, api.TypeInvalidRequest, "wav or pcm"},
		{"sse", `{"model":"sim-tts","input":"hi","stream_format":"sse"}`, 400, api.TypeInvalidRequest, "stream_format"},
		{"unknown voice", `{"model":"sim-tts","input":"hi","voice":"bob"}`, 400, api.TypeInvalidRequest, "shimmer"},
		{"bad voice", `{"model":"sim-tts","input":"hi","voice":7}`, 400, api.TypeInvalidRequest, "voice"},
		{"bad json", `{"model":`, 400, api.TypeInvalidRequest, ""},
		{"no model", `{"input":"hi"}`, 400, api.TypeInvalidRequest, "model"},
		{"fail directive", `{"model":"sim-tts","input":"hi\nsim: fail=501"}`, 501, api.TypeNotSupported, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, srv, "/v1/audio/speech", []byte(tt.body))
			r := errorOf(t, resp)
			if resp.StatusCode != tt.status || r.Error.Type != tt.typ || !strings.Contains(r.Error.Message, tt.msg) {
				t.Fatalf("%d %+v", resp.StatusCode, r.Error)
			}
		})
	}

	t.Run("cut", func(t *testing.T) {
		resp := post(t, srv, "/v1/audio/speech", []byte(`{"model":"sim-tts","input":"hi\nsim: fail=cut"}`))
		if _, err := io.ReadAll(resp.Body); err == nil {
			t.Fatal("a cut answer arrived whole")
		}
	})
}

func TestHTTPAudioClientCancel(t *testing.T) {
	wav := wavClip(t, 60, 220)
	tests := []struct {
		name  string
		hangs bool
		send  func(ctx context.Context, url string) (*http.Response, error)
	}{
		{"transcription at work", false, func(ctx context.Context, url string) (*http.Response, error) {
			var b bytes.Buffer
			mw := multipart.NewWriter(&b)
			mw.WriteField("model", "sim-stt")
			w, _ := mw.CreateFormFile("file", "a.wav")
			w.Write(wav)
			mw.Close()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/audio/transcriptions", &b)
			req.Header.Set("Content-Type", mw.FormDataContentType())
			return http.DefaultClient.Do(req)
		}},
		{"speech hang", true, func(ctx context.Context, url string) (*http.Response, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/audio/speech",
				strings.NewReader(`{"model":"sim-tts","input":"hi\nsim: hang=1"}`))
			return http.DefaultClient.Do(req)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The real clock and a factor that makes the work last over
			// an hour: only cancellation ends the handler in time.
			w, working := busy(Config{AudioRTF: 100}, tt.hangs)
			srv := newServer(t, w)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				resp, err := tt.send(ctx, srv.URL)
				if err == nil {
					resp.Body.Close()
				}
				done <- err
			}()
			<-working
			cancel()
			if err := <-done; err == nil {
				t.Fatal("the request succeeded")
			}
			select {
			case <-w.ended:
			case <-time.After(5 * time.Second):
				t.Fatal("the handler kept working after the client left")
			}
		})
	}
}
