package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/harness"
)

// audioAliases offer the simulator's speech-to-text model under the
// spec's ids, as a worker with a whisper build would.
var audioAliases = []string{"--model-alias", "stt-large-v3-turbo=sim-stt", "--model-alias", "stt-large-v3=sim-stt"}

// audioGateway is a server with one simulated worker serving audio.
func audioGateway(t *testing.T, simOptions string, serveArgs ...string) (*server, string) {
	t.Helper()
	s := startServer(t, "", serveArgs...)
	args := append([]string{"--engine", "sim=" + simOptions, "--max-concurrent", "4"}, audioAliases...)
	startWorker(t, s.URL, s.tokenFile(), "audio-box", args...)
	return s, s.adminKey()
}

// tone is a WAV file of a 440 Hz tone.
func tone(t testing.TB, seconds float64, rate int) []byte {
	t.Helper()
	pcm := audio.PCM{Rate: rate, Samples: make([]float32, int(seconds*float64(rate)))}
	for i := range pcm.Samples {
		pcm.Samples[i] = 0.3 * float32(math.Sin(2*math.Pi*440*float64(i)/float64(rate)))
	}
	var b bytes.Buffer
	if err := audio.EncodeWAV(&b, pcm); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// upload is a multipart transcription request; the file goes in as
// "recording.mp3" whatever it holds, since the name must not matter.
func upload(t testing.TB, file []byte, fields ...string) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		_ = w.WriteField(fields[i], fields[i+1])
	}
	if file != nil {
		fw, err := w.CreateFormFile("file", "recording.mp3")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fw.Write(file)
	}
	_ = w.Close()
	return w.FormDataContentType(), b.Bytes()
}

// post sends a raw body with a content type.
func (s *server) post(path, ctype string, body []byte, hs ...header) reply {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", s.URL+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	for _, h := range hs {
		req.Header.Set(h.k, h.v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// usageRow waits for the usage row of request id.
func (s *server) usageRow(key, id string) map[string]any {
	s.t.Helper()
	var r reply
	var found map[string]any
	if !harness.Eventually(10*time.Second, func() bool {
		r = s.do("GET", "/api/v1/usage/logs?limit=100", "", bearer(key))
		var rows []map[string]any
		_ = json.Unmarshal(r.Body, &rows)
		for _, row := range rows {
			if row["id"] == id {
				found = row
				return true
			}
		}
		return false
	}) {
		s.t.Fatalf("no usage row for %s in %s", id, r.Body)
	}
	return found
}

func TestTranscriptionSDK(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	ctx := context.Background()
	file := tone(t, 7.5, 16000)
	for _, prefix := range []string{"/v1", "/api/v1"} {
		t.Run(prefix, func(t *testing.T) {
			client := sdk(s, key, prefix)
			var resp *http.Response
			res, err := client.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{
				File: openai.File(bytes.NewReader(file), "clip.wav", "audio/wav"), Model: "stt-large-v3-turbo",
				ResponseFormat: openai.AudioResponseFormatVerboseJSON, TimestampGranularities: []string{"word", "segment"},
				Language: openai.String("en"),
			}, option.WithResponseInto(&resp))
			if err != nil {
				t.Fatal(err)
			}
			v := res.AsTranscriptionVerbose()
			if v.Duration != 7.5 || v.Language != "en" || v.Text == "" || len(v.Segments) < 2 || len(v.Words) == 0 {
				t.Fatalf("verbose transcript %s", res.RawJSON())
			}
			last := v.Segments[len(v.Segments)-1]
			if last.End > 7.5 || v.Segments[0].Start != 0 {
				t.Fatalf("segments do not cover the audio: %+v", v.Segments)
			}
			svc := svcOf(t, res.RawJSON())
			worker, _ := svc["worker"].(map[string]any)
			id := resp.Header.Get("X-Request-Id")
			if svc["request_id"] != id || worker["id"] != resp.Header.Get("X-Worker-Id") || worker["name"] != "audio-box" ||
				resp.Header.Get("X-Worker-Name") != "audio-box" {
				t.Fatalf("svc %v vs headers %v", svc, resp.Header)
			}
			row := s.usageRow(key, id)
			if row["request_type"] != "audio" || row["audio_seconds"] != 7.5 || row["audio_format"] != "wav" ||
				row["status_code"] != 200.0 || row["total_tokens"] != 0.0 || row["model"] != "stt-large-v3-turbo" || row["worker_name"] != "audio-box" {
				t.Fatalf("usage row %v", row)
			}

			// The plain json format, with the SDK's defaults.
			res, err = client.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{
				File: openai.File(bytes.NewReader(file), "clip.wav", "audio/wav"), Model: "stt-large-v3",
			})
			if err != nil || res.AsTranscription().Text == "" || svcOf(t, res.RawJSON())["request_id"] == nil {
				t.Fatalf("json transcript %v %s", err, res.RawJSON())
			}
		})
	}
}

