package transcription

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// wav is a silent 16 kHz mono 16-bit WAV file of n samples.
func wav(n int) []byte {
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + 2*n))
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(1))
	le(uint16(1))
	le(uint32(16000))
	le(uint32(32000))
	le(uint16(2))
	le(uint16(16))
	b.WriteString("data")
	le(uint32(2 * n))
	b.Write(make([]byte, 2*n))
	return b.Bytes()
}

// form builds a multipart upload; a field named "file" is sent as a file.
func form(t testing.TB, fields ...[2]string) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, f := range fields {
		var err error
		if f[0] == "file" {
			var fw io.Writer
			if fw, err = w.CreateFormFile("file", "speech.mp3"); err == nil {
				_, err = fw.Write([]byte(f[1]))
			}
		} else {
			err = w.WriteField(f[0], f[1])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), b.Bytes()
}

func TestParse(t *testing.T) {
	second := string(wav(16000))
	tests := []struct {
		name   string
		fields [][2]string
		check  func(t *testing.T, r *Request)
	}{
		{"defaults", [][2]string{{"file", second}, {"model", "stt-large-v3"}}, func(t *testing.T, r *Request) {
			want := api.TranscriptionParams{BeamSize: DefaultBeamSize, Format: api.AudioWAV, Seconds: 1, Bytes: int64(len(second))}
			if r.Model != "stt-large-v3" || r.ResponseFormat != FormatJSON || r.Params != want {
				t.Fatalf("got %+v %+v", r, r.Params)
			}
		}},
		{"every field", [][2]string{
			{"model", "stt-large-v3-turbo"}, {"language", "DE"}, {"prompt", "Grüße"}, {"temperature", "0"},
			{"beam_size", "2"}, {"response_format", "verbose_json"}, {"timestamp_granularities[]", "segment"},
			{"timestamp_granularities[]", "word"}, {"file", second},
		}, func(t *testing.T, r *Request) {
			p := r.Params
			if p.Language != "de" || p.Prompt != "Grüße" || p.BeamSize != 2 || !p.Words || r.ResponseFormat != FormatVerboseJSON {
				t.Fatalf("got %+v", p)
			}
		}},
		{"sampling switches beam search off", [][2]string{{"file", second}, {"model", "m"}, {"temperature", "0.4"}, {"beam_size", "3"}},
			func(t *testing.T, r *Request) {
				if r.Params.BeamSize != 0 || r.Params.Temperature != 0.4 {
					t.Fatalf("got %+v", r.Params)
				}
			}},
		{"unknown fields are ignored", [][2]string{{"file", second}, {"model", "m"}, {"include[]", "logprobs"}},
			func(t *testing.T, r *Request) {}},
		// An audio file under another field's name is not the file, and
		// neither its size nor its repetition is held against it.
		{"unknown fields are ignored whatever their size", [][2]string{{"file", second}, {"model", "m"},
			{"audio", strings.Repeat("x", 100<<10)}, {"audio", "again"}},
			func(t *testing.T, r *Request) {
				if r.Model != "m" {
					t.Fatalf("got %+v", r)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct, body := form(t, tt.fields...)
			var spool bytes.Buffer
			r, err := Parse(ct, bytes.NewReader(body), &spool)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r)
			// The spool holds the audio, whole, to be sent to each worker tried.
			if spool.String() != second {
				t.Fatalf("audio of %d bytes spooled as %d", len(second), spool.Len())
			}
		})
	}
}

