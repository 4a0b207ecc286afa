package server_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/e2ee"
)

// uploadRoutes are the routes that take a multipart upload.
var uploadRoutes = []string{"/v1/audio/transcriptions", "/v1/audio/translations"}

// How FuzzUploads sends its upload: bits of its how.
const (
	// uploadRaw sends the file's bytes as the whole body, with the
	// fields' first line as the Content-Type's boundary: a form the
	// client library would not write.
	uploadRaw = 1 << iota
	uploadFileFirst
	uploadNoFile
	// uploadChunked sends the body without a length, as a client
	// streaming a file from disk does.
	uploadChunked
	// uploadSealed seals a transcription with the private-inference
	// transport.
	uploadSealed
)

// Any multipart upload to the transcription and translation routes is
// answered in time with a status the spec gives a client's mistake or
// success, a request id, an error body of the spec's shape, and a usage
// row of that status, which names the audio's format when it succeeded;
// a transcript names its worker. Its fields are lines of name=value;
// how (uploadRaw, ...) says how the form is written and sent:
//
//	go test ./internal/server -run '^$' -fuzz FuzzUploads -fuzztime 5m
func FuzzUploads(f *testing.F) {
	clip := silentWAV(1600)
	seeds := []struct {
		route  uint8
		fields string
		file   []byte
		how    uint8
	}{
		{0, "model=sim-stt", clip, 0},
		{0, "model=sim-stt\nresponse_format=verbose_json\ntimestamp_granularities[]=word\ntimestamp_granularities[]=segment\nlanguage=en", clip, uploadChunked},
		{0, "model=sim-stt\nresponse_format=srt\ntemperature=0.4\nbeam_size=8", clip, uploadFileFirst},
		{0, "model=sim-stt\nresponse_format=vtt\nprompt=hello", clip, uploadSealed},
		{0, "model=sim-stt\nresponse_format=text", clip, uploadSealed | uploadChunked},
		{1, "model=sim-stt\nresponse_format=text", clip, 0},
		{0, "model=sim-stt\nbeam_size=9\nlanguage=xx", clip, 0},
		{0, "model=sim-stt\nmodel=sim-stt", clip, 0},
		{0, "model=sim-stt", []byte("ID3 not audio"), 0},
		{0, "model=sim-stt", clip[:40], 0},
		{0, "model=sim-stt", nil, uploadNoFile},
		{0, "model=sim-chat", clip, 0},
		{0, "x", []byte("--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nsim-stt\r\n--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n--x--\r\n"), uploadRaw},
		{0, "x", []byte("--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nsim-stt"), uploadRaw | uploadChunked},
	}
	for _, s := range seeds {
		f.Add(s.route, s.fields, s.file, s.how)
	}
	g := startInProcess(f)
	sealing := &http.Client{Timeout: 30 * time.Second, Transport: e2ee.NewTransport(nil, nil)}
	f.Fuzz(func(t *testing.T, route uint8, fields string, file []byte, how uint8) {
		if strings.Contains(fields, "sim:") || bytes.Contains(file, []byte("sim:")) {
			t.Skip("the simulator's own directives fail or hang a request on purpose")
		}
		path := uploadRoutes[int(route)%len(uploadRoutes)]
		ctype, body := uploadForm(fields, file, how)
		var r io.Reader = bytes.NewReader(body)
		if how&uploadChunked != 0 {
			r = io.MultiReader(r) // no length: sent chunked
		}
		req, err := http.NewRequest("POST", g.url+path, r)
		if err != nil {
			t.Skip(err)
		}
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Authorization", "Bearer "+g.key)
		hc, what := g.hc, path
		if how&uploadSealed != 0 && path == uploadRoutes[0] {
			hc, what = sealing, "sealed "+path
		}
		a, err := roundTrip(hc, req)
		if err != nil && strings.Contains(err.Error(), "e2ee:") {
			t.Skip("the transport does not seal it")
		}
		if err != nil && strings.Contains(err.Error(), "invalid header field value") {
			t.Skip("an HTTP client does not send its boundary:", err)
		}
		if err != nil {
			t.Fatalf("%s %q: %v", what, body, err)
		}
		if err := checkAnswer(a); err != nil {
			t.Fatalf("%s %q: %v\nstatus %d: %.2000s", what, body, err, a.status, a.body)
		}
		if a.status == http.StatusOK && (a.header.Get("X-Worker-Id") == "" || a.header.Get("X-Worker-Name") == "") {
			t.Fatalf("%s %q: a transcript without its worker's headers: %v", what, body, a.header)
		}
		row, err := g.usageRow(a.header.Get("X-Request-Id"))
		if err != nil {
			t.Fatalf("%s %q (status %d): %v", what, body, a.status, err)
		}
		if got := row["status_code"]; got != float64(a.status) {
			t.Fatalf("%s %q: answered %d, logged %v: %v", what, body, a.status, got, row)
		}
		format, _ := row["audio_format"].(string)
		if ok := format == "wav" || format == "mp3" || format == "flac"; ok != (a.status == http.StatusOK) {
			t.Fatalf("%s %q: answered %d, logged audio_format %v", what, body, a.status, row["audio_format"])
		}
	})
}

// uploadForm writes FuzzUploads' form: its fields, one name=value a line,
// and file, in the order how asks, or file as the whole body (uploadRaw).
func uploadForm(fields string, file []byte, how uint8) (ctype string, body []byte) {
	if how&uploadRaw != 0 {
		boundary, _, _ := strings.Cut(fields, "\n")
		return "multipart/form-data; boundary=" + boundary, file
	}
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	addFile := func() {
		if how&uploadNoFile != 0 {
			return
		}
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="clip.wav"`)
		h.Set("Content-Type", "application/octet-stream")
		p, _ := w.CreatePart(h)
		_, _ = p.Write(file)
	}
	if how&uploadFileFirst != 0 {
		addFile()
	}
	for line := range strings.SplitSeq(fields, "\n") {
		name, value, _ := strings.Cut(line, "=")
		_ = w.WriteField(name, value)
	}
	if how&uploadFileFirst == 0 {
		addFile()
	}
	_ = w.Close()
	return w.FormDataContentType(), b.Bytes()
}

// silentWAV is a 16 kHz mono 16-bit WAV file of n silent samples.
func silentWAV(n int) []byte {
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + 2*n))
	b.WriteString("WAVEfmt ")
	le(uint32(16))    // the format chunk's size
	le(uint16(1))     // PCM
	le(uint16(1))     // channels
	le(uint32(16000)) // sample rate
	le(uint32(32000)) // bytes a second
	le(uint16(2))     // bytes a frame
	le(uint16(16))    // bits a sample
	b.WriteString("data")
	le(uint32(2 * n))
	b.Write(make([]byte, 2*n))
	return b.Bytes()
}