func TestTranscriptionFormats(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	file := tone(t, 12, 8000)
	tests := []struct {
		format, ctype string
		check         func(t *testing.T, body string)
	}{
		{"text", "text/plain; charset=utf-8", func(t *testing.T, body string) {
			if strings.HasPrefix(body, "{") || !strings.HasSuffix(body, "\n") || len(body) < 10 {
				t.Fatalf("text %q", body)
			}
		}},
		{"srt", "application/x-subrip; charset=utf-8", func(t *testing.T, body string) {
			if !strings.HasPrefix(body, "1\n00:00:00,000 --> 00:00:") || !strings.Contains(body, "\n\n2\n") {
				t.Fatalf("srt %q", body)
			}
		}},
		{"vtt", "text/vtt; charset=utf-8", func(t *testing.T, body string) {
			if !strings.HasPrefix(body, "WEBVTT\n\n00:00:00.000 --> ") {
				t.Fatalf("vtt %q", body)
			}
		}},
		{"json", "application/json", func(t *testing.T, body string) {
			var m map[string]any
			if json.Unmarshal([]byte(body), &m) != nil || m["text"] == "" || m["svc"] == nil {
				t.Fatalf("json %q", body)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			ct, body := upload(t, file, "model", "stt-large-v3", "response_format", tt.format)
			r := s.post("/v1/audio/transcriptions", ct, body, bearer(key))
			if r.Status != 200 || r.Header.Get("Content-Type") != tt.ctype {
				t.Fatalf("%d %s %s", r.Status, r.Header.Get("Content-Type"), r.Body)
			}
			if r.Header.Get("X-Worker-Id") == "" || r.Header.Get("X-Worker-Name") != "audio-box" || r.Header.Get("X-Request-Id") == "" {
				t.Fatalf("headers %v", r.Header)
			}
			tt.check(t, string(r.Body))
		})
	}
}

func TestTranscriptionRefusals(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	file := tone(t, 1, 16000)
	tests := []struct {
		name   string
		ctype  string
		body   []byte
		status int
		check  string // in the body
	}{
		{"no model", "", nil, 422, `"field":"model"`},
		{"not audio, whatever its name", "", []byte("this is plain text pretending to be an mp3"), 400, `"Unsupported audio format"`},
		{"granularities need verbose_json", "", nil, 422, `"field":"timestamp_granularities"`},
		{"beam size out of range", "", nil, 422, `"field":"beam_size"`},
		{"json instead of a form", "application/json", []byte(`{"model":"stt-large-v3"}`), 400, "multipart/form-data"},
		{"unknown model", "", nil, 404, "model_not_found"},
		{"a chat model", "", nil, 404, "/v1/chat/completions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ct string
			var body []byte
			switch tt.name {
			case "no model":
				ct, body = upload(t, file)
			case "not audio, whatever its name":
				ct, body = upload(t, tt.body, "model", "stt-large-v3")
			case "granularities need verbose_json":
				ct, body = upload(t, file, "model", "stt-large-v3", "timestamp_granularities[]", "word")
			case "beam size out of range":
				ct, body = upload(t, file, "model", "stt-large-v3", "beam_size", "12")
			case "json instead of a form":
				ct, body = tt.ctype, tt.body
			case "unknown model":
				ct, body = upload(t, file, "model", "stt-nonexistent")
			case "a chat model":
				ct, body = upload(t, file, "model", "sim-chat")
			}
			r := s.post("/api/v1/audio/transcriptions", ct, body, bearer(key))
			if r.Status != tt.status || !strings.Contains(string(r.Body), tt.check) || r.Header.Get("X-Request-Id") == "" {
				t.Fatalf("got %d %s, want %d with %s", r.Status, r.Body, tt.status, tt.check)
			}
			var b struct {
				Detail any `json:"detail"`
				Error  struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if json.Unmarshal(r.Body, &b) != nil || b.Detail == nil || b.Error.Message == "" || b.Error.Type == "" {
				t.Fatalf("error body %s", r.Body)
			}
		})
	}
}

// rawPost writes a request by hand on a fresh connection and returns the
// status line and what followed, read until the server closes or 5 s pass.
func rawPost(t *testing.T, s *server, head string, body io.Reader) (string, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	if body != nil {
		// The server may refuse and close while the body is still going.
		go func() { _, _ = io.Copy(conn, body) }()
	}
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	rest, _ := io.ReadAll(io.LimitReader(br, 1<<16))
	return strings.TrimSpace(status), string(rest)
}

// An upload over 25 MB is refused before it is read: at once on its
// Content-Length, when it asks to continue, and while it streams when it
// is chunked.
func TestTranscriptionTooLarge(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	host := strings.TrimPrefix(s.URL, "http://")
	const boundary = "b0undary"
	head := func(extra string) string {
		return "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + key +
			"\r\nContent-Type: multipart/form-data; boundary=" + boundary + "\r\n" + extra + "\r\n"
	}

	t.Run("content-length", func(t *testing.T) {
		// No body is sent at all: the answer must come from the header.
		status, rest := rawPost(t, s, head("Content-Length: 30000000\r\n"), nil)
		if !strings.Contains(status, "413") || !strings.Contains(rest, "larger than 26 MB") || !strings.Contains(rest, "X-Request-Id") {
			t.Fatalf("%s\n%s", status, rest)
		}
	})
	t.Run("sent whole before the answer is read", func(t *testing.T) {
		// As most clients do: the whole body, then the answer. The
		// gateway reads past what it refused until the body is in, and
		// the answer is not lost to a reset connection.
		for _, framing := range []string{"Content-Length: 31457280\r\n", "Transfer-Encoding: chunked\r\n"} {
			conn, err := net.Dial("tcp", host)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			w := bufio.NewWriterSize(conn, 1<<20)
			_, _ = io.WriteString(w, head(framing))
			chunk := bytes.Repeat([]byte{'a'}, 1<<20)
			for range 30 { // 30 MiB
				if strings.HasPrefix(framing, "Transfer") {
					_, err = fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk)
				} else {
					_, err = w.Write(chunk)
				}
				if err != nil {
					break
				}
			}
			if err == nil && strings.HasPrefix(framing, "Transfer") {
				_, err = io.WriteString(w, "0\r\n\r\n")
			}
			if err == nil {
				err = w.Flush()
			}
			if err != nil {
				t.Fatalf("%s: sending the body: %v", framing, err)
			}
			status, rerr := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if !strings.Contains(status, "413") {
				t.Fatalf("%s: the answer after the body: %q %v", framing, status, rerr)
			}
		}
	})
	t.Run("expect 100-continue", func(t *testing.T) {
		status, rest := rawPost(t, s, head("Content-Length: 30000000\r\nExpect: 100-continue\r\n"), nil)
		if !strings.Contains(status, "413") || !strings.Contains(rest, "larger than 26 MB") {
			t.Fatalf("%s\n%s", status, rest)
		}
	})
	t.Run("chunked", func(t *testing.T) {
		pr, pw := io.Pipe()
		go func() {
			defer pw.Close()
			chunk := bytes.Repeat([]byte{'a'}, 1<<20)
			for range 40 {
				if _, err := fmt.Fprintf(pw, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
					return
				}
			}
			_, _ = io.WriteString(pw, "0\r\n\r\n")
		}()
		status, rest := rawPost(t, s, head("Transfer-Encoding: chunked\r\n"), pr)
		_ = pr.Close()
		if !strings.Contains(status, "413") || !strings.Contains(rest, "larger than 26 MB") {
			t.Fatalf("%s\n%s", status, rest)
		}
	})
	t.Run("file over 25 MB in a body under the limit", func(t *testing.T) {
		big := tone(t, 1, 16000)
		big = append(big, make([]byte, 25<<20)...) // a WAV whose trailing junk passes the limit
		ct, body := upload(t, big, "model", "stt-large-v3")
		if len(body) > 26<<20 {
			t.Fatalf("body of %d bytes is over the route limit; the case needs a smaller one", len(body))
		}
		r := s.post("/v1/audio/transcriptions", ct, body, bearer(key))
		if r.Status != 413 || !strings.Contains(string(r.Body), "25 MB") {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})
	t.Run("a file over 25 MB that is not audio is too large before it is unsupported", func(t *testing.T) {
		ct, body := upload(t, bytes.Repeat([]byte("not audio "), 25<<20/10+1), "model", "stt-large-v3")
		if len(body) > 26<<20 {
			t.Fatalf("body of %d bytes is over the route limit; the case needs a smaller one", len(body))
		}
		r := s.post("/v1/audio/transcriptions", ct, body, bearer(key))
		if r.Status != 413 || !strings.Contains(string(r.Body), "25 MB") {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})
	// The gateway still serves after refusing.
	ct, body := upload(t, tone(t, 1, 16000), "model", "stt-large-v3")
	if r := s.post("/v1/audio/transcriptions", ct, body, bearer(key)); r.Status != 200 {
		t.Fatalf("after the refusals: %d %s", r.Status, r.Body)
	}
}

// A chunked upload under the limit is read as it streams and served.
func TestTranscriptionChunked(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	ct, body := upload(t, tone(t, 3, 16000), "model", "stt-large-v3", "response_format", "verbose_json")
	req, _ := http.NewRequest("POST", s.URL+"/v1/audio/transcriptions", io.MultiReader(bytes.NewReader(body)))
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Authorization", "Bearer "+key)
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"duration":3`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// A transcription is listed in flight with its audio seconds while it runs.
func TestTranscriptionInFlight(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0.05")
	ct, body := upload(t, tone(t, 40, 8000), "model", "stt-large-v3") // 2 s of work
	done := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequest("POST", s.URL+"/v1/audio/transcriptions", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- reply{Status: -1, Body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- reply{Status: resp.StatusCode, Body: b}
	}()
	var r reply
	if !harness.Eventually(10*time.Second, func() bool {
		r = s.do("GET", "/api/v1/usage/inflight", "", bearer(key))
		var rows []map[string]any
		_ = json.Unmarshal(r.Body, &rows)
		return len(rows) == 1 && rows[0]["request_type"] == "audio" && rows[0]["audio_seconds"] == 40.0 && rows[0]["worker_name"] == "audio-box"
	}) {
		t.Fatalf("never in flight: %s", r.Body)
	}
	if r := <-done; r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
}

// A worker failure before anything was sent moves the upload to another
// worker, which gets the whole file again.
func TestTranscriptionRetriedElsewhere(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	args := append([]string{"--engine", "sim=tps=0,ttft=0,rtf=0"}, audioAliases...)
	startWorker(t, s.URL, s.tokenFile(), "audio-box-2", args...)
	ct, body := upload(t, tone(t, 5, 16000), "model", "stt-large-v3", "response_format", "verbose_json", "prompt", "sim: fail=503")
	r := s.post("/v1/audio/transcriptions", ct, body, bearer(key))
	// Both workers fail this one: the answer is the last worker's 503.
	if r.Status != 503 || !strings.Contains(string(r.Body), "sim fail=503") {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	row := s.usageRow(key, r.Header.Get("X-Request-Id"))
	if row["attempts"] != 2.0 || row["audio_format"] != nil || row["audio_seconds"] != nil || row["worker_name"] == "" {
		t.Fatalf("usage row of a failure %v", row)
	}
}

// X-Svc-Worker-Id sends an upload to one worker.
func TestTranscriptionPinned(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	args := append([]string{"--engine", "sim=tps=0,ttft=0,rtf=0"}, audioAliases...)
	startWorker(t, s.URL, s.tokenFile(), "audio-box-2", args...)
	w := s.workerNamed(key, "audio-box-2", statusIs("healthy"))
	ct, body := upload(t, tone(t, 2, 16000), "model", "stt-large-v3")
	for range 4 {
		r := s.post("/v1/audio/transcriptions", ct, body, bearer(key), header{"X-Svc-Worker-Id", w["worker_id"].(string)})
		if r.Status != 200 || r.Header.Get("X-Worker-Name") != "audio-box-2" {
			t.Fatalf("%d %s %v", r.Status, r.Body, r.Header)
		}
	}
}

// A client that leaves mid-transcription stops the engine; the row is a
// 499.
func TestTranscriptionClientGone(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=1") // as long as the audio: 30 s
	ct, body := upload(t, tone(t, 30, 8000), "model", "stt-large-v3")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/audio/transcriptions", bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Authorization", "Bearer "+key)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	var id string
	var r reply
	if !harness.Eventually(10*time.Second, func() bool {
		r = s.do("GET", "/api/v1/usage/inflight", "", bearer(key))
		var rows []map[string]any
		_ = json.Unmarshal(r.Body, &rows)
		if len(rows) == 1 && rows[0]["state"] == "running" {
			id, _ = rows[0]["task_id"].(string)
		}
		return id != ""
	}) {
		t.Fatalf("never running: %s", r.Body)
	}
	cancel()
	<-done
	row := s.usageRow(key, id)
	if row["status_code"] != 499.0 || row["error_message"] != "Client disconnected" || row["request_duration_ms"].(float64) > 10000 {
		t.Fatalf("row %v", row)
	}
	// The worker's slot is free again at once.
	w := s.workerNamed(key, "audio-box", func(w map[string]any) bool { return w["active_tasks"] == 0.0 })
	if w == nil {
		t.Fatal("the slot was not freed")
	}
}

// A client that leaves while its upload is still coming is a 499 of the
// model it named, not a malformed body: the connection ended inside the
// body its Content-Length announced.
func TestTranscriptionUploadCutShort(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0")
	ct, body := upload(t, tone(t, 10, 8000), "model", "stt-large-v3")
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	head := fmt.Sprintf("POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
		key, ct, len(body))
	// The model field comes first (upload writes it before the file), then
	// half of the file, and the client goes.
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(body[:len(body)/2]); err != nil {
		t.Fatal(err)
	}
	// The row begins with the request, not with the refusal.
	time.Sleep(600 * time.Millisecond)
	_ = conn.Close()
	var rows []map[string]any
	var row map[string]any
	if !harness.Eventually(10*time.Second, func() bool {
		_ = json.Unmarshal(s.do("GET", "/api/v1/usage/logs?limit=10", "", bearer(key)).Body, &rows)
		for _, r := range rows {
			if r["request_type"] == "audio" {
				row = r
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no row: %v", rows)
	}
	if row["status_code"] != 499.0 || row["error_message"] != "Client disconnected" || row["model"] != "stt-large-v3" ||
		row["request_duration_ms"].(float64) < 500 {
		t.Fatalf("row %v", row)
	}
}

// A JSON transcript still waiting is kept alive with leading whitespace;
// subtitles and text are not padded, since they must begin with their
// first byte.
func TestTranscriptionKeepAlive(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0.03", "--keepalive-after", "300ms", "--keepalive-every", "100ms")
	file := tone(t, 40, 8000) // 1.2 s of work
	for _, tt := range []struct{ format, starts string }{{"verbose_json", "\n"}, {"srt", "1\n"}, {"vtt", "WEBVTT"}, {"text", ""}} {
		ct, body := upload(t, file, "model", "stt-large-v3", "response_format", tt.format)
		r := s.post("/v1/audio/transcriptions", ct, body, bearer(key))
		if r.Status != 200 || !strings.HasPrefix(string(r.Body), tt.starts) || tt.format == "text" && strings.HasPrefix(string(r.Body), "\n") {
			t.Fatalf("%s: %d %q", tt.format, r.Status, r.Body[:min(len(r.Body), 40)])
		}
	}
}

func TestSpeech(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	ctx := context.Background()
	client := sdk(s, key, "/v1")
	var hr *http.Response
	resp, err := client.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{
		Model: "sim-tts", Input: "The quick brown fox jumps over the lazy dog.",
		Voice:          openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("nova")},
		ResponseFormat: openai.AudioSpeechNewParamsResponseFormatWAV,
	}, option.WithResponseInto(&hr))
	if err != nil {
		t.Fatal(err)
	}
	wav, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "audio/wav" || resp.Header.Get("X-Worker-Name") != "audio-box" ||
		resp.Header.Get("X-Worker-Id") == "" || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("headers %v", resp.Header)
	}
	made := checkSpeechWAV(t, wav).Seconds
	// A speech row counts the audio made in speech_seconds, and so do the
	// totals; audio_seconds and audio_format are a transcription's, of the
	// audio it was sent.
	row := s.usageRow(key, resp.Header.Get("X-Request-Id"))
	if row["request_type"] != "speech" || row["status_code"] != 200.0 || row["audio_format"] != nil || row["audio_seconds"] != nil ||
		row["speech_seconds"] != made {
		t.Fatalf("usage row %v, want speech_seconds %v", row, made)
	}
	counted := func(what string, totals map[string]any) {
		t.Helper()
		if totals["requests"] != 1.0 || totals["audio_seconds"] != 0.0 || totals["speech_seconds"] != made {
			t.Fatalf("%s %v, want speech_seconds %v", what, totals, made)
		}
	}
	counted("summary", s.do("GET", "/api/v1/usage/summary?days=1", "", bearer(key)).JSON(t))
	var daily []map[string]any
	_ = json.Unmarshal(s.do("GET", "/api/v1/usage/daily?days=1", "", bearer(key)).Body, &daily)
	if len(daily) != 1 {
		t.Fatalf("daily %v", daily)
	}
	counted("daily", daily[0])
	var breakdown struct {
		Models  []map[string]any `json:"models"`
		Workers []map[string]any `json:"workers"`
	}
	_ = json.Unmarshal(s.do("GET", "/api/v1/usage/breakdown?days=1", "", bearer(key)).Body, &breakdown)
	if len(breakdown.Models) != 1 || len(breakdown.Workers) != 1 {
		t.Fatalf("breakdown %+v", breakdown)
	}
	counted("breakdown by model", breakdown.Models[0])
	counted("breakdown by worker", breakdown.Workers[0])

	// The JSON form: base64 audio, its length, svc.
	r := s.do("POST", "/api/v1/audio/speech", `{"model":"sim-tts","input":"Hello there."}`, bearer(key), header{"Accept", "application/json"})
	var j struct {
		Audio      string         `json:"audio"`
		Format     string         `json:"format"`
		DurationMs int64          `json:"duration_ms"`
		RequestID  string         `json:"request_id"`
		Svc        map[string]any `json:"svc"`
	}
	if err := json.Unmarshal(r.Body, &j); err != nil || r.Status != 200 || j.Format != "wav" || j.RequestID != r.Header.Get("X-Request-Id") {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	audioBytes, err := base64.StdEncoding.DecodeString(j.Audio)
	if err != nil {
		t.Fatal(err)
	}
	info := checkSpeechWAV(t, audioBytes)
	if math.Abs(float64(j.DurationMs)-info.Seconds*1000) > 1 || j.Svc["request_id"] != j.RequestID || j.Svc["worker"] == nil {
		t.Fatalf("JSON form %+v vs %v s", j, info.Seconds)
	}
}

// checkSpeechWAV checks the spec's layout (24 kHz, 16-bit, mono) and that
// the audio is not silence.
func checkSpeechWAV(t *testing.T, wav []byte) audio.Info {
	t.Helper()
	info, err := audio.Probe(bytes.NewReader(wav))
	if err != nil || info.Format != "wav" || info.SampleRate != 24000 || info.Channels != 1 || info.Seconds <= 0 {
		t.Fatalf("speech %+v err %v", info, err)
	}
	if string(wav[34:36]) != "\x10\x00" {
		t.Fatalf("bits per sample %v, want 16", wav[34:36])
	}
	pcm, err := audio.Decode(bytes.NewReader(wav))
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, s := range pcm.Samples {
		sum += float64(s) * float64(s)
	}
	if rms := math.Sqrt(sum / float64(len(pcm.Samples))); rms < 0.01 {
		t.Fatalf("the speech is silence: RMS %.4f", rms)
	}
	return info
}

func TestSpeechRefusals(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	tests := []struct {
		name, body string
		status     int
		check      string
	}{
		{"unknown voice", `{"model":"sim-tts","input":"hi","voice":"darth"}`, 400, "alloy"},
		{"mp3", `{"model":"sim-tts","input":"hi","response_format":"mp3"}`, 400, "only wav"},
		{"too long", `{"model":"sim-tts","input":"` + strings.Repeat("a", 4097) + `"}`, 400, "4,096"},
		{"no input", `{"model":"sim-tts"}`, 422, `"field":"input"`},
		{"malformed", `{"model":`, 400, "Malformed JSON"},
		{"unknown model", `{"model":"tts-nope","input":"hi"}`, 404, "detail"},
		{"a chat model", `{"model":"sim-chat","input":"hi"}`, 404, "/v1/chat/completions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do("POST", "/v1/audio/speech", tt.body, bearer(key))
			if r.Status != tt.status || !strings.Contains(string(r.Body), tt.check) || r.Header.Get("X-Request-Id") == "" {
				t.Fatalf("got %d %s, want %d with %s", r.Status, r.Body, tt.status, tt.check)
			}
		})
	}
	// 4,096 characters are fine, multi-byte ones too.
	r := s.do("POST", "/v1/audio/speech", `{"model":"sim-tts","input":"`+strings.Repeat("é", 4096)+`"}`, bearer(key))
	if r.Status != 200 {
		t.Fatalf("4,096 characters: %d %s", r.Status, r.Body)
	}
}

// A long generation in the JSON form is kept alive with whitespace and
// still names its worker in the body; the raw form waits and starts with
// the audio.
func TestSpeechKeepAlive(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0.4", "--keepalive-after", "300ms", "--keepalive-every", "100ms")
	text := `{"model":"sim-tts","input":"` + strings.Repeat("word ", 10) + `"}` // about 3 s of speech, 1.2 s of work
	r := s.do("POST", "/v1/audio/speech", text, bearer(key), header{"Accept", "application/json"})
	if r.Status != 200 || !strings.HasPrefix(string(r.Body), "\n") {
		t.Fatalf("%d %q", r.Status, r.Body[:min(40, len(r.Body))])
	}
	var j map[string]any
	if err := json.Unmarshal(r.Body, &j); err != nil || j["audio"] == "" || j["svc"] == nil {
		t.Fatalf("late answer: %v", err)
	}
	r = s.do("POST", "/v1/audio/speech", text, bearer(key))
	if r.Status != 200 || string(r.Body[:4]) != "RIFF" || r.Header.Get("X-Worker-Name") != "audio-box" {
		t.Fatalf("raw answer %d %q", r.Status, r.Body[:min(40, len(r.Body))])
	}
}

func TestAudioModelsListed(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	r := s.do("GET", "/v1/models", "", bearer(key))
	var list struct {
		Data []struct {
			ID           string   `json:"id"`
			Capabilities []string `json:"capabilities"`
			Local        string   `json:"local_model"`
			Voices       []string `json:"voices"`
			DefaultVoice string   `json:"default_voice"`
			Simulated    bool     `json:"simulated"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &list); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range list.Data {
		seen[m.ID] = true
		switch m.ID {
		case "stt-large-v3-turbo", "stt-large-v3":
			if len(m.Capabilities) != 1 || m.Capabilities[0] != "transcription" || m.Local != "sim-stt" || !m.Simulated {
				t.Fatalf("%+v", m)
			}
		case "sim-tts":
			if m.Capabilities[0] != "speech" || m.DefaultVoice == "" || len(m.Voices) < 2 || !m.Simulated {
				t.Fatalf("%+v", m)
			}
		}
	}
	if !seen["stt-large-v3-turbo"] || !seen["stt-large-v3"] || !seen["sim-tts"] || seen["sim-stt"] {
		t.Fatalf("models %s", r.Body)
	}
}

// POST /v1/audio/translations is a transcription into English: served
// under both prefixes by the simulator in process and, through the openai
// adapter, by an OpenAI-protocol server (svc sim); its row is an audio
// row; a language or timestamp granularities are refused, and sealed audio
// is sent to transcriptions.
func TestTranslations(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	engine := startSim(t, "tps=0,ttft=0,rtf=0")
	startWorker(t, s.URL, s.tokenFile(), "openai-box", "--engine", "openai="+engine)
	cases := []struct{ prefix, model, worker string }{
		{"/v1", "stt-large-v3", "audio-box"},
		{"/api/v1", "stt-large-v3", "audio-box"},
		{"/v1", "sim-stt", "openai-box"},
	}
	for _, tc := range cases {
		ct, body := upload(t, tone(t, 3, 16000), "model", tc.model, "response_format", "verbose_json")
		id := s.workerNamed(key, tc.worker, statusIs("healthy"))["worker_id"].(string)
		r := s.post(tc.prefix+"/audio/translations", ct, body, bearer(key), header{"X-Svc-Worker-Id", id})
		reply := r.JSON(t)
		if r.Status != 200 || reply["language"] != "en" || reply["text"] == "" || r.Header.Get("X-Worker-Name") != tc.worker {
			t.Fatalf("%s %s on %s: %d %s", tc.prefix, tc.model, tc.worker, r.Status, r.Body)
		}
		row := waitRow(t, s, key, r.Header.Get("X-Request-Id"))
		if row["request_type"] != "audio" || row["audio_seconds"] != 3.0 || row["audio_format"] != "wav" || row["status_code"] != 200.0 {
			t.Fatalf("row %v", row)
		}
	}
	for _, extra := range [][]string{{"language", "de"}, {"timestamp_granularities[]", "word"}} {
		ct, body := upload(t, tone(t, 1, 16000), append([]string{"model", "stt-large-v3", "response_format", "verbose_json"}, extra...)...)
		if r := s.post("/v1/audio/translations", ct, body, bearer(key)); r.Status != 422 || !strings.Contains(string(r.Body), strings.TrimSuffix(extra[0], "[]")) {
			t.Fatalf("%v: %d %s", extra, r.Status, r.Body)
		}
	}
	if r := s.post("/v1/audio/translations", "application/vnd.svc.e2e+json", []byte(`{}`), bearer(key)); r.Status != 400 ||
		!strings.Contains(string(r.Body), "/v1/audio/transcriptions") {
		t.Fatalf("sealed: %d %s", r.Status, r.Body)
	}
}

// A transcription whose upload was read to its end keeps its connection
// for the client's next request, as any other answer does: here a client
// that sends the head, then the form, as curl and Python's http.client do.
func TestTranscriptionKeepsTheConnection(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, seconds := range []float64{1, 12} {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		ctype, body := upload(t, tone(t, seconds, 16000), "model", "stt-large-v3", "response_format", "json")
		head := fmt.Sprintf("POST /v1/audio/transcriptions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
			u.Host, key, ctype, len(body))
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if _, err := c.Write(body); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on the same connection: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("%g s of audio: %d, closed %v", seconds, resp.StatusCode, resp.Close)
		}
	}
}

// A model id no worker could list, of a client's 100 KB, is answered 404
// without being quoted whole, and the request still has its usage row.
func TestHugeModelIDIsRecordedAndNotEchoed(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0")
	model := strings.Repeat("m", 100<<10)
	for _, tt := range []struct{ path, body string }{
		{"/v1/audio/speech", `{"model":"` + model + `","input":"hi"}`},
		{"/v1/chat/completions", `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/embeddings", `{"model":"` + model + `","input":"hi"}`},
		{"/v1/moderations", `{"model":"` + model + `","input":"hi"}`},
	} {
		r := s.do("POST", tt.path, tt.body, bearer(key))
		if r.Status != 404 || len(r.Body) > 4<<10 {
			t.Fatalf("%s = %d, %d bytes", tt.path, r.Status, len(r.Body))
		}
		row := s.usageRow(key, r.Header.Get("X-Request-Id"))
		if m, _ := row["model"].(string); row["status_code"] != 404.0 || !strings.HasSuffix(m, "…") || len(m) > 300 {
			t.Fatalf("%s row %v", tt.path, row["status_code"])
		}
	}
}