func TestParseRefusals(t *testing.T) {
	audio := string(wav(1600))
	tests := []struct {
		name   string
		ctype  string // overrides the form's content type
		fields [][2]string
		status int
		field  string // the 422's first field, or the error's param
		msg    string
	}{
		{"not multipart", "application/json", [][2]string{{"model", "m"}}, 400, "", "multipart/form-data"},
		{"no boundary", "multipart/form-data", [][2]string{{"model", "m"}}, 400, "", "no boundary"},
		{"no file", "", [][2]string{{"model", "m"}}, 422, "file", "required"},
		{"no model", "", [][2]string{{"file", audio}}, 422, "model", "required"},
		{"empty model", "", [][2]string{{"file", audio}, {"model", " "}}, 422, "model", "empty"},
		{"two files", "", [][2]string{{"file", audio}, {"file", audio}, {"model", "m"}}, 422, "file", "one file"},
		{"two models", "", [][2]string{{"file", audio}, {"model", "m"}, {"model", "n"}}, 422, "model", "once"},
		{"bad format", "", [][2]string{{"file", audio}, {"model", "m"}, {"response_format", "mp3"}}, 422, "response_format", "one of"},
		{"bad language", "", [][2]string{{"file", audio}, {"model", "m"}, {"language", "english"}}, 422, "language", "ISO 639-1"},
		{"unknown language", "", [][2]string{{"file", audio}, {"model", "m"}, {"language", "qq"}}, 422, "language", "ISO 639-1"},
		{"temperature not a number", "", [][2]string{{"file", audio}, {"model", "m"}, {"temperature", "warm"}}, 422, "temperature", "number"},
		{"temperature too high", "", [][2]string{{"file", audio}, {"model", "m"}, {"temperature", "1.5"}}, 422, "temperature", "between"},
		{"temperature NaN", "", [][2]string{{"file", audio}, {"model", "m"}, {"temperature", "NaN"}}, 422, "temperature", "between"},
		{"temperature infinite", "", [][2]string{{"file", audio}, {"model", "m"}, {"temperature", "-Inf"}}, 422, "temperature", "between"},
		{"beam too wide", "", [][2]string{{"file", audio}, {"model", "m"}, {"beam_size", "9"}}, 422, "beam_size", "1 to 8"},
		{"beam zero", "", [][2]string{{"file", audio}, {"model", "m"}, {"beam_size", "0"}}, 422, "beam_size", "1 to 8"},
		{"beam not whole", "", [][2]string{{"file", audio}, {"model", "m"}, {"beam_size", "2.5"}}, 422, "beam_size", "whole"},
		{"granularity without verbose_json", "", [][2]string{{"file", audio}, {"model", "m"}, {"timestamp_granularities[]", "word"}},
			422, "timestamp_granularities", "verbose_json"},
		{"unknown granularity", "", [][2]string{{"file", audio}, {"model", "m"}, {"response_format", "verbose_json"},
			{"timestamp_granularities[]", "letter"}}, 422, "timestamp_granularities.0", "segment, word"},
		{"stream", "", [][2]string{{"file", audio}, {"model", "m"}, {"stream", "true"}}, 422, "stream", "not supported"},
		{"prompt not UTF-8", "", [][2]string{{"file", audio}, {"model", "m"}, {"prompt", "\xff\xfe"}}, 422, "prompt", "UTF-8"},
		{"prompt too long", "", [][2]string{{"file", audio}, {"model", "m"}, {"prompt", strings.Repeat("a", maxField+1)}}, 422, "prompt", "longer"},
		// One failure for the field, not a second saying it was not sent.
		{"model too long", "", [][2]string{{"file", audio}, {"model", strings.Repeat("m", maxField+1)}}, 422, "model", "Invalid request: model: longer than 64 KB"},
		{"text is not audio", "", [][2]string{{"file", "hello, this is a text file"}, {"model", "m"}}, 400, "file", "Unsupported audio format"},
		{"empty file", "", [][2]string{{"file", ""}, {"model", "m"}}, 400, "file", "Unsupported audio format"},
		{"damaged wav", "", [][2]string{{"file", "RIFF\x24\x00\x00\x00WAVEjunk"}, {"model", "m"}}, 400, "file", "cannot be read"},
		{"text after an ID3v2 tag", "", [][2]string{{"file", "ID3\x03\x00\x00\x00\x00\x00\x0a" + strings.Repeat("\x00", 10) +
			strings.Repeat("hello world not audio", 10)}, {"model", "m"}}, 400, "file", "Unsupported audio format"},
		{"damaged mp3 after an ID3v2 tag", "", [][2]string{{"file", "ID3\x03\x00\x00\x00\x00\x00\x0a" + strings.Repeat("\x00", 10) +
			"\xff\xfb\x90\x00" + strings.Repeat("hello world not audio", 10)}, {"model", "m"}}, 400, "file", "cannot be read: damaged mp3 file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct, body := form(t, tt.fields...)
			if tt.ctype != "" {
				ct = tt.ctype
			}
			r, err := Parse(ct, bytes.NewReader(body), io.Discard)
			var ae *api.Error
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want an *api.Error", err)
			}
			// Once the form's fields are read, its refusal's row names
			// the model it asked for.
			if model := formField(tt.fields, "model"); tt.ctype == "" && model == "m" && (r == nil || r.Model != "m") {
				t.Fatalf("request %+v beside the error, want one naming model m", r)
			}
			if ae.HTTPStatus() != tt.status || !strings.Contains(ae.Message, tt.msg) {
				t.Fatalf("got %d %q, want %d containing %q", ae.HTTPStatus(), ae.Message, tt.status, tt.msg)
			}
			switch {
			case tt.status == http.StatusUnprocessableEntity && (len(ae.Fields) == 0 || ae.Fields[0].Field != tt.field):
				t.Fatalf("fields %+v, want %s first", ae.Fields, tt.field)
			case tt.status != http.StatusUnprocessableEntity && ae.Param != tt.field:
				t.Fatalf("param %q, want %q", ae.Param, tt.field)
			}
		})
	}
}

// formField is the last value of a form's field name, or "".
func formField(fields [][2]string, name string) string {
	v := ""
	for _, f := range fields {
		if f[0] == name {
			v = f[1]
		}
	}
	return v
}

// The spec's exact message for content that is not audio, whatever the
// file is called.
// A translation is the transcription form less what English output makes
// moot: a language, timestamp granularities.
func TestParseTranslation(t *testing.T) {
	audio := string(wav(16000))
	ct, body := form(t, [2]string{"file", audio}, [2]string{"model", "m"}, [2]string{"response_format", "verbose_json"},
		[2]string{"prompt", "names: Oslo"}, [2]string{"temperature", "0.2"})
	r, err := ParseTranslation(ct, bytes.NewReader(body), io.Discard)
	if err != nil || !r.Params.Translate || r.Params.Language != "" || r.Params.Prompt != "names: Oslo" || r.ResponseFormat != FormatVerboseJSON {
		t.Fatalf("%+v, %v", r, err)
	}
	if r, err := Parse(ct, bytes.NewReader(body), io.Discard); err != nil || r.Params.Translate {
		t.Fatalf("a transcription asks for a translation: %+v, %v", r, err)
	}
	for _, tt := range []struct {
		field string
		extra [2]string
	}{
		{"language", [2]string{"language", "de"}},
		{"timestamp_granularities", [2]string{"timestamp_granularities[]", "word"}},
	} {
		ct, body := form(t, [2]string{"file", audio}, [2]string{"model", "m"}, [2]string{"response_format", "verbose_json"}, tt.extra)
		_, err := ParseTranslation(ct, bytes.NewReader(body), io.Discard)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.HTTPStatus() != http.StatusUnprocessableEntity || len(ae.Fields) != 1 || ae.Fields[0].Field != tt.field {
			t.Fatalf("%s: %v", tt.field, err)
		}
	}
}

func TestUnsupportedMessage(t *testing.T) {
	ct, body := form(t, [2]string{"file", "OggS\x00\x02 an ogg file"}, [2]string{"model", "m"})
	_, err := Parse(ct, bytes.NewReader(body), io.Discard)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Message != "Unsupported audio format" || ae.HTTPStatus() != 400 {
		t.Fatalf("err = %v", err)
	}
}

func TestParseTooLarge(t *testing.T) {
	big := wav(MaxFileBytes/2 + 1) // one sample over 25 MB of data, plus the header
	ct, body := form(t, [2]string{"file", string(big)}, [2]string{"model", "m"})
	if _, err := Parse(ct, bytes.NewReader(body), io.Discard); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	// A file over the limit that is not audio, or is damaged, is too
	// large before it is anything else: 413 before 400.
	for name, file := range map[string][]byte{
		"not audio": bytes.Repeat([]byte("x"), MaxFileBytes+1),
		"damaged":   append([]byte("RIFF\x00\x00\x00\x00WAVEjunk"), make([]byte, MaxFileBytes)...),
	} {
		ct, body := form(t, [2]string{"file", string(file)}, [2]string{"model", "m"})
		if _, err := Parse(ct, bytes.NewReader(body), io.Discard); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%s: err = %v, want ErrTooLarge", name, err)
		}
	}
	// Exactly at the limit is accepted.
	edge := wav((MaxFileBytes - 44) / 2)
	ct, body = form(t, [2]string{"file", string(edge)}, [2]string{"model", "m"})
	r, err := Parse(ct, bytes.NewReader(body), io.Discard)
	if err != nil || r.Params.Bytes != MaxFileBytes {
		t.Fatalf("a %d-byte file: %v", len(edge), err)
	}
}

func TestRender(t *testing.T) {
	tr := &api.Transcript{Language: "en", Duration: 3.5, Text: " Hello there. General Kenobi. ",
		Segments: []api.Segment{{ID: 0, Start: 0, End: 1.2, Text: " Hello there."}, {ID: 1, Start: 1.5, End: 3.5, Text: " General Kenobi."}},
		Words:    []api.Word{{Word: "Hello", Start: 0, End: 0.5}}}
	svc := json.RawMessage(`{"worker":{"id":"w1","name":"box","version":null},"request_id":"r1"}`)
	tests := []struct {
		format, granularity string
		ctype               string
		check               func(t *testing.T, body string)
	}{
		{FormatJSON, "", "application/json", func(t *testing.T, body string) {
			var m map[string]any
			_ = json.Unmarshal([]byte(body), &m)
			if m["text"] != "Hello there. General Kenobi." || m["svc"] == nil || m["segments"] != nil {
				t.Fatalf("json %s", body)
			}
		}},
		{FormatText, "", "text/plain; charset=utf-8", func(t *testing.T, body string) {
			if body != "Hello there. General Kenobi.\n" {
				t.Fatalf("text %q", body)
			}
		}},
		{FormatSRT, "", "application/x-subrip; charset=utf-8", func(t *testing.T, body string) {
			if !strings.HasPrefix(body, "1\n00:00:00,000 --> 00:00:01,200\nHello there.\n\n2\n") {
				t.Fatalf("srt %q", body)
			}
		}},
		{FormatVTT, "", "text/vtt; charset=utf-8", func(t *testing.T, body string) {
			if !strings.HasPrefix(body, "WEBVTT\n\n") || !strings.Contains(body, "00:00:01.500 --> 00:00:03.500") {
				t.Fatalf("vtt %q", body)
			}
		}},
		{FormatVerboseJSON, "", "application/json", func(t *testing.T, body string) {
			var m map[string]any
			_ = json.Unmarshal([]byte(body), &m)
			segs, _ := m["segments"].([]any)
			if m["task"] != "transcribe" || m["language"] != "en" || m["duration"] != 3.5 || len(segs) != 2 || m["words"] != nil {
				t.Fatalf("verbose_json %s", body)
			}
			seg := segs[0].(map[string]any)
			for _, k := range []string{"id", "start", "end", "text", "avg_logprob", "no_speech_prob"} {
				if _, ok := seg[k]; !ok {
					t.Fatalf("segment without %s: %v", k, seg)
				}
			}
		}},
		{FormatVerboseJSON, "word", "application/json", func(t *testing.T, body string) {
			if !strings.Contains(body, `"words":[{"word":"Hello","start":0,"end":0.5}]`) {
				t.Fatalf("verbose_json with words %s", body)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.format+tt.granularity, func(t *testing.T) {
			r := &Request{ResponseFormat: tt.format, Params: api.TranscriptionParams{Words: tt.granularity == "word", Seconds: 3.5}}
			ctype, body, err := r.Render(tr, svc)
			if err != nil || ctype != tt.ctype {
				t.Fatalf("content type %q err %v", ctype, err)
			}
			tt.check(t, string(body))
			if r.JSON() != strings.HasPrefix(ctype, "application/json") {
				t.Fatal("JSON() disagrees with the content type")
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	ct, body := form(f, [2]string{"file", string(wav(100))}, [2]string{"model", "m"}, [2]string{"language", "en"})
	f.Add(body)
	f.Add([]byte("--x\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nRIFF\r\n--x--\r\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var spool bytes.Buffer
		r, err := Parse(ct, bytes.NewReader(body), &spool)
		if err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.HTTPStatus() < 400 || ae.HTTPStatus() > 499 {
				t.Fatalf("err = %v, want a 4xx *api.Error", err)
			}
			return
		}
		if int64(spool.Len()) < r.Params.Bytes {
			t.Fatalf("parsed a %d-byte file, but spooled %d bytes", r.Params.Bytes, spool.Len())
		}
	})
}

// A body over MaxBody is refused as too large whatever else is wrong
// with it, after reading no more than the limit and a little.
func TestParseBodyTooLarge(t *testing.T) {
	r := &countingReader{r: io.MultiReader(strings.NewReader("not a form"), zeros{})}
	_, err := Parse("multipart/form-data; boundary=x", r, io.Discard)
	if !errors.Is(err, ErrBodyTooLarge) {
		t.Fatalf("err = %v, want ErrBodyTooLarge", err)
	}
	if r.n > MaxBody+64<<10 {
		t.Fatalf("read %d bytes of an endless body", r.n)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// fullSpool takes n bytes, then fails as a full disk does.
type fullSpool struct{ n int }

func (f *fullSpool) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k := f.n
		f.n = 0
		return k, &fs.PathError{Op: "write", Path: "upload-1", Err: syscall.ENOSPC}
	}
	f.n -= len(p)
	return len(p), nil
}

// TestParseSpoolFull: an upload the gateway cannot hold is its 503, with a
// wait, not the request's fault, and the refusal's row names the model.
func TestParseSpoolFull(t *testing.T) {
	for _, order := range [][][2]string{
		{{"model", "stt-large-v3"}, {"file", string(wav(32000))}},
		{{"file", string(wav(32000))}, {"model", "stt-large-v3"}},
	} {
		ct, body := form(t, order...)
		r, err := Parse(ct, bytes.NewReader(body), &fullSpool{n: 1000})
		ae, ok := errors.AsType[*api.Error](err)
		if !ok || ae.HTTPStatus() != http.StatusServiceUnavailable || ae.RetryAfter <= 0 || !strings.Contains(ae.Message, "disk is full") {
			t.Fatalf("err = %#v, want a 503 naming the full disk", err)
		}
		if r == nil || r.Model != "stt-large-v3" {
			t.Fatalf("request %+v, want its model", r)
		}
	}
}

// A form that does not parse is a 400 saying what to mend, in the
// client's terms rather than the multipart reader's.
func TestParseMalformedForms(t *testing.T) {
	const ct = "multipart/form-data; boundary=B"
	tests := []struct{ name, body, want string }{
		{"cut off in a part", "--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm", "the body ended before the form did"},
		{"no closing boundary", "--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n", "the body ended before the form did"},
		{"not a form", "model=m", "the body ended before the form did"},
		{"empty", "", "the body ended before the form did"},
		{"bad part header", "--B\r\nno colon here\r\n\r\nm\r\n--B--", "a part's headers cannot be read"},
		{"huge part headers", "--B\r\nContent-Disposition: form-data; name=\"model\"\r\n" + strings.Repeat("X-A: b\r\n", 20000) + "\r\nm\r\n--B--",
			"a part's headers are too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(ct, strings.NewReader(tt.body), io.Discard)
			ae, ok := errors.AsType[*api.Error](err)
			if !ok || ae.HTTPStatus() != http.StatusBadRequest || !strings.Contains(ae.Message, tt.want) || strings.Contains(ae.Message, "NextPart") {
				t.Fatalf("err = %v, want a 400 saying %q", err, tt.want)
			}
		})
	}
}

// A body over MaxBody because of a field other than the file is not
// blamed on the audio alone.
func TestParseBodyTooLargeByAField(t *testing.T) {
	ct, body := form(t, [2]string{"model", "m"}, [2]string{"notes", strings.Repeat("n", MaxBody)}, [2]string{"file", string(wav(1600))})
	_, err := Parse(ct, bytes.NewReader(body), io.Discard)
	if !errors.Is(err, ErrBodyTooLarge) || !strings.Contains(err.Error(), "the form around it") {
		t.Fatalf("err = %v", err)
	}
}
